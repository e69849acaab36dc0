//! The REST surface: what `det`, the Python Core API and `hr-det` call. Bodies are parsed
//! whether or not a Content-Type is sent (the Python client sends none).

use std::{collections::HashMap, sync::Arc, time::Duration};

use axum::{
    Json, Router,
    body::Bytes,
    extract::{Path, Query, State as AxState},
    http::HeaderMap,
    routing::{get, post},
};
use hr_det::wire::{Checkpoint, State};
use serde::de::DeserializeOwned;
use serde_json::{Value, json};

use crate::{
    error::{ApiError, ApiResult},
    info::{now_rfc3339, random_hex},
    scheduler,
    server::Master,
    state::{ExperimentRec, LOGIN_LIFETIME_SECS, MasterState, MetricRec, TrialRec},
};

type M = AxState<Arc<Master>>;

pub(crate) fn router(master: Arc<Master>) -> Router {
    let record = master.config.record_requests.clone();
    let router = routes(master.clone())
        .layer(axum::middleware::from_fn(log_server_errors))
        .layer(axum::middleware::from_fn_with_state(
            master,
            crate::guard::guard,
        ));
    match record {
        Some(path) => router.layer(axum::middleware::from_fn(move |req, next| {
            record_request(path.clone(), req, next)
        })),
        None => router,
    }
}

/// Logs every 5xx answer (which clients retry) with its method, path and reason.
#[allow(clippy::print_stderr)] // the devmaster's operational log
async fn log_server_errors(
    req: axum::extract::Request,
    next: axum::middleware::Next,
) -> axum::response::Response {
    let (method, path) = (req.method().clone(), req.uri().path().to_owned());
    let response = next.run(req).await;
    if response.status().is_server_error() {
        let (parts, body) = response.into_parts();
        let bytes = axum::body::to_bytes(body, 1 << 20)
            .await
            .unwrap_or_default();
        eprintln!(
            "devmaster: {method} {path} -> {}: {}",
            parts.status.as_u16(),
            String::from_utf8_lossy(&bytes)
        );
        return axum::response::Response::from_parts(parts, axum::body::Body::from(bytes));
    }
    response
}

/// Appends `{"method", "path", "body"}` of a request to `path` (headers, and so tokens, are
/// never written).
async fn record_request(
    path: std::path::PathBuf,
    req: axum::extract::Request,
    next: axum::middleware::Next,
) -> axum::response::Response {
    use std::io::Write;
    let (parts, body) = req.into_parts();
    let bytes = axum::body::to_bytes(body, 64 << 20)
        .await
        .unwrap_or_default();
    let body_json = if bytes.is_empty() {
        Value::Null
    } else {
        serde_json::from_slice(&bytes).unwrap_or_else(|_| json!(String::from_utf8_lossy(&bytes)))
    };
    let line =
        json!({"method": parts.method.as_str(), "path": parts.uri.to_string(), "body": body_json});
    if let Ok(mut f) = std::fs::OpenOptions::new()
        .create(true)
        .append(true)
        .open(&path)
    {
        let _ = writeln!(f, "{line}");
    }
    next.run(axum::extract::Request::from_parts(
        parts,
        axum::body::Body::from(bytes),
    ))
    .await
}

fn routes(master: Arc<Master>) -> Router {
    Router::new()
        .route("/info", get(info))
        .route("/api/v1/auth/login", post(login))
        .route("/api/v1/auth/logout", post(logout))
        .route("/api/v1/me", get(me))
        .route("/api/v1/experiments", post(create_experiment))
        .route("/api/v1/experiments/{id}", get(get_experiment))
        .route("/api/v1/experiments/{id}/{action}", post(experiment_action))
        .route("/api/v1/experiments/{id}/trials", get(list_trials))
        .route(
            "/api/v1/experiments/{id}/checkpoints",
            get(list_checkpoints),
        )
        .route("/api/v1/trials/{id}", get(get_trial))
        .route("/api/v1/trials/{id}/workloads", get(workloads))
        .route("/api/v1/trials/{id}/metrics", post(report_metrics))
        .route("/api/v1/trials/metrics/trial_metrics", get(read_metrics))
        .route(
            "/api/v1/trials/{id}/searcher/operation",
            get(searcher_operation),
        )
        .route(
            "/api/v1/trials/{id}/searcher/completed_operation",
            post(completed_operation),
        )
        .route("/api/v1/trials/{id}/progress", post(progress))
        .route("/api/v1/trials/{id}/early_exit", post(ok_body))
        .route("/api/v1/trials/{id}/runner/metadata", post(ok_body))
        .route("/api/v1/runs/start", post(runs_start))
        .route("/api/v1/checkpoints", post(report_checkpoint))
        .route("/api/v1/checkpoints/{uuid}", get(get_checkpoint))
        .route(
            "/api/v1/allocations/{id}/signals/preemption",
            get(preemption),
        )
        .route(
            "/api/v1/allocations/{id}/signals/ack_preemption",
            post(ack_preemption),
        )
        .route("/api/v1/commands", post(create_command).get(list_commands))
        .route("/api/v1/workspaces", get(list_workspaces))
        .route("/api/v1/commands/{id}", get(get_command))
        .route("/api/v1/tasks/{id}/logs", get(task_logs))
        .route("/api/v1/task/logs", post(ok_body))
        .with_state(master)
}

fn parse<T: DeserializeOwned>(body: &[u8]) -> ApiResult<T> {
    let body = if body.is_empty() {
        b"{}".as_slice()
    } else {
        body
    };
    serde_json::from_slice(body)
        .map_err(|e| ApiError::InvalidArgument(format!("invalid request body: {e}")))
}

/// The token of a request, from `Authorization: Bearer <token>` (or `x-user-token`).
fn token(headers: &HeaderMap) -> ApiResult<&str> {
    headers
        .get("authorization")
        .and_then(|v| v.to_str().ok())
        .and_then(|v| v.strip_prefix("Bearer "))
        .or_else(|| headers.get("x-user-token").and_then(|v| v.to_str().ok()))
        .ok_or_else(|| ApiError::Unauthenticated("missing authorization token".into()))
}

/// The user of a request whose token is a live session.
fn user(master: &Master, headers: &HeaderMap) -> ApiResult<String> {
    master
        .state()
        .session_user(token(headers)?)
        .ok_or_else(|| ApiError::Unauthenticated("invalid or expired credentials".into()))
}

fn pagination(total: usize) -> Value {
    json!({"offset": 0, "limit": 0, "startIndex": 0, "endIndex": total, "total": total})
}

async fn info(AxState(m): M) -> Json<Value> {
    let cluster = m.state().cluster_id.clone();
    Json(
        json!({"version": "0.35.0", "clusterId": cluster, "masterId": cluster, "clusterName": "devmaster",
        "telemetryEnabled": false, "branding": "determined", "rbacEnabled": false, "strictJobQueueControl": false}),
    )
}

fn user_json(name: &str) -> Value {
    json!({"id": if name == "admin" { 1 } else { 2 }, "username": name, "admin": name == "admin", "active": true,
        "displayName": "", "remote": false, "modifiedAt": now_rfc3339(), "agentUserGroup": null})
}

async fn login(AxState(m): M, body: Bytes) -> ApiResult<Json<Value>> {
    let req: hr_det::wire::LoginRequest = parse(&body)?;
    // The default users of a fresh Determined master: `determined` and `admin`, empty passwords.
    let expected = if req.is_hashed {
        hr_det::hash_password("")
    } else {
        String::new()
    };
    if !matches!(req.username.as_str(), "determined" | "admin") || req.password != expected {
        return Err(ApiError::Unauthenticated("invalid credentials".into()));
    }
    let token = random_hex(24);
    let mut state = m.state();
    state.add_login(&token, &req.username, LOGIN_LIFETIME_SECS);
    m.persist(state);
    Ok(Json(
        json!({"token": token, "user": user_json(&req.username)}),
    ))
}

/// Revokes the request's token: later requests with it are refused.
async fn logout(AxState(m): M, headers: HeaderMap) -> ApiResult<Json<Value>> {
    user(&m, &headers)?;
    let mut state = m.state();
    state.remove_session(token(&headers)?);
    m.persist(state);
    Ok(Json(json!({})))
}

async fn me(AxState(m): M, headers: HeaderMap) -> ApiResult<Json<Value>> {
    let name = user(&m, &headers)?;
    Ok(Json(json!({"user": user_json(&name)})))
}

async fn ok_body(AxState(m): M, headers: HeaderMap) -> ApiResult<Json<Value>> {
    user(&m, &headers)?;
    Ok(Json(json!({})))
}

fn experiment_json(state: &MasterState, e: &ExperimentRec) -> Value {
    let num_trials = i32::from(e.trial_id.is_some());
    let progress = e
        .trial_id
        .and_then(|t| state.trials.get(&t))
        .map_or(0.0, |t| t.progress);
    json!({
        "id": e.id, "archived": false, "config": e.config, "jobId": format!("job-{}", e.id),
        "name": e.name, "numTrials": num_trials, "originalConfig": e.original_config,
        "projectId": e.project_id, "projectOwnerId": 1, "searcherType": "single",
        "startTime": e.start_time, "endTime": e.end_time, "state": e.state, "username": "determined",
        "description": e.config.get("description").cloned().unwrap_or(json!("")),
        "labels": e.config.get("labels").cloned().unwrap_or(json!([])), "resourcePool": "default",
        "progress": progress, "workspaceId": 1, "workspaceName": "Uncategorized",
        "projectName": "Uncategorized", "notes": "", "forkedFrom": null, "parentArchived": false,
        "hyperparameters": e.config.get("hyperparameters").cloned().unwrap_or(json!({})),
        "trialIds": e.trial_id.into_iter().collect::<Vec<_>>(), "displayName": "", "userId": 2,
        "checkpointCount": state.checkpoints.iter().filter(|c| c.experiment_id == e.id).count(),
        "unmanaged": false, "externalExperimentId": null, "modelDefinitionSize": 0,
    })
}

fn trial_json(t: &TrialRec) -> Value {
    json!({
        "id": t.id, "experimentId": t.experiment_id, "hparams": {}, "restarts": t.restarts,
        "startTime": t.start_time, "endTime": t.end_time, "state": t.state,
        "totalBatchesProcessed": t.total_batches, "taskId": t.task_id, "taskIds": [t.task_id],
        "runnerState": "", "wallClockTime": 0.0, "searcherMetricValue": null,
        "totalCheckpointSize": "0", "checkpointCount": 0, "summaryMetrics": null,
    })
}

async fn create_experiment(
    AxState(m): M,
    headers: HeaderMap,
    body: Bytes,
) -> ApiResult<Json<Value>> {
    user(&m, &headers)?;
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
    if config.get("checkpoint_storage").is_none_or(Value::is_null) {
        let dir = m.config.state_dir.join("checkpoints");
        config["checkpoint_storage"] =
            json!({"type": "directory", "container_path": dir.display().to_string()});
    }
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
fn start_trial(m: &Arc<Master>, experiment: i32) {
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
    if !m.allocs().contains_key(&trial_id) {
        scheduler::allocate(m, trial_id);
    }
}

fn find_experiment(state: &MasterState, id: i32) -> ApiResult<ExperimentRec> {
    state
        .experiments
        .get(&id)
        .cloned()
        .ok_or_else(|| ApiError::NotFound(format!("experiment not found: {id}")))
}

async fn get_experiment(
    AxState(m): M,
    headers: HeaderMap,
    Path(id): Path<i32>,
) -> ApiResult<Json<Value>> {
    user(&m, &headers)?;
    let state = m.state();
    let e = find_experiment(&state, id)?;
    Ok(Json(
        json!({"experiment": experiment_json(&state, &e), "config": e.config, "jobSummary": null}),
    ))
}

async fn experiment_action(
    AxState(m): M,
    headers: HeaderMap,
    Path((id, action)): Path<(i32, String)>,
) -> ApiResult<Json<Value>> {
    user(&m, &headers)?;
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

async fn list_trials(
    AxState(m): M,
    headers: HeaderMap,
    Path(id): Path<i32>,
) -> ApiResult<Json<Value>> {
    user(&m, &headers)?;
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

fn find_trial(state: &MasterState, id: i32) -> ApiResult<TrialRec> {
    state
        .trials
        .get(&id)
        .cloned()
        .ok_or_else(|| ApiError::NotFound(format!("trial not found: {id}")))
}

async fn get_trial(
    AxState(m): M,
    headers: HeaderMap,
    Path(id): Path<i32>,
) -> ApiResult<Json<Value>> {
    user(&m, &headers)?;
    let t = find_trial(&m.state(), id)?;
    Ok(Json(json!({"trial": trial_json(&t)})))
}

async fn workloads(
    AxState(m): M,
    headers: HeaderMap,
    Path(id): Path<i32>,
) -> ApiResult<Json<Value>> {
    user(&m, &headers)?;
    find_trial(&m.state(), id)?;
    Ok(Json(json!({"workloads": [], "pagination": pagination(0)})))
}

async fn list_checkpoints(
    AxState(m): M,
    headers: HeaderMap,
    Path(id): Path<i32>,
    Query(q): Query<HashMap<String, String>>,
) -> ApiResult<Json<Value>> {
    user(&m, &headers)?;
    let state = m.state();
    find_experiment(&state, id)?;
    let mut list: Vec<&Checkpoint> = state
        .checkpoints
        .iter()
        .filter(|c| c.experiment_id == id)
        .map(|c| &c.checkpoint)
        .collect();
    let by = q
        .get("sortByAttr")
        .map_or("SORT_BY_UNSPECIFIED", String::as_str);
    let time = |c: &Checkpoint| c.report_time.clone().unwrap_or_default();
    match by {
        "SORT_BY_UUID" => list.sort_by(|a, b| a.uuid.cmp(&b.uuid)),
        "SORT_BY_BATCH_NUMBER" => list.sort_by_key(|a| (a.steps_completed(), time(a))),
        "SORT_BY_STATE" => list.sort_by_key(|c| c.state.as_str()),
        _ => list.sort_by_key(|c| time(c)),
    }
    if q.get("orderBy").is_some_and(|o| o == "ORDER_BY_DESC") {
        list.reverse();
    }
    let offset = q
        .get("offset")
        .and_then(|o| o.parse().ok())
        .unwrap_or(0usize);
    let limit = q
        .get("limit")
        .and_then(|o| o.parse().ok())
        .filter(|l: &usize| *l > 0)
        .unwrap_or(usize::MAX);
    let total = list.len();
    let page: Vec<&Checkpoint> = list.into_iter().skip(offset).take(limit).collect();
    let end = offset + page.len();
    Ok(Json(
        json!({"checkpoints": page, "pagination": {"offset": offset, "limit": 0, "startIndex": offset, "endIndex": end, "total": total}}),
    ))
}

async fn get_checkpoint(
    AxState(m): M,
    headers: HeaderMap,
    Path(uuid): Path<String>,
) -> ApiResult<Json<Value>> {
    user(&m, &headers)?;
    let state = m.state();
    let c = state
        .checkpoints
        .iter()
        .find(|c| c.checkpoint.uuid == uuid)
        .ok_or_else(|| ApiError::NotFound(format!("checkpoint not found: {uuid}")))?;
    Ok(Json(json!({"checkpoint": c.checkpoint})))
}

fn trial_of_task(state: &MasterState, task_or_alloc: &str) -> Option<i32> {
    state
        .trials
        .values()
        .find(|t| {
            task_or_alloc == t.task_id || task_or_alloc.starts_with(&format!("{}.", t.task_id))
        })
        .map(|t| t.id)
}

async fn report_checkpoint(
    AxState(m): M,
    headers: HeaderMap,
    body: Bytes,
) -> ApiResult<Json<Value>> {
    user(&m, &headers)?;
    let mut c: Checkpoint = parse(&body)?;
    if c.steps_completed().is_none() {
        return Err(ApiError::InvalidArgument(
            "checkpoint metadata must contain an integer steps_completed".into(),
        ));
    }
    let mut state = m.state();
    if state
        .checkpoints
        .iter()
        .any(|x| x.checkpoint.uuid == c.uuid)
    {
        return Err(ApiError::Unknown(format!(
            "ERROR: duplicate key value violates unique constraint \"checkpoints_v2_uuid_key\" (SQLSTATE 23505): uuid {}",
            c.uuid
        )));
    }
    let key = c
        .allocation_id
        .clone()
        .or_else(|| c.task_id.clone())
        .unwrap_or_default();
    let trial_id = trial_of_task(&state, &key)
        .ok_or_else(|| ApiError::NotFound(format!("no trial for task or allocation {key:?}")))?;
    let trial = find_trial(&state, trial_id)?;
    // Fencing: only the trial's current allocation may publish.
    let current = format!("{}.{}", trial.task_id, trial.run_id);
    if let Some(alloc) = c.allocation_id.as_ref().filter(|a| **a != current) {
        return Err(ApiError::InvalidArgument(format!(
            "checkpoint {} from allocation {alloc}, which is not the trial's current allocation {current}",
            c.uuid
        )));
    }
    if c.report_time.is_none() {
        c.report_time = Some(now_rfc3339());
    }
    c.training.trial_id = Some(trial_id);
    c.training.experiment_id = Some(trial.experiment_id);
    state.checkpoints.push(crate::state::CheckpointRec {
        trial_id,
        experiment_id: trial.experiment_id,
        checkpoint: c,
    });
    m.persist(state);
    Ok(Json(json!({})))
}

async fn runs_start(AxState(m): M, headers: HeaderMap, body: Bytes) -> ApiResult<Json<Value>> {
    user(&m, &headers)?;
    let req: hr_det::wire::RunsStartRequest = parse(&body)?;
    let alloc = m
        .allocs()
        .iter()
        .find(|(t, _)| **t == req.run_id)
        .map(|(_, a)| a.allocation_id.clone());
    let kind = req
        .checkpoint_storage
        .get("type")
        .and_then(Value::as_str)
        .unwrap_or("");
    if !matches!(kind, "shared_fs" | "directory") {
        return Err(ApiError::InvalidArgument(format!(
            "checkpoint_storage type {kind:?} is not supported by the devmaster: use shared_fs \
             (host_path, storage_path) or directory (container_path)"
        )));
    }
    if let Some(a) = alloc {
        scheduler::touch_allocation(&m, &a);
    }
    find_trial(&m.state(), req.run_id)?;
    Ok(Json(json!({"storageId": 1})))
}

async fn preemption(
    AxState(m): M,
    headers: HeaderMap,
    Path(id): Path<String>,
    Query(q): Query<HashMap<String, String>>,
) -> ApiResult<Json<Value>> {
    user(&m, &headers)?;
    let timeout = q
        .get("timeout_seconds")
        .and_then(|t| t.parse::<u64>().ok())
        .unwrap_or(60)
        .min(3600);
    let (_, mut rx) = scheduler::touch_allocation(&m, &id)
        .ok_or_else(|| ApiError::NotFound(format!("allocation not found: {id}")))?;
    if !*rx.borrow_and_update() && timeout > 0 {
        let _ = tokio::time::timeout(Duration::from_secs(timeout), rx.wait_for(|p| *p)).await;
    }
    let preempt = *rx.borrow();
    Ok(Json(json!({"preempt": preempt})))
}

async fn ack_preemption(
    AxState(m): M,
    headers: HeaderMap,
    Path(id): Path<String>,
) -> ApiResult<Json<Value>> {
    user(&m, &headers)?;
    let mut allocs = m.allocs();
    let alloc = allocs
        .values_mut()
        .find(|a| a.allocation_id == id)
        .ok_or_else(|| ApiError::NotFound(format!("allocation not found: {id}")))?;
    alloc.acked = true;
    Ok(Json(json!({})))
}

async fn report_metrics(
    AxState(m): M,
    headers: HeaderMap,
    Path(id): Path<i32>,
    body: Bytes,
) -> ApiResult<Json<Value>> {
    user(&m, &headers)?;
    let req: hr_det::wire::ReportMetricsRequest = parse(&body)?;
    let mut state = m.state();
    let trial = find_trial(&state, id)?;
    if req.metrics.trial_run_id != trial.run_id {
        return Err(ApiError::InvalidArgument(format!(
            "invalid run id {} for trial {id} (current run is {})",
            req.metrics.trial_run_id, trial.run_id
        )));
    }
    let step = req.metrics.steps_completed;
    let metrics = json!({"avg_metrics": req.metrics.metrics.avg_metrics, "batch_metrics": req.metrics.metrics.batch_metrics});
    // A replayed report (the client retried after losing the answer) is recognised, not counted
    // twice.
    if state.metrics.iter().any(|r| {
        r.trial_id == id
            && r.trial_run_id == req.metrics.trial_run_id
            && r.group == req.group
            && r.steps_completed == step
            && r.metrics == metrics
    }) {
        return Ok(Json(json!({})));
    }
    let rec = MetricRec {
        id: state.next_metric,
        trial_id: id,
        trial_run_id: req.metrics.trial_run_id,
        group: req.group.clone(),
        steps_completed: step,
        report_time: req.metrics.report_time.clone().unwrap_or_else(now_rfc3339),
        metrics,
        archived: false,
    };
    let ticket = m.stage_metric(&rec);
    state.push_metric(rec);
    drop(state);
    m.commit(ticket);
    Ok(Json(json!({})))
}

async fn read_metrics(
    AxState(m): M,
    headers: HeaderMap,
    Query(q): Query<Vec<(String, String)>>,
) -> ApiResult<String> {
    user(&m, &headers)?;
    let group = q
        .iter()
        .find(|(k, _)| k == "group")
        .map(|(_, v)| v.clone())
        .unwrap_or_default();
    let trials: Vec<i32> = q
        .iter()
        .filter(|(k, _)| k == "trialIds")
        .filter_map(|(_, v)| v.parse().ok())
        .collect();
    let state = m.state();
    let reports: Vec<Value> = state
        .metrics
        .iter()
        .filter(|r| trials.contains(&r.trial_id) && (group.is_empty() || r.group == group))
        .map(|r| {
            json!({"archived": r.archived, "endTime": r.report_time, "group": r.group, "id": r.id,
                "metrics": r.metrics, "totalBatches": r.steps_completed, "trialId": r.trial_id,
                "trialRunId": r.trial_run_id})
        })
        .collect();
    Ok(format!("{}\n", json!({"result": {"metrics": reports}})))
}

async fn searcher_operation(
    AxState(m): M,
    headers: HeaderMap,
    Path(id): Path<i32>,
) -> ApiResult<Json<Value>> {
    user(&m, &headers)?;
    let state = m.state();
    let t = find_trial(&state, id)?;
    let e = find_experiment(&state, t.experiment_id)?;
    if t.searcher_completed {
        return Ok(Json(json!({"completed": true, "op": null})));
    }
    Ok(Json(
        json!({"completed": false, "op": {"validateAfter": {"requestId": t.task_id, "length": e.max_length.to_string()}}}),
    ))
}

async fn completed_operation(
    AxState(m): M,
    headers: HeaderMap,
    Path(id): Path<i32>,
    body: Bytes,
) -> ApiResult<Json<Value>> {
    user(&m, &headers)?;
    let req: hr_det::wire::CompleteOperationRequest = parse(&body)?;
    let mut state = m.state();
    let t = find_trial(&state, id)?;
    let e = find_experiment(&state, t.experiment_id)?;
    let length = req.op.get("length").and_then(Value::as_i64).unwrap_or(0);
    if let Some(trial) = state.trials.get_mut(&id) {
        trial.searcher_completed = length >= e.max_length;
    }
    m.persist(state);
    Ok(Json(json!({})))
}

async fn progress(
    AxState(m): M,
    headers: HeaderMap,
    Path(id): Path<i32>,
    body: Bytes,
) -> ApiResult<Json<Value>> {
    user(&m, &headers)?;
    let value: f64 = parse(&body)?;
    let mut state = m.state();
    find_trial(&state, id)?;
    if let Some(t) = state.trials.get_mut(&id) {
        t.progress = value;
    }
    m.persist(state);
    Ok(Json(json!({})))
}

fn command_json(c: &crate::state::CommandRec) -> Value {
    json!({"command": {"id": c.id, "description": c.description, "jobId": format!("job-{}", c.id),
        "resourcePool": "default", "startTime": c.start_time, "state": c.state, "username": "determined",
        "workspaceId": c.workspace_id, "exitStatus": c.exit_status, "container": null, "displayName": "",
        "userId": 2}, "config": c.config})
}

async fn create_command(AxState(m): M, headers: HeaderMap, body: Bytes) -> ApiResult<Json<Value>> {
    user(&m, &headers)?;
    let req: hr_det::wire::CreateCommandRequest = parse(&body)?;
    if !req.config.is_object() {
        return Err(ApiError::InvalidArgument("config must be an object".into()));
    }
    let rec = scheduler::start_command(&m, req.config, req.workspace_id.unwrap_or(1))
        .map_err(ApiError::InvalidArgument)?;
    Ok(Json(command_json(&rec)))
}

async fn list_commands(AxState(m): M, headers: HeaderMap) -> ApiResult<Json<Value>> {
    user(&m, &headers)?;
    let state = m.state();
    let commands: Vec<Value> = state
        .commands
        .values()
        .map(|c| command_json(c)["command"].clone())
        .collect();
    Ok(Json(
        json!({"commands": commands, "pagination": pagination(commands.len())}),
    ))
}

/// The one workspace of a devmaster (`Uncategorized`, id 1), as `det` lists it.
async fn list_workspaces(AxState(m): M, headers: HeaderMap) -> ApiResult<Json<Value>> {
    user(&m, &headers)?;
    let experiments = m.state().experiments.len();
    let ws = json!({"id": 1, "name": "Uncategorized", "archived": false, "errorMessage": "", "immutable": true,
        "numExperiments": experiments, "numProjects": 1, "pinned": false, "state": "WORKSPACE_STATE_UNSPECIFIED",
        "userId": 1, "username": "admin"});
    Ok(Json(
        json!({"workspaces": [ws], "pagination": pagination(1)}),
    ))
}

async fn get_command(
    AxState(m): M,
    headers: HeaderMap,
    Path(id): Path<String>,
) -> ApiResult<Json<Value>> {
    user(&m, &headers)?;
    let state = m.state();
    let c = state
        .commands
        .get(&id)
        .ok_or_else(|| ApiError::NotFound(format!("command not found: {id}")))?;
    Ok(Json(command_json(c)))
}

async fn task_logs(AxState(m): M, headers: HeaderMap, Path(id): Path<String>) -> ApiResult<String> {
    user(&m, &headers)?;
    let path = {
        let state = m.state();
        match state.commands.get(&id) {
            Some(c) => c.log_path.clone(),
            None if state.trials.values().any(|t| t.task_id == id) => {
                m.config.state_dir.join("logs").join(format!("{id}.log"))
            }
            None => return Err(ApiError::NotFound(format!("task not found: {id}"))),
        }
    };
    let text = std::fs::read_to_string(path).unwrap_or_default();
    let mut out = String::new();
    for (i, line) in text.lines().enumerate() {
        let entry = json!({"result": {"id": i.to_string(), "taskId": id, "timestamp": now_rfc3339(), "level": "LOG_LEVEL_INFO",
            "log": format!("{line}\n"), "message": line, "allocationId": null, "agentId": "devmaster",
            "containerId": null, "rankId": 0, "source": "", "stdtype": "stdout"}});
        out.push_str(&entry.to_string());
        out.push('\n');
    }
    Ok(out)
}
