//! Logs and tasks: a task's log (`det task logs`, `det command logs`), a trial's (`det trial
//! logs`, with `--head`/`--tail` as `limit` and `orderBy`), and the running tasks (`det task
//! list`). Every line of a log file is one record, with its newline.

use std::path::PathBuf;

use axum::{
    Json,
    extract::{Path, Query, State as AxState},
};
use serde::Deserialize;
use serde_json::{Value, json};

use hr_det::wire::{TaskLog, TaskState};

use super::{Caller, M, with_cli_fields};
use crate::{
    error::{ApiError, ApiResult},
    info::now_rfc3339,
    master::Master,
};

/// The lines of a log file (none when it does not exist yet).
fn lines(path: &std::path::Path) -> Vec<String> {
    std::fs::read_to_string(path)
        .unwrap_or_default()
        .lines()
        .map(|l| format!("{l}\n"))
        .collect()
}

/// The log file of a trial's task.
fn trial_log(m: &Master, task_id: &str) -> PathBuf {
    m.config
        .state_dir
        .join("logs")
        .join(format!("{task_id}.log"))
}

/// NDJSON of `{"result": record}`, as the streaming routes answer.
fn stream(records: impl Iterator<Item = Value>) -> String {
    records
        .map(|r| format!("{}\n", json!({ "result": r })))
        .collect()
}

pub(super) async fn task_logs(
    AxState(m): M,
    _caller: Caller,
    Path(id): Path<String>,
) -> ApiResult<String> {
    let path = {
        let state = m.state();
        match state.commands.get(&id) {
            Some(c) => c.log_path.clone(),
            None if state.trials.values().any(|t| t.task_id == id) => trial_log(&m, &id),
            None => return Err(ApiError::NotFound(format!("task not found: {id}"))),
        }
    };
    Ok(stream(lines(&path).into_iter().enumerate().map(
        |(i, line)| {
            let log = TaskLog {
                id: i64::try_from(i).unwrap_or(i64::MAX),
                task_id: id.clone(),
                timestamp: Some(now_rfc3339()),
                level: Some("LOG_LEVEL_INFO".to_owned()),
                log: line.clone(),
                message: Some(line),
            };
            with_cli_fields(
                &log,
                json!({"allocationId": null, "agentId": "devmaster", "containerId": null,
                "rankId": 0, "source": "", "stdtype": "stdout"}),
            )
        },
    )))
}

#[derive(Deserialize)]
#[serde(rename_all = "camelCase")]
pub(super) struct TrialLogsQuery {
    limit: Option<usize>,
    order_by: Option<String>,
}

/// `GET /api/v1/trials/{id}/logs`: every line so far (`follow` is answered with what exists).
pub(super) async fn trial_logs(
    AxState(m): M,
    _caller: Caller,
    Path(id): Path<i32>,
    Query(query): Query<TrialLogsQuery>,
) -> ApiResult<String> {
    let task_id = m
        .state()
        .trials
        .get(&id)
        .map(|t| t.task_id.clone())
        .ok_or_else(|| ApiError::NotFound(format!("trial not found: {id}")))?;
    let mut records: Vec<(usize, String)> = lines(&trial_log(&m, &task_id))
        .into_iter()
        .enumerate()
        .collect();
    if query.order_by.as_deref() == Some("ORDER_BY_DESC") {
        records.reverse();
    }
    if let Some(limit) = query.limit.filter(|l| *l > 0) {
        records.truncate(limit);
    }
    Ok(stream(records.into_iter().map(|(i, line)| {
        json!({"id": i.to_string(), "trialId": id, "level": "LOG_LEVEL_INFO",
            "message": line, "log": line, "timestamp": now_rfc3339(), "agentId": "devmaster",
            "containerId": null, "rankId": 0, "source": "", "stdtype": "stdout"})
    })))
}

/// `GET /api/v1/tasks`: the running trial allocations and commands, by allocation id.
pub(super) async fn list_tasks(AxState(m): M, _caller: Caller) -> ApiResult<Json<Value>> {
    let summary = |task: &str, allocation: &str, name: &str, registered: &str| {
        json!({"taskId": task, "allocationId": allocation, "name": name, "slotsNeeded": 0,
            "registeredTime": registered, "resourcePool": "default",
            "schedulerType": "fair_share", "priority": null, "resources": [], "proxyPorts": []})
    };
    let running: Vec<(i32, String)> = m
        .allocs()
        .iter()
        .map(|(trial, a)| (*trial, a.allocation_id.clone()))
        .collect();
    let state = m.state();
    let mut tasks = serde_json::Map::new();
    for (trial, allocation) in running {
        if let Some(t) = state.trials.get(&trial) {
            let name = state
                .experiments
                .get(&t.experiment_id)
                .map_or_else(String::new, |e| format!("Trial {trial} ({})", e.name));
            tasks.insert(
                allocation.clone(),
                summary(&t.task_id, &allocation, &name, &t.start_time),
            );
        }
    }
    for c in state
        .commands
        .values()
        .filter(|c| c.state == TaskState::Running)
    {
        let allocation = format!("{}.1", c.id);
        tasks.insert(
            allocation.clone(),
            summary(&c.id, &allocation, &c.description, &c.start_time),
        );
    }
    Ok(Json(json!({ "allocationIdToSummary": tasks })))
}
