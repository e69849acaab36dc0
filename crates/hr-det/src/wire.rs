//! grpc-gateway wire types of Determined 0.35 (`runtime.JSONPb{EmitDefaults: true}`): field names
//! in lowerCamelCase, int64 values as JSON strings, enums as `STATE_*` names, RFC 3339 times.
//! Only the fields we use or the Python client requires; unknown fields are tolerated on input.

use std::collections::BTreeMap;

use serde::{Deserialize, Deserializer, Serialize, Serializer};
use serde_json::Value;

/// int64/uint64 as grpc-gateway writes them (a JSON string); numbers are accepted on input.
pub mod int64_string {
    use super::*;

    /// Serialises as a string.
    pub fn serialize<S: Serializer>(v: &i64, s: S) -> Result<S::Ok, S::Error> {
        s.serialize_str(&v.to_string())
    }

    /// Accepts a string or a number.
    pub fn deserialize<'de, D: Deserializer<'de>>(d: D) -> Result<i64, D::Error> {
        match Value::deserialize(d)? {
            Value::String(s) => s.parse().map_err(serde::de::Error::custom),
            Value::Number(n) => n
                .as_i64()
                .ok_or_else(|| serde::de::Error::custom("not an int64")),
            other => Err(serde::de::Error::custom(format!(
                "expected an int64, got {other}"
            ))),
        }
    }
}

/// Map values that are int64 strings (checkpoint `resources`).
pub mod int64_string_map {
    use super::*;

    /// Serialises values as strings.
    pub fn serialize<S: Serializer>(v: &BTreeMap<String, i64>, s: S) -> Result<S::Ok, S::Error> {
        let m: BTreeMap<&String, String> = v.iter().map(|(k, v)| (k, v.to_string())).collect();
        m.serialize(s)
    }

    /// Accepts strings or numbers.
    pub fn deserialize<'de, D: Deserializer<'de>>(d: D) -> Result<BTreeMap<String, i64>, D::Error> {
        let raw: BTreeMap<String, Value> = BTreeMap::deserialize(d)?;
        raw.into_iter()
            .map(|(k, v)| {
                let n = match &v {
                    Value::String(s) => s.parse().ok(),
                    Value::Number(n) => n.as_i64(),
                    _ => None,
                };
                n.map(|n| (k, n)).ok_or_else(|| {
                    serde::de::Error::custom(format!("resource size {v} is not an int64"))
                })
            })
            .collect()
    }
}

macro_rules! wire_enum {
    ($(#[$doc:meta])* $name:ident { $($variant:ident = $wire:literal),+ $(,)? }) => {
        $(#[$doc])*
        #[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Serialize, Deserialize)]
        pub enum $name {
            $(
                #[doc = $wire]
                #[serde(rename = $wire)]
                $variant,
            )+
        }
        impl $name {
            /// The wire name.
            pub fn as_str(self) -> &'static str {
                match self { $(Self::$variant => $wire,)+ }
            }
        }
    };
}

wire_enum!(
    /// experimentv1State (trialv1State is the same minus the delete states).
    State {
        Unspecified = "STATE_UNSPECIFIED",
        Active = "STATE_ACTIVE",
        Paused = "STATE_PAUSED",
        StoppingCompleted = "STATE_STOPPING_COMPLETED",
        StoppingCanceled = "STATE_STOPPING_CANCELED",
        StoppingError = "STATE_STOPPING_ERROR",
        Completed = "STATE_COMPLETED",
        Canceled = "STATE_CANCELED",
        Error = "STATE_ERROR",
        Deleted = "STATE_DELETED",
        Deleting = "STATE_DELETING",
        DeleteFailed = "STATE_DELETE_FAILED",
        StoppingKilled = "STATE_STOPPING_KILLED",
        Queued = "STATE_QUEUED",
        Pulling = "STATE_PULLING",
        Starting = "STATE_STARTING",
        Running = "STATE_RUNNING",
    }
);

impl State {
    /// Whether the state is terminal (no further transitions).
    pub fn is_terminal(self) -> bool {
        matches!(
            self,
            Self::Completed | Self::Canceled | Self::Error | Self::Deleted
        )
    }
}

wire_enum!(
    /// taskv1State (commands).
    TaskState {
        Unspecified = "STATE_UNSPECIFIED",
        Pulling = "STATE_PULLING",
        Starting = "STATE_STARTING",
        Running = "STATE_RUNNING",
        Terminated = "STATE_TERMINATED",
        Terminating = "STATE_TERMINATING",
        Waiting = "STATE_WAITING",
        Queued = "STATE_QUEUED",
    }
);

wire_enum!(
    /// checkpointv1State.
    CheckpointState {
        Unspecified = "STATE_UNSPECIFIED",
        Active = "STATE_ACTIVE",
        Completed = "STATE_COMPLETED",
        Error = "STATE_ERROR",
        Deleted = "STATE_DELETED",
        PartiallyDeleted = "STATE_PARTIALLY_DELETED",
    }
);

wire_enum!(
    /// Checkpoint listing sort keys.
    CheckpointSortBy {
        Unspecified = "SORT_BY_UNSPECIFIED",
        Uuid = "SORT_BY_UUID",
        TrialId = "SORT_BY_TRIAL_ID",
        BatchNumber = "SORT_BY_BATCH_NUMBER",
        EndTime = "SORT_BY_END_TIME",
        State = "SORT_BY_STATE",
        SearcherMetric = "SORT_BY_SEARCHER_METRIC",
    }
);

/// The error envelope: `{"error":{"code":<grpc code>,"reason":"NotFound","error":"<message>"}}`.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct ErrorEnvelope {
    /// The error.
    pub error: ErrorBody,
}

/// The envelope's body.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct ErrorBody {
    /// gRPC status code.
    pub code: i32,
    /// gRPC status name.
    pub reason: String,
    /// Message.
    pub error: String,
}

/// `GET /info`.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct MasterInfo {
    /// Master version, e.g. `0.35.0`.
    pub version: String,
    /// Cluster id.
    pub cluster_id: String,
    /// Master id.
    pub master_id: String,
    /// Cluster name.
    #[serde(default)]
    pub cluster_name: String,
}

/// `POST /api/v1/auth/login` body.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct LoginRequest {
    /// User name.
    pub username: String,
    /// Hashed password (see [`crate::hash_password`]).
    pub password: String,
    /// Always true from the Python client.
    pub is_hashed: bool,
}

/// A user.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct User {
    /// Id.
    #[serde(default)]
    pub id: i32,
    /// Name.
    pub username: String,
    /// Admin flag.
    pub admin: bool,
    /// Active flag.
    pub active: bool,
    /// Display name.
    #[serde(default)]
    pub display_name: String,
}

/// `POST /api/v1/auth/login` response.
#[derive(Clone, PartialEq, Serialize, Deserialize)]
pub struct LoginResponse {
    /// The session token.
    pub token: String,
    /// The user.
    pub user: User,
}

impl std::fmt::Debug for LoginResponse {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("LoginResponse")
            .field("token", &"<redacted>")
            .field("user", &self.user)
            .finish()
    }
}

/// `GET /api/v1/me`.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct MeResponse {
    /// The user.
    pub user: User,
}

/// v1File of a model definition.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct File {
    /// Relative path.
    pub path: String,
    /// Tar type flag (48 file, 53 dir).
    #[serde(rename = "type")]
    pub kind: i32,
    /// Base64 content.
    pub content: String,
    /// Mode bits.
    pub mode: i32,
    /// Modification time, seconds.
    #[serde(with = "int64_string")]
    pub mtime: i64,
    /// Owner uid.
    pub uid: i32,
    /// Owner gid.
    pub gid: i32,
}

/// `POST /api/v1/experiments` body.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct CreateExperimentRequest {
    /// Start it (false with `--paused`).
    #[serde(default)]
    pub activate: bool,
    /// The raw YAML text of the config.
    pub config: String,
    /// Model definition files (only when a folder is given).
    #[serde(default)]
    pub model_definition: Option<Vec<File>>,
    /// Parent experiment (forks).
    #[serde(default)]
    pub parent_id: Option<i32>,
    /// Project id.
    #[serde(default)]
    pub project_id: Option<i32>,
    /// Config template name.
    #[serde(default)]
    pub template: Option<String>,
    /// Validate only.
    #[serde(default)]
    pub validate_only: bool,
}

/// v1Experiment.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct Experiment {
    /// Id.
    pub id: i32,
    /// Archived flag.
    pub archived: bool,
    /// The config with defaults, as JSON.
    pub config: Value,
    /// Job id.
    pub job_id: String,
    /// Name.
    pub name: String,
    /// Number of trials.
    pub num_trials: i32,
    /// The submitted YAML.
    pub original_config: String,
    /// Project id.
    pub project_id: i32,
    /// Project owner id.
    pub project_owner_id: i32,
    /// Searcher name.
    pub searcher_type: String,
    /// Start time.
    pub start_time: String,
    /// State.
    pub state: State,
    /// Owner.
    pub username: String,
    /// End time.
    #[serde(default)]
    pub end_time: Option<String>,
    /// Description.
    #[serde(default)]
    pub description: Option<String>,
    /// Resource pool.
    #[serde(default)]
    pub resource_pool: Option<String>,
    /// Labels.
    #[serde(default)]
    pub labels: Vec<String>,
    /// Progress in [0, 1].
    #[serde(default)]
    pub progress: Option<f64>,
    /// Workspace id.
    #[serde(default)]
    pub workspace_id: Option<i32>,
}

/// `POST /api/v1/experiments` and `GET /api/v1/experiments/{id}` response.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct ExperimentResponse {
    /// The experiment.
    pub experiment: Experiment,
    /// Its config.
    pub config: Value,
    /// Warnings (create only).
    #[serde(default)]
    pub warnings: Vec<Value>,
    /// Job summary (get only).
    #[serde(default)]
    pub job_summary: Option<Value>,
}

/// trialv1Trial.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct Trial {
    /// Id.
    pub id: i32,
    /// Experiment id.
    pub experiment_id: i32,
    /// Hyperparameters.
    pub hparams: Value,
    /// Restarts so far.
    pub restarts: i32,
    /// Start time.
    pub start_time: String,
    /// State.
    pub state: State,
    /// Batches processed (steps completed).
    pub total_batches_processed: i32,
    /// End time.
    #[serde(default)]
    pub end_time: Option<String>,
    /// Task id.
    #[serde(default)]
    pub task_id: Option<String>,
    /// Current run id (allocation count).
    #[serde(default)]
    pub run_id: Option<i32>,
}

/// Pagination of list responses (`endIndex` and `total` are required by the Python client).
#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct Pagination {
    /// Offset asked.
    #[serde(default)]
    pub offset: i32,
    /// Limit asked.
    #[serde(default)]
    pub limit: i32,
    /// First index.
    #[serde(default)]
    pub start_index: i32,
    /// One past the last index.
    pub end_index: i32,
    /// Total items.
    pub total: i32,
}

/// `GET /api/v1/experiments/{id}/trials`.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct TrialsResponse {
    /// Trials.
    pub trials: Vec<Trial>,
    /// Pagination.
    pub pagination: Pagination,
}

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

/// `POST /api/v1/commands` body.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct CreateCommandRequest {
    /// The command config as JSON (entrypoint included).
    pub config: Value,
    /// Context files (only with `--context`).
    #[serde(default)]
    pub files: Option<Vec<File>>,
    /// Template name.
    #[serde(default, rename = "template_name")]
    pub template_name: Option<String>,
    /// Workspace id.
    #[serde(default)]
    pub workspace_id: Option<i32>,
}

/// v1Command.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct Command {
    /// Id (a task id).
    pub id: String,
    /// Description.
    pub description: String,
    /// Job id.
    pub job_id: String,
    /// Resource pool.
    pub resource_pool: String,
    /// Start time.
    pub start_time: String,
    /// State.
    pub state: TaskState,
    /// Owner.
    pub username: String,
    /// Workspace id.
    pub workspace_id: i32,
    /// Exit status once terminated.
    #[serde(default)]
    pub exit_status: Option<String>,
}

/// `POST /api/v1/commands` and `GET /api/v1/commands/{id}` response.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct CommandResponse {
    /// The command.
    pub command: Command,
    /// Its config.
    pub config: Value,
}

/// One task log line: `{"result": {...}}` per NDJSON line.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct TaskLog {
    /// Line id (an int64 string on the wire).
    #[serde(default, with = "int64_string")]
    pub id: i64,
    /// Task id.
    #[serde(default)]
    pub task_id: String,
    /// Timestamp.
    #[serde(default)]
    pub timestamp: Option<String>,
    /// Level (`LOG_LEVEL_INFO`, ...).
    #[serde(default)]
    pub level: Option<String>,
    /// The text.
    #[serde(default)]
    pub log: String,
    /// Same text (newer field).
    #[serde(default)]
    pub message: Option<String>,
}

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
