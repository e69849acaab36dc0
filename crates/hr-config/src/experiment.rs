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
    /// Hyperparameters: bare values, or Determined's specs (`{type: const, val: ...}`, ...).
    #[serde(default)]
    pub hyperparameters: BTreeMap<String, serde_json::Value>,
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

/// The validation metric a managed run reports at the steps `evaluate` adopts when its plan has
/// an evaluation section: the mean DEV episode reward (larger is better). The main runs rank
/// their checkpoints by it, as `evaluate` selects one.
pub const DEV_REWARD: &str = "dev_reward";

/// `searcher`: `single`, or a search of hyperparameters.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct Searcher {
    /// `single`, or a search's (`random`, `grid`, `adaptive_asha`).
    pub name: String,
    /// The searcher metric.
    pub metric: String,
    /// Whether a smaller metric is better.
    pub smaller_is_better: bool,
    /// The trial length; still required for `single` in 0.35.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub max_length: Option<Length>,
    /// Trials a `random` or `adaptive_asha` search runs.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub max_trials: Option<u64>,
}

impl Searcher {
    /// A `single` searcher of `batches` batches.
    pub fn single(metric: &str, batches: u64) -> Self {
        Self {
            name: "single".to_owned(),
            metric: metric.to_owned(),
            smaller_is_better: true,
            max_length: Some(Length { batches }),
            max_trials: None,
        }
    }

    /// A search of `kind` over trials of `batches` batches (`max_trials` of them, unless a grid
    /// counts its own), ranked by `metric`.
    pub fn search(
        kind: crate::SearchKind,
        metric: &str,
        smaller_is_better: bool,
        batches: u64,
        max_trials: u64,
    ) -> Self {
        Self {
            name: kind.name().to_owned(),
            metric: metric.to_owned(),
            smaller_is_better,
            max_length: Some(Length { batches }),
            max_trials: (kind != crate::SearchKind::Grid).then_some(max_trials),
        }
    }

    /// A `single` searcher of `batches` batches ranked by the DEV reward a managed run reports
    /// ([`DEV_REWARD`], larger is better).
    pub fn dev_reward(batches: u64) -> Self {
        Self {
            smaller_is_better: false,
            ..Self::single(DEV_REWARD, batches)
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

/// `checkpoint_storage`: where checkpoints go (the cluster's default storage when `kind` is
/// absent; the master merges the rest into it) and how many the end-of-experiment garbage
/// collection keeps.
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct CheckpointStorage {
    /// `shared_fs` or `directory`; absent: the master's default.
    #[serde(rename = "type", default, skip_serializing_if = "Option::is_none")]
    pub kind: Option<StorageKind>,
    /// `shared_fs`: host path of the share.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub host_path: Option<String>,
    /// `shared_fs`: sub-path under the share.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub storage_path: Option<String>,
    /// `directory`: the absolute path, used unchanged.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub container_path: Option<String>,
    /// Best checkpoints of the experiment kept (upstream default 0).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub save_experiment_best: Option<u32>,
    /// Best checkpoints of each trial kept (upstream default 1).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub save_trial_best: Option<u32>,
    /// Latest checkpoints of each trial kept (upstream default 1).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub save_trial_latest: Option<u32>,
}

/// The storage kinds we render.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum StorageKind {
    /// A shared filesystem mounted at `/determined_shared_fs`.
    SharedFs,
    /// A plain directory, used unchanged (no containers needed).
    Directory,
}

impl CheckpointStorage {
    /// A plain directory.
    pub fn directory(container_path: impl Into<String>) -> Self {
        Self {
            kind: Some(StorageKind::Directory),
            container_path: Some(container_path.into()),
            ..Self::default()
        }
    }

    /// A shared filesystem.
    pub fn shared_fs(host_path: impl Into<String>, storage_path: Option<String>) -> Self {
        Self {
            kind: Some(StorageKind::SharedFs),
            host_path: Some(host_path.into()),
            storage_path,
            ..Self::default()
        }
    }

    /// Keeps the latest `n` checkpoints of each trial through garbage collection, and no
    /// "best" ones beyond them (a training run's retained steps are its latest).
    pub fn retaining_latest(mut self, n: u32) -> Self {
        self.save_experiment_best = Some(0);
        self.save_trial_best = Some(0);
        self.save_trial_latest = Some(n);
        self
    }
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
