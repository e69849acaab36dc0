//! The crate's error type.

use std::path::PathBuf;

/// Why a plan was rejected.
#[derive(Debug, thiserror::Error)]
pub enum PlanError {
    /// The plan file could not be read.
    #[error("{path}: {source}")]
    Io {
        /// The file.
        path: PathBuf,
        /// The cause.
        source: std::io::Error,
    },
    /// A field is unknown, missing, mistyped or out of range.
    #[error("{path}: `{field}`: {message}")]
    Field {
        /// The plan file.
        path: PathBuf,
        /// The field's path, e.g. `grpo.beta`.
        field: String,
        /// What is wrong and what is accepted.
        message: String,
    },
}
