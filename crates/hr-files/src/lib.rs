//! Files the workspace shares: the one I/O error, [`IoError`], which names what was being done
//! and on which path (`write /runs/a/plan.json: No space left on device`), with
//! [`IoResultExt::at`] to attach both to a `std::io::Result` (each crate's error wraps it,
//! `#[from] IoError`, instead of repeating the variant and its helper); the durable writes every
//! crate uses ([`append_line`] for JSON lines that survive a crash mid-line, [`write_atomic`],
//! [`write_new`], [`fsync_dir`]); bounded reads of input files that refuse a FIFO at once
//! ([`read_bounded`]); a child's output copied into a log that stops at a bound
//! ([`CappedLog`]); and [`RunDir`], the layout of a training run's folder, spelled once.
//!
//! Not here: file formats (plans, evidence lines, manifests); those belong to the crates that
//! own them.

mod capped_log;
mod durable;
mod read;
mod run_dir;

use std::path::PathBuf;

pub use capped_log::{CappedLog, MAX_SERVICE_LOG_BYTES};
pub use durable::{append_line, complete_lines, cut_torn_tail, fsync_dir, write_atomic, write_new};
pub use read::{MAX_CONFIG_BYTES, open_regular, read_bounded, read_to_string_bounded};
pub use run_dir::{RunDir, local_core};

/// A filesystem operation failed.
#[derive(Debug, thiserror::Error)]
#[error("{op} {path}: {source}")]
pub struct IoError {
    /// What was being done (`read`, `create`, `rename`, ...).
    pub op: &'static str,
    /// On which path.
    pub path: PathBuf,
    /// The cause.
    pub source: std::io::Error,
}

impl IoError {
    /// The error of `op` on `path`.
    pub fn new(op: &'static str, path: impl Into<PathBuf>, source: std::io::Error) -> Self {
        Self {
            op,
            path: path.into(),
            source,
        }
    }
}

/// Attaches the operation and path to an I/O result.
pub trait IoResultExt<T> {
    /// `Err(e)` becomes [`IoError`] `{op, path, source: e}`.
    fn at(self, op: &'static str, path: impl Into<PathBuf>) -> Result<T, IoError>;
}

impl<T> IoResultExt<T> for std::io::Result<T> {
    fn at(self, op: &'static str, path: impl Into<PathBuf>) -> Result<T, IoError> {
        self.map_err(|source| IoError::new(op, path, source))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_message_names_the_operation_and_the_path() {
        let err = std::fs::read("/nonexistent/hr-files")
            .at("read", "/nonexistent/hr-files")
            .expect_err("absent");
        assert_eq!(err.op, "read");
        assert!(
            err.to_string()
                .starts_with("read /nonexistent/hr-files: No such file"),
            "{err}"
        );
    }
}
