//! The crate's error type.

/// A publication or restore failure.
#[derive(Debug, thiserror::Error)]
pub enum SnapshotError {
    /// Sealing or verification failed.
    #[error(transparent)]
    Seal(#[from] hr_seal::SealError),
    /// A Core call failed.
    #[error("core: {0}")]
    Core(Box<dyn std::error::Error + Send + Sync>),
    /// The step does not increase; refused before any checkpoint UUID was created.
    #[error("step {step} does not increase on the last published step {last}; nothing was created")]
    StepNotIncreasing {
        /// The refused step.
        step: u64,
        /// The last published step.
        last: u64,
    },
    /// The scheduler selected another checkpoint than the durable preemption receipt names.
    #[error(
        "the scheduler selected checkpoint {selected} but the preemption receipt names {receipt}"
    )]
    ReceiptMismatch {
        /// UUID in the receipt.
        receipt: String,
        /// UUID the scheduler selected.
        selected: String,
    },
    /// The selected checkpoint is the receipt's UUID but not what the receipt recorded (another
    /// manifest, or written by another allocation): a stale or substituted checkpoint.
    #[error(
        "checkpoint {uuid} differs from the preemption receipt: {field} is {actual}, the receipt says {expected}"
    )]
    ReceiptContentMismatch {
        /// The checkpoint.
        uuid: String,
        /// `manifest_sha256` or `writer`.
        field: &'static str,
        /// What the receipt recorded.
        expected: String,
        /// What the checkpoint holds.
        actual: String,
    },
    /// A caller hook (cleanup, service shutdown, payload writing) failed.
    #[error("{stage}: {message}")]
    Hook {
        /// Which hook.
        stage: &'static str,
        /// Its error.
        message: String,
    },
    /// A filesystem operation failed.
    #[error(transparent)]
    Io(#[from] hr_files::IoError),
}
