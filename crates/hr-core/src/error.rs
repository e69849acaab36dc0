//! The crate's error type.

use std::path::PathBuf;

/// A Core API failure.
#[derive(Debug, thiserror::Error)]
pub enum CoreError {
    /// The environment does not describe a trial.
    #[error("not running as a Determined trial: {0}")]
    Environment(String),
    /// A master call failed.
    #[error(transparent)]
    Master(#[from] hr_det::DetError),
    /// A checkpoint UUID has no folder in storage.
    #[error("checkpoint {uuid} not found at {path}")]
    CheckpointNotFound {
        /// The UUID.
        uuid: String,
        /// Where it was looked for.
        path: PathBuf,
    },
    /// A folder given as a checkpoint to continue from is not one.
    #[error("{path} is not a checkpoint to continue from: {why}")]
    NotACheckpoint {
        /// The folder.
        path: PathBuf,
        /// What is missing.
        why: String,
    },
    /// The trial's `checkpoint_storage` keeps no folder it can reach (the message names the
    /// field).
    #[error("the experiment's {0}")]
    Storage(String),
    /// A filesystem operation failed.
    #[error(transparent)]
    Io(#[from] hr_files::IoError),
}
