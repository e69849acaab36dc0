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
//!
//! # In detail
//!
//! `IoError` (operation, path, cause) with `IoResultExt::at`, which every crate's error wraps
//! (`#[from]`) instead of its own copy; the durable writes, once (`durable.rs`: `append_line`, a
//! fsynced JSON-lines append that first cuts a torn last line, with `complete_lines` for readers;
//! `write_atomic`, temporary file, fsync, rename, folder fsync; `write_new`, the same but linked
//! into place so an existing file is never replaced; `fsync_dir`), used by the run's metrics,
//! evidence and allocations, the local Core records, receipts, the devmaster's state, the proofs
//! and PEFT adapter files; bounded reads of input files (`read.rs`: `open_regular` refuses a FIFO,
//! device or folder without blocking on it, `read_bounded` refuses a file above its bound before
//! reading it; plans, model and tokenizer configs, tokenizers and adapters are read through them);
//! `CappedLog` (`capped_log.rs`), a child's pipe copied by a thread into a log that stops growing
//! at its bound (a run's `service.log`: 64 MiB) while the pipe is still read to its end; `RunDir`,
//! the layout of a training run's folder spelled once (`plan.json`, `evidence.jsonl`,
//! `metrics.jsonl`, `allocations.jsonl`, `report.md`, `adapter/`, `local-records.jsonl`,
//! `service.log`, `core/` with its checkpoints and `checkpoints.jsonl`; a Determined trial's run
//! folder `<storage>/hr-run-<experiment>-<trial>` through `RunDir::managed` and `managed_ids`), and
//! `local_core`, the names inside a local Core context's folder that `hr-core` writes.

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
