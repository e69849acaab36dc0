//! The one error type of the crate.

use std::path::PathBuf;

/// What went wrong loading, saving or running a policy.
#[derive(Debug, thiserror::Error)]
pub enum PolicyError {
    /// A file could not be read or written.
    #[error("{path}: {source}")]
    Io {
        /// The file.
        path: PathBuf,
        /// The cause.
        source: std::io::Error,
    },
    /// `config.json` (or `adapter_config.json`) is not what a supported model needs.
    #[error("{path}: field `{field}`: {message}")]
    Config {
        /// The file.
        path: PathBuf,
        /// The offending field.
        field: String,
        /// What is wrong and how to fix it.
        message: String,
    },
    /// A weights file lacks a tensor the model needs, or holds one of the wrong shape or dtype.
    #[error("{path}: tensor `{tensor}`: {message}")]
    Tensor {
        /// The weights file (or folder for sharded weights).
        path: PathBuf,
        /// The tensor's name as stored.
        tensor: String,
        /// What is wrong.
        message: String,
    },
    /// A safetensors file is malformed.
    #[error("{path}: not a valid safetensors file: {message}")]
    Safetensors {
        /// The file.
        path: PathBuf,
        /// The parser's complaint.
        message: String,
    },
    /// `tokenizer.json` could not be loaded or used.
    #[error("tokenizer {path}: {message}")]
    Tokenizer {
        /// The tokenizer file.
        path: PathBuf,
        /// The tokenizers crate's complaint.
        message: String,
    },
    /// The device cannot hold the base weights in this dtype (or it is not f32, f16 or bf16).
    #[error("this device cannot hold {dtype} weights; it can hold {}", .holds.join(", "))]
    Dtype {
        /// The dtype asked for (`f16`, `bf16`, ...).
        dtype: String,
        /// The dtypes of `f32`, `f16` and `bf16` the device can hold.
        holds: Vec<&'static str>,
    },
    /// A generation or scoring request is invalid.
    #[error("{0}")]
    Request(String),
}

impl PolicyError {
    pub(crate) fn io(path: impl Into<PathBuf>, source: std::io::Error) -> Self {
        Self::Io {
            path: path.into(),
            source,
        }
    }

    pub(crate) fn tensor(
        path: impl Into<PathBuf>,
        tensor: &str,
        message: impl Into<String>,
    ) -> Self {
        Self::Tensor {
            path: path.into(),
            tensor: tensor.to_owned(),
            message: message.into(),
        }
    }
}
