//! The create-only commit: fsync of files and folders, `link` of the seal to its name inside the
//! snapshot's folder (refused when one is there), then an fsync of the folder and its parent so
//! the new name is durable.

use std::{io, path::Path};

use crate::SealError;

/// How a commit ended.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum CommitOutcome {
    /// This writer sealed the snapshot.
    Sealed,
    /// The identical snapshot (same manifest digest) was already sealed there: nothing changed.
    Unchanged,
}

/// The folder holding `path` (`.` for a bare relative name).
pub(crate) fn parent_dir(path: &Path) -> &Path {
    match path.parent() {
        Some(p) if !p.as_os_str().is_empty() => p,
        _ => Path::new("."),
    }
}

/// fsyncs a folder, making the names in it durable.
pub fn fsync_dir(dir: &Path) -> Result<(), SealError> {
    hr_files::fsync_dir(dir).map_err(Into::into)
}

/// Links `from` to `to` only if `to` does not exist. Returns `Ok(false)` when it exists.
pub(crate) fn link_noreplace(from: &Path, to: &Path) -> Result<bool, SealError> {
    match std::fs::hard_link(from, to) {
        Ok(()) => Ok(true),
        Err(e) if e.kind() == io::ErrorKind::AlreadyExists => Ok(false),
        Err(e) => Err(hr_files::IoError::new("link", to, e).into()),
    }
}
