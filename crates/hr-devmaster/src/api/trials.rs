//! What a running trial calls: run start, preemption signals and acks, metrics, searcher
//! operations and progress.

use std::{collections::HashMap, time::Duration};

use axum::{
    Json,
    body::Bytes,
    extract::{Path, Query, State as AxState},
};
use serde_json::{Value, json};

use hr_det::wire::{
    GetMetricsResponse, MetricsReport, PreemptionResponse, RunsStartResponse, SearcherOp,
    SearcherOperationResponse, ValidateAfter,
};

use super::{Caller, M, find_experiment, find_trial, parse, wire_json};
use crate::{
    error::{ApiError, ApiResult},
    info::now_rfc3339,
    scheduler,
    state::MetricRec,
};

pub(super) async fn runs_start(
    AxState(m): M,
    caller: Caller,
    body: Bytes,
) -> ApiResult<Json<Value>> {
    let req: hr_det::wire::RunsStartRequest = parse(&body)?;
    caller.may_act_for_trial(req.run_id)?;
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
    Ok(Json(wire_json(&RunsStartResponse {
        storage_id: Some(1),
    })))
}

pub(super) async fn preemption(
    AxState(m): M,
    caller: Caller,
    Path(id): Path<String>,
    Query(q): Query<HashMap<String, String>>,
) -> ApiResult<Json<Value>> {
    caller.may_act_for_allocation(&id)?;
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
    Ok(Json(wire_json(&PreemptionResponse { preempt })))
}

pub(super) async fn ack_preemption(
    AxState(m): M,
    caller: Caller,
    Path(id): Path<String>,
) -> ApiResult<Json<Value>> {
    caller.may_act_for_allocation(&id)?;
    let mut allocs = m.allocs();
    let alloc = allocs
        .values_mut()
        .find(|a| a.allocation_id == id)
        .ok_or_else(|| ApiError::NotFound(format!("allocation not found: {id}")))?;
    alloc.acked = true;
    Ok(Json(json!({})))
}

pub(super) async fn report_metrics(
    AxState(m): M,
    who: Caller,
    Path(id): Path<i32>,
    body: Bytes,
) -> ApiResult<Json<Value>> {
    who.may_act_for_trial(id)?;
    let req: hr_det::wire::ReportMetricsRequest = parse(&body)?;
    let mut state = m.state();
    who.fence(&m)?;
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

pub(super) async fn read_metrics(
    AxState(m): M,
    _caller: Caller,
    Query(q): Query<Vec<(String, String)>>,
) -> ApiResult<String> {
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
    let metrics = state
        .metrics
        .iter()
        .filter(|r| trials.contains(&r.trial_id) && (group.is_empty() || r.group == group))
        .map(|r| MetricsReport {
            archived: r.archived,
            end_time: r.report_time.clone(),
            group: r.group.clone(),
            id: r.id,
            metrics: r.metrics.clone(),
            total_batches: r.steps_completed,
            trial_id: r.trial_id,
            trial_run_id: r.trial_run_id,
        })
        .collect();
    let page = wire_json(&GetMetricsResponse { metrics });
    Ok(format!("{}\n", json!({ "result": page })))
}

pub(super) async fn searcher_operation(
    AxState(m): M,
    _caller: Caller,
    Path(id): Path<i32>,
) -> ApiResult<Json<Value>> {
    let state = m.state();
    let t = find_trial(&state, id)?;
    let e = find_experiment(&state, t.experiment_id)?;
    // As upstream: the current operation, `completed` once it is done and nothing follows yet
    // (the trial then exits; a promotion allocates it again).
    let op = SearcherOp {
        validate_after: ValidateAfter {
            request_id: t.task_id.clone(),
            length: t.op_length.unwrap_or(e.max_length),
        },
    };
    Ok(Json(wire_json(&SearcherOperationResponse {
        completed: t.searcher_completed || t.op_done,
        op: Some(op),
    })))
}

pub(super) async fn completed_operation(
    AxState(m): M,
    caller: Caller,
    Path(id): Path<i32>,
    body: Bytes,
) -> ApiResult<Json<Value>> {
    caller.may_act_for_trial(id)?;
    let req: hr_det::wire::CompleteOperationRequest = parse(&body)?;
    let mut state = m.state();
    find_trial(&state, id)?;
    let length = req.op.get("length").and_then(Value::as_i64).unwrap_or(0);
    let allocate = crate::searcher::op_completed(&mut state, id, length, &req.searcher_metric)
        .map_err(ApiError::InvalidArgument)?;
    m.persist(state);
    for trial in allocate {
        scheduler::allocate(&m, trial);
    }
    Ok(Json(json!({})))
}

pub(super) async fn progress(
    AxState(m): M,
    caller: Caller,
    Path(id): Path<i32>,
    body: Bytes,
) -> ApiResult<Json<Value>> {
    caller.may_act_for_trial(id)?;
    let value: f64 = parse(&body)?;
    let mut state = m.state();
    find_trial(&state, id)?;
    if let Some(t) = state.trials.get_mut(&id) {
        t.progress = value;
    }
    m.persist(state);
    Ok(Json(json!({})))
}
