//! What the CLI reads about a trial's metrics: its workloads (training and validation reports
//! and checkpoints, by batches: `det trial describe`), its summary metrics, and the training
//! record a checkpoint carries (the experiment's config, the trial's hyperparameters, the
//! metrics reported at its step and the searcher metric: `det checkpoint describe|download`,
//! `list-checkpoints --best`).

use std::collections::HashMap;

use axum::{
    Json,
    extract::{Path, Query, State as AxState},
};
use hr_det::wire::Checkpoint;
use serde_json::{Map, Value, json};

use super::{Caller, M, find_trial};
use crate::{
    error::ApiResult,
    state::{CheckpointRec, MasterState, MetricRec},
};

/// The group a metrics record belongs to, as workloads name it.
const TRAINING: &str = "training";
const VALIDATION: &str = "validation";

/// The trial's current (not archived) metrics records.
fn current(state: &MasterState, trial: i32) -> impl Iterator<Item = &MetricRec> {
    state
        .metrics
        .iter()
        .filter(move |r| r.trial_id == trial && !r.archived)
}

/// A record's `avgMetrics` (and `batchMetrics` when asked) as `v1Metrics`.
fn metrics(r: &MetricRec, batches: bool) -> Value {
    let mut v = json!({"avgMetrics": r.metrics.get("avg_metrics").cloned().unwrap_or(json!({}))});
    if batches && let Some(b) = r.metrics.get("batch_metrics").filter(|b| !b.is_null()) {
        v["batchMetrics"] = b.clone();
    }
    v
}

/// `GET /api/v1/trials/{id}/workloads`: training and validation reports and checkpoints in
/// order of batches (a report before a checkpoint at the same step), paged by `offset`/`limit`.
pub(super) async fn workloads(
    AxState(m): M,
    _caller: Caller,
    Path(id): Path<i32>,
    Query(q): Query<HashMap<String, String>>,
) -> ApiResult<Json<Value>> {
    let state = m.state();
    find_trial(&state, id)?;
    let batches = q.get("includeBatchMetrics").is_some_and(|v| v == "true");
    let mut rows: Vec<(i64, u8, Value)> = current(&state, id)
        .filter_map(|r| {
            let (order, key) = match r.group.as_str() {
                TRAINING => (0, TRAINING),
                VALIDATION => (1, VALIDATION),
                _ => return None,
            };
            let workload = json!({"endTime": r.report_time, "metrics": metrics(r, batches),
                "numInputs": 0, "totalBatches": r.steps_completed});
            Some((
                i64::from(r.steps_completed),
                order,
                json!({ key: workload }),
            ))
        })
        .collect();
    rows.extend(
        state
            .checkpoints
            .iter()
            .filter(|c| c.trial_id == id)
            .map(|c| {
                let c = &c.checkpoint;
                let steps = c.steps_completed().unwrap_or(0);
                let resources: Map<String, Value> = c
                    .resources
                    .iter()
                    .map(|(k, v)| (k.clone(), json!(v.to_string())))
                    .collect();
                let workload = json!({"uuid": c.uuid, "endTime": c.report_time, "state": c.state,
                    "resources": resources, "metadata": c.metadata, "totalBatches": steps});
                (steps, 2, json!({ "checkpoint": workload }))
            }),
    );
    rows.sort_by_key(|(steps, order, _)| (*steps, *order));
    let total = rows.len();
    let offset = q
        .get("offset")
        .and_then(|o| o.parse().ok())
        .unwrap_or(0usize)
        .min(total);
    let limit = q
        .get("limit")
        .and_then(|l| l.parse().ok())
        .filter(|l: &usize| *l > 0)
        .unwrap_or(total);
    let page: Vec<Value> = rows
        .into_iter()
        .skip(offset)
        .take(limit)
        .map(|(_, _, w)| w)
        .collect();
    let index = |n: usize| i32::try_from(n).unwrap_or(i32::MAX);
    let pagination = json!({"offset": index(offset), "limit": index(limit),
        "startIndex": index(offset), "endIndex": index(offset + page.len()), "total": index(total)});
    Ok(Json(json!({"workloads": page, "pagination": pagination})))
}

/// A trial's summary metrics as the master keeps them: per group (`avg_metrics` for training,
/// `validation_metrics`, else the group's name), per metric its count, last value, and for
/// numbers min, max and sum. `null` before the first report.
pub(super) fn summary_metrics(state: &MasterState, trial: i32) -> Value {
    let mut summary = Map::new();
    for r in current(state, trial) {
        let group = match r.group.as_str() {
            TRAINING => "avg_metrics",
            VALIDATION => "validation_metrics",
            other => other,
        };
        let Some(avg) = r.metrics.get("avg_metrics").and_then(Value::as_object) else {
            continue;
        };
        let entry = summary
            .entry(group)
            .or_insert_with(|| json!({}))
            .as_object_mut()
            .expect("an object");
        for (name, value) in avg {
            let s = entry.entry(name).or_insert_with(|| json!({"count": 0}));
            s["count"] = json!(s["count"].as_i64().unwrap_or(0) + 1);
            s["last"] = value.clone();
            match value.as_f64() {
                Some(x) => {
                    s["type"] = json!("number");
                    let min = s["min"].as_f64().map_or(x, |m| m.min(x));
                    let max = s["max"].as_f64().map_or(x, |m| m.max(x));
                    s["min"] = json!(min);
                    s["max"] = json!(max);
                    s["sum"] = json!(s["sum"].as_f64().unwrap_or(0.0) + x);
                }
                None => {
                    s["type"] = json!(match value {
                        Value::Bool(_) => "boolean",
                        Value::String(_) => "string",
                        _ => "object",
                    });
                }
            }
        }
    }
    if summary.is_empty() {
        Value::Null
    } else {
        Value::Object(summary)
    }
}

/// The latest validation value of the experiment's searcher metric for `trial`.
pub(super) fn searcher_value(state: &MasterState, trial: i32, config: &Value) -> Option<f64> {
    let (metric, _) = crate::gc::searcher_metric(config);
    current(state, trial)
        .filter(|r| r.group == VALIDATION)
        .filter_map(|r| r.metrics.get("avg_metrics")?.get(&metric)?.as_f64())
        .last()
}

/// A checkpoint with its training record filled in as the master answers it: the experiment's
/// config (where `det checkpoint download` finds the storage), the trial's hyperparameters, the
/// training and validation metrics reported at its step, and the searcher metric among them.
pub(super) fn with_training(state: &MasterState, rec: &CheckpointRec) -> Checkpoint {
    let mut c = rec.checkpoint.clone();
    let config = state
        .experiments
        .get(&rec.experiment_id)
        .map(|e| e.config.clone());
    let steps = c.steps_completed();
    let at_step = |group: &str| {
        current(state, rec.trial_id)
            .filter(|r| r.group == group && Some(i64::from(r.steps_completed)) == steps)
            .last()
    };
    c.training.training_metrics = at_step(TRAINING).map(|r| metrics(r, false));
    c.training.validation_metrics = at_step(VALIDATION).map(|r| metrics(r, false));
    c.training.searcher_metric = config.as_ref().and_then(|config| {
        crate::gc::searcher_value(state, rec, &crate::gc::searcher_metric(config).0)
    });
    c.training.hparams = state.trials.get(&rec.trial_id).map(|t| t.hparams.clone());
    c.training.experiment_config = config;
    c
}
