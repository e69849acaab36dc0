//! Checkpoints: list, read, and a trial's report of one (fenced to its current allocation).

use std::collections::HashMap;

use axum::{
    Json,
    body::Bytes,
    extract::{Path, Query, State as AxState},
};
use hr_det::wire::{Checkpoint, CheckpointResponse, CheckpointsResponse, Pagination};
use serde_json::{Value, json};

use super::{
    Caller, M, find_experiment, find_trial, parse, trial_of_task, wire_json,
    workloads::with_training,
};
use crate::{
    error::{ApiError, ApiResult},
    info::now_rfc3339,
};

/// `GET /api/v1/experiments/{id}/checkpoints`: filtered by `states`, sorted by `sortByAttr`
/// (`SORT_BY_SEARCHER_METRIC`, as `list-checkpoints --best` asks, puts checkpoints without the
/// metric last and orders the rest best first unless `orderBy` says otherwise), then paged.
pub(super) async fn list_checkpoints(
    AxState(m): M,
    _caller: Caller,
    Path(id): Path<i32>,
    Query(pairs): Query<Vec<(String, String)>>,
) -> ApiResult<Json<Value>> {
    let state = m.state();
    let exp = find_experiment(&state, id)?;
    let states: Vec<&str> = pairs
        .iter()
        .filter(|(k, _)| k == "states")
        .map(|(_, v)| v.as_str())
        .collect();
    let q: HashMap<String, String> = pairs.iter().cloned().collect();
    let mut list: Vec<Checkpoint> = state
        .checkpoints
        .iter()
        .filter(|c| c.experiment_id == id)
        .map(|c| with_training(&state, c))
        .filter(|c| states.is_empty() || states.contains(&c.state.as_str()))
        .collect();
    let by = q
        .get("sortByAttr")
        .map_or("SORT_BY_UNSPECIFIED", String::as_str);
    let searcher = by == "SORT_BY_SEARCHER_METRIC";
    let descending = match q.get("orderBy").map(String::as_str) {
        Some("ORDER_BY_DESC") => true,
        Some("ORDER_BY_ASC") => false,
        _ => searcher && !crate::gc::searcher_metric(&exp.config).1,
    };
    let time = |c: &Checkpoint| c.report_time.clone().unwrap_or_default();
    match by {
        "SORT_BY_UUID" => list.sort_by(|a, b| a.uuid.cmp(&b.uuid)),
        "SORT_BY_BATCH_NUMBER" => list.sort_by_key(|a| (a.steps_completed(), time(a))),
        "SORT_BY_STATE" => list.sort_by_key(|c| c.state.as_str()),
        "SORT_BY_TRIAL_ID" => list.sort_by_key(|c| (c.training.trial_id, time(c))),
        "SORT_BY_SEARCHER_METRIC" => list.sort_by(|a, b| {
            let (x, y) = (a.training.searcher_metric, b.training.searcher_metric);
            x.is_none()
                .cmp(&y.is_none())
                .then_with(|| x.unwrap_or(0.0).total_cmp(&y.unwrap_or(0.0)))
                .then_with(|| time(a).cmp(&time(b)))
        }),
        _ => list.sort_by_key(|c| time(c)),
    }
    if descending {
        list.reverse();
        if searcher {
            // Without the metric a checkpoint is last whichever way the rest are ordered.
            list.sort_by_key(|c| c.training.searcher_metric.is_none());
        }
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
    let checkpoints: Vec<Checkpoint> = list.into_iter().skip(offset).take(limit).collect();
    let index = |n: usize| i32::try_from(n).unwrap_or(i32::MAX);
    let response = CheckpointsResponse {
        pagination: Pagination {
            offset: index(offset),
            limit: 0,
            start_index: index(offset),
            end_index: index(offset + checkpoints.len()),
            total: index(total),
        },
        checkpoints,
    };
    Ok(Json(wire_json(&response)))
}

pub(super) async fn get_checkpoint(
    AxState(m): M,
    _caller: Caller,
    Path(uuid): Path<String>,
) -> ApiResult<Json<Value>> {
    let state = m.state();
    let c = state
        .checkpoints
        .iter()
        .find(|c| c.checkpoint.uuid == uuid)
        .ok_or_else(|| ApiError::NotFound(format!("checkpoint not found: {uuid}")))?;
    Ok(Json(wire_json(&CheckpointResponse {
        checkpoint: with_training(&state, c),
    })))
}

pub(super) async fn report_checkpoint(
    AxState(m): M,
    caller: Caller,
    body: Bytes,
) -> ApiResult<Json<Value>> {
    let mut c: Checkpoint = parse(&body)?;
    // Upstream keeps uuids in a Postgres `uuid` column; here the uuid also names the folder GC
    // deletes and the path the next allocation restores, so nothing else may pass.
    // Its canonical spelling only: the trial wrote its folder under the uuid it sends, and GC
    // and restore name that folder by the uuid stored.
    if crate::state::canonical_uuid(&c.uuid).as_deref() != Some(c.uuid.as_str()) {
        return Err(ApiError::InvalidArgument(format!(
            "checkpoint uuid {:?} is not a UUID in its canonical form (lowercase, hyphenated), \
             such as {}",
            c.uuid,
            crate::info::uuid4()
        )));
    }
    if c.steps_completed().is_none() {
        return Err(ApiError::InvalidArgument(
            "checkpoint metadata must contain an integer steps_completed".into(),
        ));
    }
    let mut state = m.state();
    caller.fence(&m)?;
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
    if let (Some(alloc), Some(task)) = (&c.allocation_id, &c.task_id)
        && !alloc.starts_with(&format!("{task}."))
    {
        return Err(ApiError::InvalidArgument(format!(
            "checkpoint {}: allocation {alloc} is not an allocation of task {task}",
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
    match &c.allocation_id {
        Some(alloc) => caller.may_act_for_allocation(alloc)?,
        None => caller.may_act_for_trial(trial_id)?,
    }
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
