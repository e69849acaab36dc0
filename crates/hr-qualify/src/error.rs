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
    /// A file operation failed.
    #[error("{op} {path}: {source}")]
    Io {
        /// What.
        op: &'static str,
        /// Where.
        path: std::path::PathBuf,
        /// Why.
        source: std::io::Error,
    },
    /// The qualification found a difference or an unexpected event.
    #[error("qualification failed: {0}")]
    Failed(String),
}

impl QualifyError {
    pub(crate) fn io(
        op: &'static str,
        path: impl Into<std::path::PathBuf>,
    ) -> impl FnOnce(std::io::Error) -> Self {
        let path = path.into();
        move |source| Self::Io { op, path, source }
    }
}
