//! The crate's error type.

/// Why a training run could not go on.
#[derive(Debug, thiserror::Error)]
pub enum TrainError {
    /// Bad input (plan, flags, searcher settings): nothing was trained or published.
    #[error("{0}")]
    Refused(String),
    /// The checkpoint selected for restore was refused by the snapshot checks (seal, source,
    /// plan, run identity, receipt); nothing was adopted.
    #[error("restore refused: {0}")]
    RestoreRefused(hr_snapshot::SnapshotError),
    /// The verified checkpoint's payload does not fit this run (trainer state, step, evidence);
    /// nothing was adopted.
    #[error("restore refused: {0}")]
    Restore(String),
    /// A checkpoint an evaluation must adopt is missing or does not verify; nothing was
    /// assessed.
    #[error("the checkpoint of step {step} cannot be adopted: {reason}")]
    Checkpoint {
        /// The plan's step.
        step: u64,
        /// Why.
        reason: String,
    },
    /// Two task sets that must be disjoint (train, dev, held-out) share a question.
    #[error("the {first} and {second} tasks share the question {question:?}: the splits leak")]
    Leak {
        /// One set.
        first: String,
        /// The other.
        second: String,
        /// The shared question.
        question: String,
    },
    /// The ranks of a data-parallel run could not meet or exchange, or drifted apart.
    #[error("{0}")]
    Ranks(String),
    /// Publication or a Core call failed.
    #[error(transparent)]
    Snapshot(#[from] hr_snapshot::SnapshotError),
    /// The Core API failed.
    #[error(transparent)]
    Core(#[from] hr_core::CoreError),
    /// GRPO failed.
    #[error(transparent)]
    Grpo(#[from] hr_grpo::GrpoError),
    /// The policy failed to load or run.
    #[error(transparent)]
    Policy(#[from] hr_policy::PolicyError),
    /// The environment or its service failed.
    #[error(transparent)]
    Environment(#[from] hr_env::EnvError),
    /// A filesystem operation failed.
    #[error(transparent)]
    Io(#[from] hr_files::IoError),
}
