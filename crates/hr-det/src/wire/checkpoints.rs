//! Checkpoints as the master lists and reports them (`/api/v1/checkpoints`).

use std::collections::BTreeMap;

use serde::{Deserialize, Serialize};
use serde_json::Value;

use super::{CheckpointState, Pagination, int64_string_map};

/// The `training` part of a checkpoint.
#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct CheckpointTraining {
    /// Trial id.
    #[serde(default)]
    pub trial_id: Option<i32>,
    /// Experiment id.
    #[serde(default)]
    pub experiment_id: Option<i32>,
    /// Experiment config.
    #[serde(default)]
    pub experiment_config: Option<Value>,
    /// Hyperparameters.
    #[serde(default)]
    pub hparams: Option<Value>,
    /// Training metrics.
    #[serde(default)]
    pub training_metrics: Option<Value>,
    /// Validation metrics.
    #[serde(default)]
    pub validation_metrics: Option<Value>,
    /// Searcher metric.
    #[serde(default)]
    pub searcher_metric: Option<f64>,
}

/// v1Checkpoint; `POST /api/v1/checkpoints` sends exactly this as its body.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct Checkpoint {
    /// Storage UUID.
    pub uuid: String,
    /// Task id.
    #[serde(default)]
    pub task_id: Option<String>,
    /// Allocation id.
    #[serde(default)]
    pub allocation_id: Option<String>,
    /// Report time (RFC 3339).
    #[serde(default)]
    pub report_time: Option<String>,
    /// State.
    pub state: CheckpointState,
    /// Relative path -> size in bytes (int64 strings on the wire).
    #[serde(with = "int64_string_map")]
    pub resources: BTreeMap<String, i64>,
    /// User metadata; must hold `steps_completed`.
    pub metadata: Value,
    /// Training context.
    #[serde(default)]
    pub training: CheckpointTraining,
    /// Storage id from `runs/start`.
    #[serde(default)]
    pub storage_id: Option<i32>,
}

impl Checkpoint {
    /// `metadata.steps_completed`, if present and integral.
    pub fn steps_completed(&self) -> Option<i64> {
        self.metadata.get("steps_completed").and_then(Value::as_i64)
    }
}

/// `GET /api/v1/experiments/{id}/checkpoints`.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct CheckpointsResponse {
    /// Checkpoints.
    pub checkpoints: Vec<Checkpoint>,
    /// Pagination.
    pub pagination: Pagination,
}

/// `GET /api/v1/checkpoints/{uuid}`.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct CheckpointResponse {
    /// The checkpoint.
    pub checkpoint: Checkpoint,
}
