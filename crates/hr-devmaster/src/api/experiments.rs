//! Experiments and their trial: create, read, pause / activate / kill / cancel, list.

use std::sync::Arc;

use axum::{
    Json,
    body::Bytes,
    extract::{Path, State as AxState},
    http::HeaderMap,
};
use hr_det::wire::{Experiment, State, Trial};
use serde_json::{Value, json};

use super::{M, caller, find_experiment, find_trial, pagination, parse, with_cli_fields};
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
    // Trials report progress in the searcher's units, as Determined's master reads them.
    let progress = e
        .trial_id
        .and_then(|t| state.trials.get(&t))
        .map_or(0.0, |t| {
            (t.progress / e.max_length.max(1) as f64).clamp(0.0, 1.0)
        });
    let experiment = Experiment {
        id: e.id,
        archived: false,
        config: e.config.clone(),
        job_id: format!("job-{}", e.id),
        name: e.name.clone(),
        num_trials: i32::from(e.trial_id.is_some()),
        original_config: e.original_config.clone(),
        project_id: e.project_id,
        project_owner_id: 1,
        searcher_type: "single".to_owned(),
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
            "trialIds": e.trial_id.into_iter().collect::<Vec<_>>(), "displayName": "", "userId": 2,
            "checkpointCount": state.checkpoints.iter().filter(|c| c.experiment_id == e.id).count(),
            "unmanaged": false, "externalExperimentId": null, "modelDefinitionSize": 0,
        }),
    )
}

/// A trial as the Rust client reads it (`hr_det::wire::Trial`), plus the `det` CLI's fields.
pub(super) fn trial_json(t: &TrialRec) -> Value {
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
    with_cli_fields(
        &trial,
        json!({
            "taskIds": [t.task_id], "runnerState": "", "wallClockTime": 0.0,
            "searcherMetricValue": null, "totalCheckpointSize": "0", "checkpointCount": 0,
            "summaryMetrics": null,
        }),
    )
}

/// What the devmaster refuses at create rather than run differently: a searcher other than
/// `single` (it runs one trial), more GPU slots per trial than it was started with, and
/// hyperparameter specs that cannot be drawn.
fn refuse_what_it_cannot_run(dm: &crate::DevmasterConfig, config: &Value) -> Result<(), ApiError> {
    let searcher = config
        .pointer("/searcher/name")
        .and_then(Value::as_str)
        .unwrap_or("single");
    if searcher != "single" {
        return Err(ApiError::InvalidArgument(format!(
            "searcher.name: the devmaster runs the `single` searcher (one trial), not \
             `{searcher}`; use `searcher: {{name: single, metric: ..., max_length: ...}}` or a \
             Determined cluster"
        )));
    }
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
    crate::hparams::sample(config.get("hyperparameters").unwrap_or(&Value::Null), 0)
        .map(|_| ())
        .map_err(ApiError::InvalidArgument)
}

pub(super) async fn create_experiment(
    AxState(m): M,
    headers: HeaderMap,
    body: Bytes,
) -> ApiResult<Json<Value>> {
    caller(&m, &headers)?.must_be_user()?;
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
    .ok_or_else(|| {
        ApiError::InvalidArgument("searcher.max_length is required for the single searcher".into())
    })?;
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
    let mut state = m.state();
    let id = state.next_experiment;
    state.next_experiment += 1;
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
        trial_id: None,
        max_length,
        max_restarts,
    };
    m.stage_experiment(&rec);
    state.experiments.insert(id, rec.clone());
    let body =
        json!({"experiment": experiment_json(&state, &rec), "config": rec.config, "warnings": []});
    m.persist(state);
    if req.activate {
        start_trial(&m, id);
    }
    Ok(Json(body))
}

/// Creates the experiment's trial on first activation, or allocates the existing one.
pub(super) fn start_trial(m: &Arc<Master>, experiment: i32) {
    let trial_id = {
        let mut state = m.state();
        let Some(exp) = state.experiments.get(&experiment).cloned() else {
            return;
        };
        let trial_id = match exp.trial_id {
            Some(t) => t,
            None => {
                let t = state.next_trial;
                state.next_trial += 1;
                let seed = exp
                    .config
                    .pointer("/reproducibility/experiment_seed")
                    .and_then(Value::as_u64)
                    .unwrap_or(0);
                state.trials.insert(
                    t,
                    TrialRec {
                        id: t,
                        experiment_id: experiment,
                        task_id: format!("{experiment}.{}", crate::info::uuid4()),
                        state: State::Active,
                        restarts: 0,
                        run_id: 0,
                        // Determined derives trial seeds from the experiment seed deterministically;
                        // the single searcher's one trial gets the experiment seed itself here.
                        seed: u32::try_from(seed).unwrap_or(0),
                        // Checked at create, so a draw cannot fail here.
                        hparams: crate::hparams::sample(
                            exp.config.get("hyperparameters").unwrap_or(&Value::Null),
                            u32::try_from(seed).unwrap_or(0),
                        )
                        .unwrap_or_default(),
                        start_time: now_rfc3339(),
                        end_time: None,
                        total_batches: 0,
                        searcher_completed: false,
                        progress: 0.0,
                        allocated: false,
                        process: None,
                    },
                );
                if let Some(e) = state.experiments.get_mut(&experiment) {
                    e.trial_id = Some(t);
                }
                t
            }
        };
        if let Some(t) = state.trials.get_mut(&trial_id) {
            t.state = State::Active;
        }
        m.persist(state);
        trial_id
    };
    // A trial with a running allocation keeps it (`allocate` checks under the state lock).
    scheduler::allocate(m, trial_id);
}

pub(super) async fn get_experiment(
    AxState(m): M,
    headers: HeaderMap,
    Path(id): Path<i32>,
) -> ApiResult<Json<Value>> {
    caller(&m, &headers)?;
    let state = m.state();
    let e = find_experiment(&state, id)?;
    Ok(Json(
        json!({"experiment": experiment_json(&state, &e), "config": e.config, "jobSummary": null}),
    ))
}

/// `GET /api/v1/experiments` (`det experiment list`): every experiment, one page (the devmaster
/// has one user and no archive, so the CLI's filters select them all).
pub(super) async fn list_experiments(AxState(m): M, headers: HeaderMap) -> ApiResult<Json<Value>> {
    caller(&m, &headers)?;
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
    headers: HeaderMap,
    Path((id, action)): Path<(i32, String)>,
) -> ApiResult<Json<Value>> {
    caller(&m, &headers)?.must_be_user()?;
    let exp = find_experiment(&m.state(), id)?;
    let incompatible = || {
        ApiError::FailedPrecondition(format!(
            "experiment in incompatible state {}",
            exp.state.as_str()
        ))
    };
    let set = |exp_state: State, trial_state: Option<State>| {
        let mut state = m.state();
        if let Some(e) = state.experiments.get_mut(&id) {
            e.state = exp_state;
            if exp_state.is_terminal() {
                e.end_time = Some(now_rfc3339());
            }
        }
        if let (Some(t), Some(ts)) = (
            exp.trial_id.and_then(|t| state.trials.get_mut(&t)),
            trial_state,
        ) && !t.state.is_terminal()
        {
            t.state = ts;
            if ts.is_terminal() {
                t.end_time = Some(now_rfc3339());
            }
        }
        m.persist(state);
    };
    let running = exp.trial_id.is_some_and(|t| m.allocs().contains_key(&t));
    match action.as_str() {
        "pause" => {
            if exp.state.is_terminal() {
                return Err(incompatible());
            }
            set(State::Paused, Some(State::Paused));
            if let Some(t) = exp.trial_id {
                scheduler::stop_allocation(&m, t, false);
            }
        }
        "activate" => {
            if exp.state.is_terminal()
                || matches!(exp.state, State::StoppingKilled | State::StoppingCanceled)
            {
                return Err(incompatible());
            }
            set(State::Active, Some(State::Active));
            start_trial(&m, id);
        }
        "kill" | "cancel" => {
            if exp.state.is_terminal() {
                return Ok(Json(json!({})));
            }
            let kill = action == "kill";
            if running {
                set(
                    if kill {
                        State::StoppingKilled
                    } else {
                        State::StoppingCanceled
                    },
                    None,
                );
                if let Some(t) = exp.trial_id {
                    scheduler::stop_allocation(&m, t, kill);
                }
            } else {
                set(State::Canceled, Some(State::Canceled));
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
    headers: HeaderMap,
    Path(id): Path<i32>,
) -> ApiResult<Json<Value>> {
    caller(&m, &headers)?;
    let state = m.state();
    let e = find_experiment(&state, id)?;
    let trials: Vec<Value> = e
        .trial_id
        .and_then(|t| state.trials.get(&t))
        .map(trial_json)
        .into_iter()
        .collect();
    Ok(Json(
        json!({"trials": trials, "pagination": pagination(trials.len())}),
    ))
}

pub(super) async fn get_trial(
    AxState(m): M,
    headers: HeaderMap,
    Path(id): Path<i32>,
) -> ApiResult<Json<Value>> {
    caller(&m, &headers)?;
    let t = find_trial(&m.state(), id)?;
    Ok(Json(json!({"trial": trial_json(&t)})))
}

pub(super) async fn workloads(
    AxState(m): M,
    headers: HeaderMap,
    Path(id): Path<i32>,
) -> ApiResult<Json<Value>> {
    caller(&m, &headers)?;
    find_trial(&m.state(), id)?;
    Ok(Json(json!({"workloads": [], "pagination": pagination(0)})))
}
