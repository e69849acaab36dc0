//! Experiments and their trials: create, describe, list (`/api/v1/experiments`, `/api/v1/trials`).

use serde::{Deserialize, Serialize};
use serde_json::Value;

use super::{File, Pagination, State};

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
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub run_id: Option<i32>,
}

/// `GET /api/v1/experiments/{id}/trials`.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct TrialsResponse {
    /// Trials.
    pub trials: Vec<Trial>,
    /// Pagination.
    pub pagination: Pagination,
}
