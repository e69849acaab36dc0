//! The trial's identity: from the info files (`cluster.json`, `trial.json`) in `HR_DET_INFO_DIR`
//! or `/run/determined/info`, falling back to the `DET_*` environment.

use std::path::{Path, PathBuf};

use serde_json::Value;

use crate::CoreError;

/// What a trial knows about itself.
#[derive(Clone, PartialEq)]
pub struct TrialInfo {
    /// The master URL.
    pub master_url: String,
    /// Task id.
    pub task_id: String,
    /// Allocation id (`<task>.<run>`).
    pub allocation_id: String,
    /// Trial id.
    pub trial_id: i32,
    /// Experiment id.
    pub experiment_id: i32,
    /// This allocation's run id.
    pub trial_run_id: i32,
    /// The trial seed.
    pub trial_seed: u64,
    /// Steps completed by the checkpoint restored (0 when fresh).
    pub steps_completed: u64,
    /// The scheduler-selected checkpoint to restore, if any.
    pub latest_checkpoint: Option<String>,
    /// The experiment config (with defaults).
    pub config: Value,
    /// Hyperparameters.
    pub hparams: Value,
    pub(crate) user_token: Option<String>,
}

impl std::fmt::Debug for TrialInfo {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("TrialInfo")
            .field("master_url", &self.master_url)
            .field("allocation_id", &self.allocation_id)
            .field("trial_id", &self.trial_id)
            .field("experiment_id", &self.experiment_id)
            .field("trial_run_id", &self.trial_run_id)
            .field("steps_completed", &self.steps_completed)
            .field("latest_checkpoint", &self.latest_checkpoint)
            .field(
                "user_token",
                &self.user_token.as_ref().map(|_| "<redacted>"),
            )
            .finish_non_exhaustive()
    }
}

/// The info folder: `HR_DET_INFO_DIR`, else `/run/determined/info`.
pub(crate) fn info_dir() -> PathBuf {
    std::env::var_os("HR_DET_INFO_DIR")
        .map_or_else(|| PathBuf::from("/run/determined/info"), PathBuf::from)
}

fn read_json(path: &Path) -> Option<Value> {
    std::fs::read(path)
        .ok()
        .and_then(|b| serde_json::from_slice(&b).ok())
}

fn env(name: &str) -> Result<String, CoreError> {
    std::env::var(name).map_err(|_| CoreError::Environment(format!("{name} is not set")))
}

fn num<T: std::str::FromStr>(v: Option<&Value>, fallback_env: &str) -> Result<T, CoreError> {
    let text = match v {
        Some(Value::Number(n)) => n.to_string(),
        Some(Value::String(s)) => s.clone(),
        _ => env(fallback_env)?,
    };
    text.parse()
        .map_err(|_| CoreError::Environment(format!("{fallback_env}={text:?} is not a number")))
}

impl TrialInfo {
    /// Reads the trial's info from `dir`'s files and the environment.
    pub fn from_environment_in(dir: &Path) -> Result<Self, CoreError> {
        let cluster = read_json(&dir.join("cluster.json")).unwrap_or_default();
        let trial = read_json(&dir.join("trial.json")).unwrap_or_default();
        let s = |v: &Value, key: &str, var: &str| -> Result<String, CoreError> {
            match v.get(key).and_then(Value::as_str) {
                Some(s) => Ok(s.to_owned()),
                None => env(var),
            }
        };
        let config = match trial.get("config") {
            Some(c) => c.clone(),
            None => serde_json::from_str(&env("DET_EXPERIMENT_CONFIG")?)
                .map_err(|e| CoreError::Environment(format!("DET_EXPERIMENT_CONFIG: {e}")))?,
        };
        let latest = cluster
            .get("latest_checkpoint")
            .and_then(Value::as_str)
            .map(str::to_owned)
            .or_else(|| std::env::var("DET_LATEST_CHECKPOINT").ok())
            .filter(|s| !s.is_empty());
        Ok(Self {
            master_url: s(&cluster, "master_url", "DET_MASTER")?,
            task_id: s(&cluster, "task_id", "DET_TASK_ID")?,
            allocation_id: s(&cluster, "allocation_id", "DET_ALLOCATION_ID")?,
            trial_id: num(trial.get("trial_id"), "DET_TRIAL_ID")?,
            experiment_id: num(trial.get("experiment_id"), "DET_EXPERIMENT_ID")?,
            trial_run_id: num(trial.get("trial_run_id"), "DET_TRIAL_RUN_ID")?,
            trial_seed: num(trial.get("trial_seed"), "DET_TRIAL_SEED")?,
            steps_completed: num(trial.get("steps_completed"), "DET_STEPS_COMPLETED")?,
            latest_checkpoint: latest,
            hparams: trial
                .get("hparams")
                .cloned()
                .unwrap_or_else(|| config.get("hyperparameters").cloned().unwrap_or_default()),
            config,
            user_token: std::env::var("DET_USER_TOKEN")
                .ok()
                .filter(|t| !t.is_empty()),
        })
    }
}
