//! The crate's error type.

/// A GRPO input that cannot be used.
#[derive(Debug, thiserror::Error)]
pub enum GrpoError {
    /// A configuration value is out of range; names the field.
    #[error("`{field}`: {message}")]
    Config {
        /// The field.
        field: &'static str,
        /// What is wrong and the accepted range.
        message: String,
    },
    /// Inputs of mismatched sizes.
    #[error("{0}")]
    Shape(String),
    /// An environment failed (its message names the service).
    #[error("environment: {0}")]
    Environment(String),
    /// Native state is missing, inconsistent or unreadable.
    #[error("native state: {0}")]
    State(String),
    /// The ranks of a data-parallel step could not exchange their parts.
    #[error("exchange between ranks: {0}")]
    Exchange(String),
    /// The policy or tokenizer failed.
    #[error("policy: {0}")]
    Policy(String),
    /// A step produced a non-finite loss, gradient norm or adapter weight: the run cannot go on,
    /// and nothing of this step may be saved.
    #[error(
        "step {step} diverged ({what}); nothing of it is saved, the last checkpoint is from before it. \
         Lower `optimizer.learning_rate` (or `grpo.beta`) and resume or start again"
    )]
    Diverged {
        /// The step (1-based, as progress lines count).
        step: u64,
        /// What went non-finite.
        what: String,
    },
}
