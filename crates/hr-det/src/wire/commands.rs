//! Commands and task logs (`/api/v1/commands`, `/api/v1/tasks/{id}/logs`).

use serde::{Deserialize, Serialize};
use serde_json::Value;

use super::{File, TaskState, int64_string};

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
