//! What a running trial calls: `runs/start`, metrics, preemption, searcher operations.

use serde::{Deserialize, Serialize};
use serde_json::Value;

use super::int64_string;

/// `POST /api/v1/runs/start` body.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct RunsStartRequest {
    /// The trial id.
    pub run_id: i32,
    /// The expconf `checkpoint_storage`.
    pub checkpoint_storage: Value,
}

/// `POST /api/v1/runs/start` response.
#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct RunsStartResponse {
    /// Storage id echoed in checkpoint reports.
    #[serde(default)]
    pub storage_id: Option<i32>,
}

/// Metrics of one report.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct MetricsBody {
    /// Averaged metrics.
    pub avg_metrics: Value,
    /// Per-batch metrics.
    #[serde(default)]
    pub batch_metrics: Option<Vec<Value>>,
}

/// `metrics` of `POST /api/v1/trials/{t}/metrics`.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct TrialMetrics {
    /// Trial id.
    pub trial_id: i32,
    /// The allocation's run id; a stale one is rejected.
    pub trial_run_id: i32,
    /// Steps completed.
    pub steps_completed: i32,
    /// Report time.
    #[serde(default)]
    pub report_time: Option<String>,
    /// The metrics.
    pub metrics: MetricsBody,
}

/// `POST /api/v1/trials/{t}/metrics` body.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct ReportMetricsRequest {
    /// `training`, `validation` or a custom group.
    pub group: String,
    /// The metrics.
    pub metrics: TrialMetrics,
}

/// Preemption long-poll response; `preempt` is always present.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
pub struct PreemptionResponse {
    /// Whether the allocation must stop.
    pub preempt: bool,
}

/// `validateAfter` of a searcher operation.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct ValidateAfter {
    /// Request id.
    #[serde(default)]
    pub request_id: String,
    /// Target length (int64 string).
    #[serde(with = "int64_string")]
    pub length: i64,
}

/// A searcher operation.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct SearcherOp {
    /// Train until `length`, then validate.
    pub validate_after: ValidateAfter,
}

/// `GET /api/v1/trials/{t}/searcher/operation`.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct SearcherOperationResponse {
    /// No more operations.
    pub completed: bool,
    /// The current operation, if any.
    #[serde(default)]
    pub op: Option<SearcherOp>,
}

/// `POST /api/v1/trials/{t}/searcher/completed_operation` body.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct CompleteOperationRequest {
    /// `{"length": N}`.
    pub op: Value,
    /// The searcher metric.
    pub searcher_metric: Value,
}

/// v1MetricsReport: one stored metrics report.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct MetricsReport {
    /// Whether a later run superseded it.
    pub archived: bool,
    /// Report time.
    pub end_time: String,
    /// Group.
    pub group: String,
    /// Row id.
    pub id: i64,
    /// `{"avg_metrics": {...}, "batch_metrics": ...}`.
    pub metrics: Value,
    /// Steps completed at the report.
    pub total_batches: i32,
    /// Trial id.
    pub trial_id: i32,
    /// The allocation run that reported it.
    pub trial_run_id: i32,
}

/// One line of `GET /api/v1/trials/metrics/trial_metrics` (NDJSON `{"result": ...}`).
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct GetMetricsResponse {
    /// Reports.
    pub metrics: Vec<MetricsReport>,
}
