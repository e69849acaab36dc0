//! The REST surface: what `det`, the Python Core API and `hr-det` call, one file per resource.
//! Bodies are parsed whether or not a Content-Type is sent (the Python client sends none).

mod auth;
mod checkpoints;
mod cluster;
mod commands;
mod experiments;
mod logs;
mod trials;
mod workloads;

use std::sync::Arc;

use axum::{
    Router,
    extract::State as AxState,
    http::HeaderMap,
    routing::{get, post},
};
use serde::de::DeserializeOwned;
use serde_json::Value;

use crate::{
    error::{ApiError, ApiResult},
    master::Master,
    state::{ExperimentRec, MasterState, TrialRec, TrialScope},
};

pub(super) type M = AxState<Arc<Master>>;

pub(super) use crate::guard::token;

pub(crate) fn router(master: Arc<Master>) -> Router {
    let record = master.config.record_requests.clone();
    let router = routes(master.clone()).layer(axum::middleware::from_fn(log_server_errors));
    // Inside the guard: only requests it let through, with bodies it has already read.
    let router = match record {
        Some(path) => router.layer(axum::middleware::from_fn(move |req, next| {
            record_request(path.clone(), req, next)
        })),
        None => router,
    };
    router.layer(axum::middleware::from_fn_with_state(
        master,
        crate::guard::guard,
    ))
}

/// Logs every 5xx answer (which clients retry) with its method, path and reason, and puts an
/// error axum answers in plain text (a path or query that does not parse, a body extractor's
/// refusal) into Determined's envelope, as grpc-gateway answers every error.
async fn log_server_errors(
    req: axum::extract::Request,
    next: axum::middleware::Next,
) -> axum::response::Response {
    let (method, path) = (req.method().clone(), req.uri().path().to_owned());
    let response = next.run(req).await;
    let status = response.status();
    let json = response
        .headers()
        .get(axum::http::header::CONTENT_TYPE)
        .and_then(|v| v.to_str().ok())
        .is_some_and(|t| t.starts_with("application/json"));
    if !status.is_server_error() && (json || !status.is_client_error()) {
        return response;
    }
    let (parts, body) = response.into_parts();
    let bytes = axum::body::to_bytes(body, 1 << 20)
        .await
        .unwrap_or_default();
    let text = String::from_utf8_lossy(&bytes).into_owned();
    if status.is_server_error() {
        tracing::error!("devmaster: {method} {path} -> {}: {text}", status.as_u16());
    }
    if json {
        return axum::response::Response::from_parts(parts, axum::body::Body::from(bytes));
    }
    // Its status kept, in the envelope.
    crate::guard::refuse(status, &text)
}

/// Appends `{"method", "path", "body"}` of a request to `path`, a file only its owner may read
/// (created 0600, never through a symbolic link; the devmaster refuses at start one that others
/// may read, [`crate::record::check_recording`]). Headers, and so tokens, are never written;
/// credentials are redacted wherever they appear ([`crate::record::redacted_line`]).
async fn record_request(
    path: std::path::PathBuf,
    req: axum::extract::Request,
    next: axum::middleware::Next,
) -> axum::response::Response {
    let (parts, body) = req.into_parts();
    // The guard has read the body already (bounded in size and time).
    let bytes = axum::body::to_bytes(body, crate::context::MAX_REQUEST_BYTES)
        .await
        .unwrap_or_default();
    crate::record::append(
        &path,
        &crate::record::redacted_line(parts.method.as_str(), &parts.uri, &bytes),
    );
    next.run(axum::extract::Request::from_parts(
        parts,
        axum::body::Body::from(bytes),
    ))
    .await
}

fn routes(master: Arc<Master>) -> Router {
    Router::new()
        .route("/info", get(auth::info))
        .route("/api/v1/auth/login", post(auth::login))
        .route("/api/v1/auth/logout", post(auth::logout))
        .route("/api/v1/me", get(auth::me))
        .route(
            "/api/v1/experiments",
            post(experiments::create_experiment)
                .get(experiments::list_experiments)
                // A model definition rides in the create request.
                .layer(axum::extract::DefaultBodyLimit::max(
                    crate::context::MAX_REQUEST_BYTES,
                )),
        )
        .route(
            "/api/v1/experiments/{id}",
            get(experiments::get_experiment).delete(experiments::delete_experiment),
        )
        .route(
            "/api/v1/experiments/{id}/{action}",
            post(experiments::experiment_action),
        )
        .route(
            "/api/v1/experiments/{id}/trials",
            get(experiments::list_trials),
        )
        .route(
            "/api/v1/experiments/{id}/checkpoints",
            get(checkpoints::list_checkpoints),
        )
        .route("/api/v1/trials/{id}", get(experiments::get_trial))
        .route("/api/v1/trials/{id}/workloads", get(workloads::workloads))
        .route("/api/v1/trials/{id}/metrics", post(trials::report_metrics))
        .route(
            "/api/v1/trials/metrics/trial_metrics",
            get(trials::read_metrics),
        )
        .route(
            "/api/v1/trials/{id}/searcher/operation",
            get(trials::searcher_operation),
        )
        .route(
            "/api/v1/trials/{id}/searcher/completed_operation",
            post(trials::completed_operation),
        )
        .route("/api/v1/trials/{id}/progress", post(trials::progress))
        .route("/api/v1/trials/{id}/early_exit", post(auth::ok_body))
        .route("/api/v1/trials/{id}/runner/metadata", post(auth::ok_body))
        .route("/api/v1/runs/start", post(trials::runs_start))
        .route("/api/v1/checkpoints", post(checkpoints::report_checkpoint))
        .route(
            "/api/v1/checkpoints/{uuid}",
            get(checkpoints::get_checkpoint),
        )
        .route(
            "/api/v1/allocations/{id}/signals/preemption",
            get(trials::preemption),
        )
        .route(
            "/api/v1/allocations/{id}/signals/ack_preemption",
            post(trials::ack_preemption),
        )
        .route(
            "/api/v1/commands",
            post(commands::create_command).get(commands::list_commands),
        )
        .route("/api/v1/workspaces", get(cluster::list_workspaces))
        .route("/api/v1/projects/{id}", get(cluster::get_project))
        .route("/api/v1/resource-pools", get(cluster::list_resource_pools))
        .route("/api/v1/commands/{id}", get(commands::get_command))
        .route("/api/v1/tasks", get(logs::list_tasks))
        .route("/api/v1/tasks/{id}/logs", get(logs::task_logs))
        .route("/api/v1/trials/{id}/logs", get(logs::trial_logs))
        .route("/api/v1/task/logs", post(auth::ok_body))
        .fallback(not_served)
        .method_not_allowed_fallback(not_served)
        .with_state(master)
}

/// A route the devmaster does not serve: Determined's error envelope naming it (never an empty
/// 404 or 405, which `det` reports as an empty error).
async fn not_served(method: axum::http::Method, uri: axum::http::Uri) -> ApiError {
    ApiError::NotFound(format!(
        "{method} {} is not served by the devmaster (a local stand-in for Determined 0.35's \
         master, with the routes hessian-recipes and the Core API use)",
        uri.path()
    ))
}

pub(super) fn parse<T: DeserializeOwned>(body: &[u8]) -> ApiResult<T> {
    let body = if body.is_empty() {
        b"{}".as_slice()
    } else {
        body
    };
    serde_json::from_slice(body)
        .map_err(|e| ApiError::InvalidArgument(format!("invalid request body: {e}")))
}

/// Who sent a request: a user, and for a trial's own token the allocation it was issued to.
pub(super) struct Caller {
    pub(super) user: String,
    scope: Option<TrialScope>,
}

impl Caller {
    /// Refuses a trial's token on a route that changes what runs (creating experiments or
    /// commands, pausing, killing): those are a user's, and a trial's token acts for its own
    /// allocation only.
    pub(super) fn must_be_user(&self) -> ApiResult<()> {
        match &self.scope {
            Some(s) => Err(ApiError::PermissionDenied(format!(
                "the token of allocation {} acts for that allocation only; sign in as a user",
                s.allocation_id
            ))),
            None => Ok(()),
        }
    }

    /// Refuses a trial's token whose allocation exited since [`caller`] admitted it: call with
    /// the state lock that records the report held, so an exit is recorded either before the
    /// report (refused) or after it.
    pub(super) fn fence(&self, master: &Master) -> ApiResult<()> {
        self.scope.as_ref().map_or(Ok(()), |s| exited(master, s))
    }

    /// Refuses a trial's token acting for another trial.
    pub(super) fn may_act_for_trial(&self, trial: i32) -> ApiResult<()> {
        match &self.scope {
            Some(s) if s.trial_id != trial => Err(ApiError::PermissionDenied(format!(
                "the token of allocation {} may not act for trial {trial}",
                s.allocation_id
            ))),
            _ => Ok(()),
        }
    }

    /// Refuses a trial's token acting for another allocation (an earlier or later run of its
    /// own trial included).
    pub(super) fn may_act_for_allocation(&self, allocation: &str) -> ApiResult<()> {
        match &self.scope {
            Some(s) if s.allocation_id != allocation => Err(ApiError::PermissionDenied(format!(
                "the token of allocation {} may not act for allocation {allocation}",
                s.allocation_id
            ))),
            _ => Ok(()),
        }
    }
}

/// Every handler that needs a signed-in caller takes [`Caller`] as an argument: the request is
/// refused (401, or 403 for a stale trial token) before the handler runs.
impl axum::extract::FromRequestParts<Arc<Master>> for Caller {
    type Rejection = ApiError;

    async fn from_request_parts(
        parts: &mut axum::http::request::Parts,
        master: &Arc<Master>,
    ) -> ApiResult<Self> {
        caller(master, &parts.headers)
    }
}

/// The caller of a request whose token is a live session. A trial's token is live only while
/// its allocation runs and is the trial's current one: once it exited (a pause, a crash) or a
/// restart started another, it acts for nothing, whatever a request body names, so a process
/// the allocation left behind cannot publish.
fn caller(master: &Master, headers: &HeaderMap) -> ApiResult<Caller> {
    let state = master.state();
    let (user, scope) = state
        .session(token(headers)?)
        .ok_or_else(|| ApiError::Unauthenticated("invalid or expired credentials".into()))?;
    if let Some(s) = &scope {
        let current = state
            .trials
            .get(&s.trial_id)
            .map(|t| format!("{}.{}", t.task_id, t.run_id));
        if current.as_deref() != Some(s.allocation_id.as_str()) {
            return Err(ApiError::PermissionDenied(format!(
                "the token of allocation {} is stale: trial {} runs {} now",
                s.allocation_id,
                s.trial_id,
                current.as_deref().unwrap_or("nothing")
            )));
        }
        exited(master, s)?;
    }
    Ok(Caller { user, scope })
}

/// Refuses the token of an allocation that is no longer running. Call with the state lock held
/// (the state lock, then the allocations': the order every path takes), as [`Caller::fence`]
/// does again where a handler records what the token sent.
fn exited(master: &Master, scope: &TrialScope) -> ApiResult<()> {
    let running = master
        .allocs()
        .get(&scope.trial_id)
        .is_some_and(|a| a.allocation_id == scope.allocation_id);
    if running {
        Ok(())
    } else {
        Err(ApiError::PermissionDenied(format!(
            "the token of allocation {} is stale: that allocation has exited",
            scope.allocation_id
        )))
    }
}

/// A whole list in one page.
pub(super) fn pagination(total: usize) -> Value {
    let total = i32::try_from(total).unwrap_or(i32::MAX);
    wire_json(&hr_det::wire::Pagination {
        offset: 0,
        limit: 0,
        start_index: 0,
        end_index: total,
        total,
    })
}

/// A `hr_det::wire` record (the response shape the Rust client reads, one definition for both
/// sides) as JSON.
pub(super) fn wire_json(typed: &impl serde::Serialize) -> Value {
    serde_json::to_value(typed).expect("wire records serialise to JSON")
}

/// [`wire_json`] of `typed` with `extra` fields (those only the `det` CLI reads) added.
pub(super) fn with_cli_fields(typed: &impl serde::Serialize, extra: Value) -> Value {
    let mut value = wire_json(typed);
    if let (Some(fields), Value::Object(extra)) = (value.as_object_mut(), extra) {
        fields.extend(extra);
    }
    value
}

pub(super) fn find_experiment(state: &MasterState, id: i32) -> ApiResult<ExperimentRec> {
    state
        .experiments
        .get(&id)
        .cloned()
        .ok_or_else(|| ApiError::NotFound(format!("experiment not found: {id}")))
}

pub(super) fn find_trial(state: &MasterState, id: i32) -> ApiResult<TrialRec> {
    state
        .trials
        .get(&id)
        .cloned()
        .ok_or_else(|| ApiError::NotFound(format!("trial not found: {id}")))
}

pub(super) fn trial_of_task(state: &MasterState, task_or_alloc: &str) -> Option<i32> {
    state
        .trials
        .values()
        .find(|t| {
            task_or_alloc == t.task_id || task_or_alloc.starts_with(&format!("{}.", t.task_id))
        })
        .map(|t| t.id)
}
