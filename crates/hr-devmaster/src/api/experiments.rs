//! Experiments and their trials: create, read, pause / activate / kill / cancel, list, delete.

use std::sync::Arc;

use axum::{
    Json,
    body::Bytes,
    extract::{Path, State as AxState},
};
use hr_det::wire::{Experiment, State, Trial};
use serde_json::{Value, json};

use super::{Caller, M, find_experiment, find_trial, pagination, parse, with_cli_fields};
use crate::{
    error::{ApiError, ApiResult},
    info::now_rfc3339,
    master::Master,
    scheduler,
    state::{ExperimentRec, MasterState, TrialRec},
};

/// An experiment as the Rust client reads it (`hr_det::wire::Experiment`, so both sides share
/// one definition), plus the fields only the `det` CLI reads.
pub(super) fn experiment_json(state: &MasterState, e: &ExperimentRec) -> Value {
    // Trials report progress in the searcher's units, as Determined's master reads them; an
    // ended trial counts whole, and the search's trials not yet created count nothing.
    let trials: Vec<&TrialRec> = state.trials_of(e.id).collect();
    let planned = crate::searcher::Search::of(&e.config).map_or(trials.len(), |s| s.trials());
    let done: f64 = trials
        .iter()
        .map(|t| {
            if t.state.is_terminal() {
                1.0
            } else {
                (t.progress / e.max_length.max(1) as f64).clamp(0.0, 1.0)
            }
        })
        .sum();
    let progress = done / planned.max(1) as f64;
    let experiment = Experiment {
        id: e.id,
        archived: false,
        config: e.config.clone(),
        job_id: format!("job-{}", e.id),
        name: e.name.clone(),
        num_trials: i32::try_from(trials.len()).unwrap_or(i32::MAX),
        original_config: e.original_config.clone(),
        project_id: e.project_id,
        project_owner_id: 1,
        searcher_type: e
            .config
            .pointer("/searcher/name")
            .and_then(Value::as_str)
            .unwrap_or("single")
            .to_owned(),
        start_time: e.start_time.clone(),
        state: e.state,
        username: "determined".to_owned(),
        end_time: e.end_time.clone(),
        description: Some(
            e.config
                .get("description")
                .and_then(Value::as_str)
                .unwrap_or_default()
                .to_owned(),
        ),
        resource_pool: Some("default".to_owned()),
        labels: e
            .config
            .get("labels")
            .and_then(Value::as_array)
            .map(|l| {
                l.iter()
                    .filter_map(Value::as_str)
                    .map(str::to_owned)
                    .collect()
            })
            .unwrap_or_default(),
        progress: Some(progress),
        workspace_id: Some(1),
    };
    with_cli_fields(
        &experiment,
        json!({
            "workspaceName": "Uncategorized", "projectName": "Uncategorized", "notes": "",
            "forkedFrom": null, "parentArchived": false,
            "hyperparameters": e.config.get("hyperparameters").cloned().unwrap_or(json!({})),
            "trialIds": trials.iter().map(|t| t.id).collect::<Vec<_>>(), "displayName": "", "userId": 2,
            "checkpointCount": state.checkpoints.iter().filter(|c| c.experiment_id == e.id).count(),
            "unmanaged": false, "externalExperimentId": null, "modelDefinitionSize": 0,
        }),
    )
}

/// A trial as the Rust client reads it (`hr_det::wire::Trial`), plus the `det` CLI's fields.
pub(super) fn trial_json(state: &MasterState, t: &TrialRec) -> Value {
    let trial = Trial {
        id: t.id,
        experiment_id: t.experiment_id,
        hparams: if t.hparams.is_null() {
            json!({})
        } else {
            t.hparams.clone()
        },
        restarts: t.restarts,
        start_time: t.start_time.clone(),
        state: t.state,
        total_batches_processed: t.total_batches,
        end_time: t.end_time.clone(),
        task_id: Some(t.task_id.clone()),
        run_id: None,
    };
    let config = state
        .experiments
        .get(&t.experiment_id)
        .map_or(Value::Null, |e| e.config.clone());
    let checkpoints: Vec<_> = state
        .checkpoints
        .iter()
        .filter(|c| c.trial_id == t.id)
        .collect();
    let size: i64 = checkpoints
        .iter()
        .flat_map(|c| c.checkpoint.resources.values())
        .sum();
    with_cli_fields(
        &trial,
        json!({
            "taskIds": [t.task_id], "runnerState": "", "wallClockTime": 0.0,
            "searcherMetricValue": super::workloads::searcher_value(state, t.id, &config),
            "totalCheckpointSize": size.to_string(), "checkpointCount": checkpoints.len(),
            "summaryMetrics": super::workloads::summary_metrics(state, t.id),
        }),
    )
}

/// What the devmaster refuses at create rather than run differently: a searcher it does not
/// run (or one missing what it needs), more GPU slots per trial than it was started with, and
/// hyperparameter specs that cannot be drawn.
fn refuse_what_it_cannot_run(dm: &crate::DevmasterConfig, config: &Value) -> Result<(), ApiError> {
    // Determined's default is one slot; only an explicit request beyond ours is refused, so
    // configs that leave it unset keep running as processes here.
    if let Some(slots) = config
        .pointer("/resources/slots_per_trial")
        .and_then(Value::as_u64)
        && slots > u64::from(dm.slots)
    {
        return Err(ApiError::InvalidArgument(format!(
            "resources.slots_per_trial: {slots} slot(s) asked for, but this devmaster has {}; \
             start it with --slots {slots} (its trials then run as processes sharing this \
             machine), or ask for fewer",
            dm.slots
        )));
    }
    crate::searcher::Search::of(config)
        .map(|_| ())
        .map_err(ApiError::InvalidArgument)
}

pub(super) async fn create_experiment(
    AxState(m): M,
    caller: Caller,
    body: Bytes,
) -> ApiResult<Json<Value>> {
    caller.must_be_user()?;
    let req: hr_det::wire::CreateExperimentRequest = parse(&body)?;
    let mut config = hr_config::parse_yaml(&req.config, "config")
        .map_err(|e| ApiError::InvalidArgument(format!("invalid experiment config: {e}")))?;
    if !config.is_object() {
        return Err(ApiError::InvalidArgument(
            "invalid experiment config: not a mapping".into(),
        ));
    }
    let errors = hr_config::schema::SchemaSet::embedded()
        .validate(
            hr_config::schema::EXPERIMENT_SCHEMA,
            &config,
            hr_config::schema::Phase::Sanity,
        )
        .map_err(|e| ApiError::Internal(e.to_string()))?;
    if !errors.is_empty() {
        let list: Vec<String> = errors.iter().map(ToString::to_string).collect();
        return Err(ApiError::InvalidArgument(format!(
            "invalid experiment config: {}",
            list.join("; ")
        )));
    }
    let max_length = match config.pointer("/searcher/max_length") {
        Some(Value::Number(n)) => n.as_i64(),
        Some(v) => ["batches", "records", "epochs"]
            .iter()
            .find_map(|k| v.get(k).and_then(Value::as_i64)),
        None => None,
    }
    .ok_or_else(|| ApiError::InvalidArgument("searcher.max_length is required".into()))?;
    if config.get("entrypoint").is_none() {
        return Err(ApiError::InvalidArgument("entrypoint is required".into()));
    }
    refuse_what_it_cannot_run(&m.config, &config)?;
    if config.get("checkpoint_storage").is_none_or(Value::is_null) {
        let dir = m.config.state_dir.join("checkpoints");
        config["checkpoint_storage"] =
            json!({"type": "directory", "container_path": dir.display().to_string()});
    }
    // Trials run on this machine: their storage must keep a folder here (as Determined's expconf
    // rules refuse a storage_path outside host_path).
    hr_config::CheckpointStorage::from_expconf(&config["checkpoint_storage"])
        .and_then(|s| s.folder(hr_config::StorageView::Host))
        .map_err(|e| ApiError::InvalidArgument(e.to_string()))?;
    if req.validate_only {
        return Ok(Json(json!({})));
    }
    // The model definition is written before the lock is taken, and kept under the new id.
    let staged = match req.model_definition.as_deref() {
        Some(files) if !files.is_empty() => {
            Some(crate::context::stage(&m.config.state_dir, files)?)
        }
        _ => None,
    };
    let mut state = m.state();
    let id = state.next_experiment;
    state.next_experiment += 1;
    if let Some(staged) = &staged {
        crate::context::keep(&m.config.state_dir, staged, id).map_err(|e| {
            let _ = std::fs::remove_dir_all(staged);
            ApiError::Internal(format!("cannot keep the model definition: {e}"))
        })?;
    }
    let name = config
        .get("name")
        .and_then(Value::as_str)
        .map_or_else(|| format!("Experiment ({id})"), str::to_owned);
    config["name"] = json!(name);
    let max_restarts = config
        .get("max_restarts")
        .and_then(Value::as_i64)
        .and_then(|n| i32::try_from(n).ok())
        .unwrap_or(5);
    let rec = ExperimentRec {
        id,
        name,
        original_config: req.config,
        config,
        state: if req.activate {
            State::Active
        } else {
            State::Paused
        },
        project_id: req.project_id.unwrap_or(1),
        start_time: now_rfc3339(),
        end_time: None,
        max_length,
        max_restarts,
        asha: None,
    };
    m.stage_experiment(&rec);
    state.experiments.insert(id, rec.clone());
    let body =
        json!({"experiment": experiment_json(&state, &rec), "config": rec.config, "warnings": []});
    m.persist(state);
    if req.activate {
        run_experiment(&m, id);
    }
    Ok(Json(body))
}

/// Runs an active experiment: its trials that have not ended become active again, the trials
/// its searcher has due are created, and each gets an allocation.
pub(super) fn run_experiment(m: &Arc<Master>, experiment: i32) {
    let to_allocate: Vec<i32> = {
        let mut state = m.state();
        let Some(exp) = state.experiments.get(&experiment).cloned() else {
            return;
        };
        for t in state.trials.values_mut() {
            if t.experiment_id == experiment && !t.state.is_terminal() {
                t.state = State::Active;
            }
        }
        crate::searcher::create_due(&mut state, &exp);
        // A trial waiting for the searcher's decision gets an allocation once it has work.
        let ids = state
            .trials_of(experiment)
            .filter(|t| !t.state.is_terminal() && !t.waiting())
            .map(|t| t.id)
            .collect();
        m.persist(state);
        ids
    };
    // A trial with a running allocation keeps it (`allocate` checks under the state lock).
    for trial in to_allocate {
        scheduler::allocate(m, trial);
    }
}

pub(super) async fn get_experiment(
    AxState(m): M,
    _caller: Caller,
    Path(id): Path<i32>,
) -> ApiResult<Json<Value>> {
    let state = m.state();
    let e = find_experiment(&state, id)?;
    Ok(Json(
        json!({"experiment": experiment_json(&state, &e), "config": e.config, "jobSummary": null}),
    ))
}

/// `GET /api/v1/experiments` (`det experiment list`): every experiment, one page (the devmaster
/// has one user and no archive, so the CLI's filters select them all).
pub(super) async fn list_experiments(AxState(m): M, _caller: Caller) -> ApiResult<Json<Value>> {
    let state = m.state();
    let experiments: Vec<Value> = state
        .experiments
        .values()
        .map(|e| experiment_json(&state, e))
        .collect();
    Ok(Json(
        json!({"experiments": experiments, "pagination": pagination(experiments.len())}),
    ))
}

pub(super) async fn experiment_action(
    AxState(m): M,
    caller: Caller,
    Path((id, action)): Path<(i32, String)>,
) -> ApiResult<Json<Value>> {
    caller.must_be_user()?;
    // No await below: the guard is held by this thread until the action is applied.
    let _turn = m
        .transitions
        .lock()
        .unwrap_or_else(std::sync::PoisonError::into_inner);
    let exp = find_experiment(&m.state(), id)?;
    let incompatible = || {
        ApiError::FailedPrecondition(format!(
            "experiment in incompatible state {}",
            exp.state.as_str()
        ))
    };
    let set = |exp_state: State, trial_state: Option<State>, only_idle: bool| {
        let mut state = m.state();
        if let Some(e) = state.experiments.get_mut(&id) {
            e.state = exp_state;
            if exp_state.is_terminal() {
                e.end_time = Some(now_rfc3339());
            }
        }
        // Trials that ended keep their state; with `only_idle`, so do those still running.
        let allocs: Vec<i32> = m.allocs().keys().copied().collect();
        for t in state.trials.values_mut().filter(|t| {
            t.experiment_id == id
                && !t.state.is_terminal()
                && !(only_idle && allocs.contains(&t.id))
        }) {
            if let Some(ts) = trial_state {
                t.state = ts;
                if ts.is_terminal() {
                    t.end_time = Some(now_rfc3339());
                }
            }
        }
        m.persist(state);
    };
    let trials: Vec<i32> = m.state().trials_of(id).map(|t| t.id).collect();
    let running: Vec<i32> = {
        let allocs = m.allocs();
        trials
            .iter()
            .copied()
            .filter(|t| allocs.contains_key(t))
            .collect()
    };
    match action.as_str() {
        "pause" => {
            if exp.state.is_terminal() {
                return Err(incompatible());
            }
            set(State::Paused, Some(State::Paused), false);
            for t in running {
                scheduler::stop_allocation(&m, t, false);
            }
        }
        "activate" => {
            if exp.state.is_terminal()
                || matches!(exp.state, State::StoppingKilled | State::StoppingCanceled)
            {
                return Err(incompatible());
            }
            set(State::Active, None, false);
            run_experiment(&m, id);
        }
        "kill" | "cancel" => {
            if exp.state.is_terminal() {
                return Ok(Json(json!({})));
            }
            let kill = action == "kill";
            if running.is_empty() {
                set(State::Canceled, Some(State::Canceled), false);
            } else {
                // Trials without an allocation end now; the running ones as they exit.
                set(
                    if kill {
                        State::StoppingKilled
                    } else {
                        State::StoppingCanceled
                    },
                    Some(State::Canceled),
                    true,
                );
                for t in running {
                    scheduler::stop_allocation(&m, t, kill);
                }
            }
        }
        other => {
            return Err(ApiError::NotFound(format!(
                "unknown experiment action {other:?}"
            )));
        }
    }
    Ok(Json(json!({})))
}

pub(super) async fn list_trials(
    AxState(m): M,
    _caller: Caller,
    Path(id): Path<i32>,
) -> ApiResult<Json<Value>> {
    let state = m.state();
    let e = find_experiment(&state, id)?;
    let trials: Vec<Value> = state
        .trials_of(e.id)
        .map(|t| trial_json(&state, t))
        .collect();
    Ok(Json(
        json!({"trials": trials, "pagination": pagination(trials.len())}),
    ))
}

pub(super) async fn get_trial(
    AxState(m): M,
    _caller: Caller,
    Path(id): Path<i32>,
) -> ApiResult<Json<Value>> {
    let state = m.state();
    let t = find_trial(&state, id)?;
    Ok(Json(json!({"trial": trial_json(&state, &t)})))
}

/// `DELETE /api/v1/experiments/{id}` (`det experiment delete`): an ended experiment goes, with
/// its trials, metrics, checkpoints (their files too), logs, work folders and model definition.
/// One that has not ended is refused as the master refuses it.
pub(super) async fn delete_experiment(
    AxState(m): M,
    caller: Caller,
    Path(id): Path<i32>,
) -> ApiResult<Json<Value>> {
    caller.must_be_user()?;
    let mut state = m.state();
    let exp = find_experiment(&state, id)?;
    if !exp.state.is_terminal() {
        return Err(ApiError::FailedPrecondition(format!(
            "cannot delete experiment in {} state",
            exp.state.as_str()
        )));
    }
    let trials: Vec<TrialRec> = state
        .trials
        .values()
        .filter(|t| t.experiment_id == id)
        .cloned()
        .collect();
    let storage = scheduler::storage_dir(&exp.config);
    let mut doomed: Vec<std::path::PathBuf> = state
        .checkpoints
        .iter()
        .filter(|c| c.experiment_id == id)
        .filter_map(|c| c.folder_in(storage.as_deref()?))
        .collect();
    let dir = &m.config.state_dir;
    for t in &trials {
        doomed.push(dir.join("logs").join(format!("{}.log", t.task_id)));
        let prefix = format!("{}.", t.task_id);
        doomed.extend(
            std::fs::read_dir(dir.join("work"))
                .into_iter()
                .flatten()
                .flatten()
                .filter(|e| e.file_name().to_string_lossy().starts_with(&prefix))
                .map(|e| e.path()),
        );
        state.trials.remove(&t.id);
        state.deleted_trials.insert(t.id);
    }
    state.experiments.remove(&id);
    state.checkpoints.retain(|c| c.experiment_id != id);
    state
        .metrics
        .retain(|r| trials.iter().all(|t| t.id != r.trial_id));
    m.persist(state);
    // Once nothing lists them, the files go.
    for path in doomed {
        let gone = if path.is_dir() {
            std::fs::remove_dir_all(&path)
        } else {
            std::fs::remove_file(&path)
        };
        if let Err(e) = gone
            && e.kind() != std::io::ErrorKind::NotFound
        {
            tracing::warn!(
                "devmaster: deleting experiment {id}: {}: {e}",
                path.display()
            );
        }
    }
    crate::persist::remove_experiment_config(dir, id);
    crate::context::remove(dir, id);
    Ok(Json(json!({})))
}
