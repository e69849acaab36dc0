//! The crate's error type.

/// A fixture or qualification failure.
#[derive(Debug, thiserror::Error)]
pub enum QualifyError {
    /// Core API failure.
    #[error(transparent)]
    Core(#[from] hr_core::CoreError),
    /// Publication or restore failure.
    #[error(transparent)]
    Snapshot(#[from] hr_snapshot::SnapshotError),
    /// Seal verification failure.
    #[error(transparent)]
    Seal(#[from] hr_seal::SealError),
    /// Master call failure.
    #[error(transparent)]
    Master(#[from] hr_det::DetError),
    /// Config rendering failure.
    #[error(transparent)]
    Config(#[from] hr_config::Error),
    /// Proof failure.
    #[error(transparent)]
    Proof(#[from] hr_proof::ProofError),
    /// A filesystem operation failed.
    #[error(transparent)]
    Io(#[from] hr_files::IoError),
    /// Bad input (a plan, a flag): nothing was run or written; the message names the fix.
    #[error("{0}")]
    Refused(String),
    /// The qualification found a difference or an unexpected event.
    #[error("qualification failed: {0}")]
    Failed(String),
}
