//! The crate's error type.

use std::path::PathBuf;

/// What went wrong reading or converting a GGUF file.
#[derive(Debug, thiserror::Error)]
pub enum GgufError {
    /// A file could not be read or written.
    #[error("{path}: {source}")]
    Io {
        /// The file.
        path: PathBuf,
        /// The cause.
        source: std::io::Error,
    },
    /// The bytes are not a well-formed GGUF file.
    #[error("malformed GGUF at byte {offset}: {message}")]
    Malformed {
        /// Where parsing stopped.
        offset: usize,
        /// What was wrong.
        message: String,
    },
    /// A metadata key the conversion needs is missing or has the wrong type.
    #[error("GGUF metadata `{key}`: {message}")]
    Metadata {
        /// The key.
        key: String,
        /// What is wrong.
        message: String,
    },
    /// A tensor cannot be converted.
    #[error("GGUF tensor `{tensor}`: {message}")]
    Tensor {
        /// The tensor's GGUF name.
        tensor: String,
        /// What is wrong.
        message: String,
    },
}
