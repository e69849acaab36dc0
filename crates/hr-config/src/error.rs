//! The crate's error type.

use std::path::PathBuf;

/// Everything that can go wrong in this crate.
#[derive(Debug, thiserror::Error)]
pub enum Error {
    /// A YAML document could not be parsed.
    #[error("{source_name}: not valid YAML at line {line}, column {column}: {message}")]
    Yaml {
        /// The file name (or `<input>`).
        source_name: String,
        /// 1-based line of the error.
        line: usize,
        /// 1-based column of the error.
        column: usize,
        /// The parser's message.
        message: String,
    },
    /// Reading a file failed.
    #[error("cannot read {path}: {source}")]
    Read {
        /// The file.
        path: PathBuf,
        /// The cause.
        source: std::io::Error,
    },
    /// A config value could not be rendered or decoded.
    #[error("config encoding: {0}")]
    Encoding(String),
    /// A schema `$id` is not in the schema set.
    #[error("unknown schema {0}")]
    UnknownSchema(String),
    /// A schema document is malformed.
    #[error("invalid schema: {0}")]
    InvalidSchema(String),
    /// A bounded command was given bad input.
    #[error("{field}: {message}")]
    InvalidInput {
        /// The input field (flag) at fault.
        field: &'static str,
        /// What is wrong and how to fix it.
        message: String,
    },
}
