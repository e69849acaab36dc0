//! What Determined 0.35 hands a trial process, as types: the `DET_*` environment variable names
//! ([`mod@env`]) and the info files in `/run/determined/info` ([`ClusterInfoFile`],
//! [`TrialInfoFile`], and the rendezvous and resources files the Python client also reads). The
//! devmaster writes them for its trials; `hr-core` reads them in a trial.

use serde::{Deserialize, Serialize};
use serde_json::Value;

/// The info folder of a trial container.
pub const INFO_DIR: &str = "/run/determined/info";
/// `cluster.json` in the info folder.
pub const CLUSTER_FILE: &str = "cluster.json";
/// `trial.json` in the info folder.
pub const TRIAL_FILE: &str = "trial.json";
/// `rendezvous.json` in the info folder.
pub const RENDEZVOUS_FILE: &str = "rendezvous.json";
/// `resources.json` in the info folder.
pub const RESOURCES_FILE: &str = "resources.json";

/// The `DET_*` environment of a trial (and ours: [`env::HR_INFO_DIR`]).
pub mod env {
    /// The master URL.
    pub const MASTER: &str = "DET_MASTER";
    /// The cluster id.
    pub const CLUSTER_ID: &str = "DET_CLUSTER_ID";
    /// The master id (the cluster id).
    pub const MASTER_ID: &str = "DET_MASTER_ID";
    /// The agent running the container.
    pub const AGENT_ID: &str = "DET_AGENT_ID";
    /// The slots given (a JSON list).
    pub const SLOT_IDS: &str = "DET_SLOT_IDS";
    /// The task id.
    pub const TASK_ID: &str = "DET_TASK_ID";
    /// The allocation id (`<task>.<run>`).
    pub const ALLOCATION_ID: &str = "DET_ALLOCATION_ID";
    /// The resources id.
    pub const RESOURCES_ID: &str = "DET_RESOURCES_ID";
    /// The container id.
    pub const CONTAINER_ID: &str = "DET_CONTAINER_ID";
    /// The allocation's session token.
    pub const SESSION_TOKEN: &str = "DET_SESSION_TOKEN";
    /// The user the task runs as.
    pub const USER: &str = "DET_USER";
    /// That user's token.
    pub const USER_TOKEN: &str = "DET_USER_TOKEN";
    /// A user's password (the `det` CLI's, for signing in without a token).
    pub const PASS: &str = "DET_PASS";
    /// `TRIAL`, `COMMAND`, ...
    pub const TASK_TYPE: &str = "DET_TASK_TYPE";
    /// What runs the resources.
    pub const RESOURCES_TYPE: &str = "DET_RESOURCES_TYPE";
    /// The experiment id.
    pub const EXPERIMENT_ID: &str = "DET_EXPERIMENT_ID";
    /// The trial id.
    pub const TRIAL_ID: &str = "DET_TRIAL_ID";
    /// This allocation's run id.
    pub const TRIAL_RUN_ID: &str = "DET_TRIAL_RUN_ID";
    /// The trial seed.
    pub const TRIAL_SEED: &str = "DET_TRIAL_SEED";
    /// The experiment config (JSON).
    pub const EXPERIMENT_CONFIG: &str = "DET_EXPERIMENT_CONFIG";
    /// The hyperparameters (JSON).
    pub const HPARAMS: &str = "DET_HPARAMS";
    /// Steps completed by the checkpoint to restore.
    pub const STEPS_COMPLETED: &str = "DET_STEPS_COMPLETED";
    /// The checkpoint to restore.
    pub const LATEST_CHECKPOINT: &str = "DET_LATEST_CHECKPOINT";
    /// The working folder.
    pub const WORKDIR: &str = "DET_WORKDIR";
    /// The run folder.
    pub const RUN_DIR: &str = "DET_RUN_DIR";
    /// Whether the master speaks TLS.
    pub const USE_TLS: &str = "DET_USE_TLS";
    /// Ours: the info folder when it is not [`super::INFO_DIR`] (trials of a local devmaster).
    pub const HR_INFO_DIR: &str = "HR_DET_INFO_DIR";
}

/// `cluster.json`: where the trial's master is and who the allocation is.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct ClusterInfoFile {
    /// The master URL.
    pub master_url: String,
    /// The cluster id.
    pub cluster_id: String,
    /// The agent running the container.
    pub agent_id: String,
    /// The slots given.
    #[serde(default)]
    pub slot_ids: Vec<i32>,
    /// The task id.
    pub task_id: String,
    /// The allocation id.
    pub allocation_id: String,
    /// The allocation's session token (the file is owner-only).
    pub session_token: String,
    /// `TRIAL`.
    pub task_type: String,
    /// The master's TLS certificate name, if any.
    #[serde(default)]
    pub master_cert_name: Option<String>,
    /// The master's TLS certificate file, if any.
    #[serde(default)]
    pub master_cert_file: Option<String>,
    /// The checkpoint to restore, if any.
    #[serde(default)]
    pub latest_checkpoint: Option<String>,
}

/// `trial.json`: which trial, with which config and from where.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct TrialInfoFile {
    /// The trial id.
    pub trial_id: i32,
    /// The experiment id.
    pub experiment_id: i32,
    /// The trial seed.
    pub trial_seed: u32,
    /// The hyperparameters.
    #[serde(default)]
    pub hparams: Value,
    /// The experiment config (with defaults).
    pub config: Value,
    /// Steps completed by the checkpoint to restore.
    pub steps_completed: i64,
    /// This allocation's run id.
    pub trial_run_id: i32,
    /// Debug mode.
    #[serde(default)]
    pub debug: bool,
    /// The network interface for multi-node training, if set.
    #[serde(default)]
    pub inter_node_network_interface: Option<String>,
}

/// `rendezvous.json`: the containers of the allocation (one here).
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct RendezvousInfoFile {
    /// Container addresses.
    pub container_addrs: Vec<String>,
    /// This container's rank.
    pub container_rank: i32,
    /// Slots per container.
    pub container_slot_counts: Vec<i32>,
}

/// `resources.json`: the GPUs given.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct ResourcesInfoFile {
    /// GPU UUIDs.
    pub gpu_uuids: Vec<String>,
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_files_read_as_determined_writes_them() -> Result<(), serde_json::Error> {
        // Fields as the master writes them; unknown ones are tolerated.
        let cluster: ClusterInfoFile = serde_json::from_str(
            r#"{"master_url": "http://m:8080", "cluster_id": "c", "agent_id": "a",
                "slot_ids": [0], "task_id": "t", "allocation_id": "t.1", "session_token": "s",
                "task_type": "TRIAL", "master_cert_name": null, "master_cert_file": null,
                "latest_checkpoint": "u", "new_field": 1}"#,
        )?;
        assert_eq!(cluster.latest_checkpoint.as_deref(), Some("u"));
        let trial: TrialInfoFile = serde_json::from_str(
            r#"{"trial_id": 3, "experiment_id": 2, "trial_seed": 7, "hparams": {},
                "config": {"a": 1}, "steps_completed": 4, "trial_run_id": 2, "debug": false,
                "inter_node_network_interface": null}"#,
        )?;
        assert_eq!((trial.trial_id, trial.steps_completed), (3, 4));
        assert!(serde_json::from_str::<TrialInfoFile>(r#"{"trial_id": "x"}"#).is_err());
        Ok(())
    }
}
