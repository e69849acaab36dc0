//! Durable JSON-lines appends for the local Core context's records (metrics, checkpoint
//! reports, searcher events): a torn last line left by a crash is cut off before the next line.

use std::path::Path;

use serde_json::Value;

use crate::CoreError;

/// Appends one JSON line to `run_dir/file`, durably ([`hr_files::append_line`]).
pub(crate) fn append_local(run_dir: &Path, file: &str, value: &Value) -> Result<(), CoreError> {
    hr_files::append_line(&run_dir.join(file), &value.to_string()).map_err(Into::into)
}
