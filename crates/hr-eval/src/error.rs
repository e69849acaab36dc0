//! The crate's error type.

/// Everything that can go wrong while loading suites or answering.
#[derive(Debug, thiserror::Error)]
pub enum Error {
    /// A suite or fixture line is malformed.
    #[error("{file}:{line}: {message}")]
    Data {
        /// The data file.
        file: String,
        /// 1-based line number.
        line: usize,
        /// What is wrong.
        message: String,
    },
    /// The policy has no answer for a task.
    #[error(
        "the fixture policy has no scripted response for task {0}: add it to fixtures/fixture-policy.jsonl"
    )]
    NoResponse(String),
    /// A model policy failed to answer.
    #[error("the policy failed: {0}")]
    Policy(String),
}
