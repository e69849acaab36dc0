//! The part of Determined's Core API that snapshot publication needs.

use std::path::PathBuf;

use serde_json::Value;

/// The checkpoint the scheduler selected for this trial (`DET_LATEST_CHECKPOINT`).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct SelectedCheckpoint {
    /// Its storage UUID.
    pub uuid: String,
    /// The `steps_completed` the master recorded for it.
    pub steps_completed: u64,
}

/// Checkpoint storage, reporting and preemption of one trial allocation.
pub trait CoreCheckpoints {
    /// The error of Core calls.
    type Error: std::error::Error + Send + Sync + 'static;

    /// The scheduler-selected checkpoint to restore from, if any.
    fn latest_checkpoint(&self) -> Option<SelectedCheckpoint>;

    /// The folder of an existing checkpoint UUID.
    fn checkpoint_dir(&self, uuid: &str) -> PathBuf;

    /// Creates a new checkpoint UUID and its (empty) folder, like `store_path`.
    fn new_checkpoint(&mut self) -> Result<(String, PathBuf), Self::Error>;

    /// Reports a completed checkpoint to the master.
    fn report_checkpoint(
        &mut self,
        uuid: &str,
        steps_completed: u64,
        metadata: Value,
    ) -> Result<(), Self::Error>;

    /// Reports training metrics at a step.
    fn report_metrics(&mut self, steps_completed: u64, metrics: Value) -> Result<(), Self::Error>;

    /// Acknowledges the master's preemption signal.
    fn acknowledge_preemption(&mut self) -> Result<(), Self::Error>;
}
