//! The experiment config (Determined's `expconf/v0/experiment.json`) and the parts it shares with
//! commands: resources, bind mounts, environment, checkpoint storage.

use std::collections::BTreeMap;

use serde::{Deserialize, Serialize};

/// An experiment config: only the fields we use, with Determined's names and shapes.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct ExperimentConfig {
    /// Experiment name.
    pub name: String,
    /// Free-text description.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub description: Option<String>,
    /// Labels shown in the web UI.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub labels: Vec<String>,
    /// Workspace name (resolved with `project` when no project id is given on the CLI).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub workspace: Option<String>,
    /// Project name.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub project: Option<String>,
    /// The trial command, exec'd directly (array form: no shell).
    pub entrypoint: Vec<String>,
    /// Slots and pool.
    pub resources: Resources,
    /// The searcher; we use `single`.
    pub searcher: Searcher,
    /// Hyperparameters (constants).
    #[serde(default)]
    pub hyperparameters: BTreeMap<String, String>,
    /// Restarts after a failure before the trial errors.
    pub max_restarts: u32,
    /// Which checkpoints the master keeps.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub checkpoint_policy: Option<CheckpointPolicy>,
    /// Where checkpoints go; `None` uses the cluster's default.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub checkpoint_storage: Option<CheckpointStorage>,
    /// The experiment seed.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub reproducibility: Option<Reproducibility>,
    /// Host folders mounted into the container.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub bind_mounts: Vec<BindMount>,
    /// Image and environment variables.
    pub environment: Environment,
}

/// `resources`: experiments use `slots_per_trial`, commands use `slots`.
#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct Resources {
    /// Slots per trial (experiments only).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub slots_per_trial: Option<u32>,
    /// Slots (commands and shells only).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub slots: Option<u32>,
    /// Resource pool name; `None` is the cluster default.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub resource_pool: Option<String>,
}

/// `searcher` with `name: single`.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct Searcher {
    /// Always `single` for us.
    pub name: String,
    /// The searcher metric.
    pub metric: String,
    /// Whether a smaller metric is better.
    pub smaller_is_better: bool,
    /// The trial length; still required for `single` in 0.35.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub max_length: Option<Length>,
}

impl Searcher {
    /// A `single` searcher of `batches` batches.
    pub fn single(metric: &str, batches: u64) -> Self {
        Self {
            name: "single".to_owned(),
            metric: metric.to_owned(),
            smaller_is_better: true,
            max_length: Some(Length { batches }),
        }
    }
}

/// A length in batches (for us: optimizer steps).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct Length {
    /// Number of batches.
    pub batches: u64,
}

/// `checkpoint_policy`.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum CheckpointPolicy {
    /// Keep the best checkpoint.
    Best,
    /// Keep all checkpoints.
    All,
    /// Keep none beyond the latest.
    None,
}

/// `checkpoint_storage`, the two kinds we render.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(tag = "type", rename_all = "snake_case", deny_unknown_fields)]
pub enum CheckpointStorage {
    /// A shared filesystem mounted at `/determined_shared_fs`.
    SharedFs {
        /// Host path of the share.
        host_path: String,
        /// Sub-path under the share.
        #[serde(default, skip_serializing_if = "Option::is_none")]
        storage_path: Option<String>,
    },
    /// A plain directory, used unchanged (no containers needed).
    Directory {
        /// Absolute path.
        container_path: String,
    },
}

/// `reproducibility`.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct Reproducibility {
    /// The experiment seed.
    pub experiment_seed: u32,
}

/// One bind mount.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct BindMount {
    /// Absolute host path.
    pub host_path: String,
    /// Path inside the container.
    pub container_path: String,
    /// Mount read-only.
    #[serde(default)]
    pub read_only: bool,
}

/// `environment`.
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct Environment {
    /// Container image; `None` uses the cluster default.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub image: Option<String>,
    /// `K=V` strings.
    #[serde(default)]
    pub environment_variables: Vec<String>,
}
