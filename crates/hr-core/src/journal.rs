//! Durable JSON-lines appends for the local Core context's records (metrics, checkpoint
//! reports, searcher events): a torn last line left by a crash is cut off before the next line.

use std::path::Path;

use hr_files::IoResultExt;
use serde_json::Value;

use crate::CoreError;

/// Appends one JSON line to `run_dir/file`, durably.
pub(crate) fn append_local(run_dir: &Path, file: &str, value: &Value) -> Result<(), CoreError> {
    use std::io::Write;
    let path = run_dir.join(file);
    // A torn last line (a crash mid-append) is cut off first, so the new line starts clean.
    if let Ok(text) = std::fs::read(&path)
        && !text.is_empty()
        && !text.ends_with(b"\n")
    {
        let keep = text.iter().rposition(|b| *b == b'\n').map_or(0, |i| i + 1);
        let f = std::fs::OpenOptions::new()
            .write(true)
            .open(&path)
            .at("open", &path)?;
        f.set_len(keep as u64)
            .and_then(|()| f.sync_all())
            .at("truncate", &path)?;
    }
    let mut f = std::fs::OpenOptions::new()
        .create(true)
        .append(true)
        .open(&path)
        .at("open", &path)?;
    writeln!(f, "{value}")
        .and_then(|()| f.sync_all())
        .at("write", &path)
        .map_err(Into::into)
}
