//! The create-only commit: fsync of files and folders, `renameat2(RENAME_NOREPLACE)` of the
//! staging folder onto its final name (or `link` of the seal inside a folder written in place),
//! then an fsync of the parent so the new name is durable.

use std::{io, path::Path};

use rustix::fs::{CWD, RenameFlags, renameat_with};

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

/// Renames `from` to `to` only if `to` does not exist. Returns `Ok(false)` when it exists.
pub(crate) fn rename_noreplace(from: &Path, to: &Path) -> Result<bool, SealError> {
    match renameat_with(CWD, from, CWD, to, RenameFlags::NOREPLACE) {
        Ok(()) => Ok(true),
        Err(e) if e == rustix::io::Errno::EXIST || e == rustix::io::Errno::NOTEMPTY => Ok(false),
        // Filesystems without RENAME_NOREPLACE: refuse an existing target, then plain rename,
        // which still fails on a non-empty target folder.
        Err(e) if e == rustix::io::Errno::INVAL || e == rustix::io::Errno::NOSYS => {
            if to.exists() {
                return Ok(false);
            }
            match std::fs::rename(from, to) {
                Ok(()) => Ok(true),
                Err(e) if e.kind() == io::ErrorKind::DirectoryNotEmpty => Ok(false),
                Err(e) => Err(hr_files::IoError::new("rename", to, e).into()),
            }
        }
        Err(e) => Err(hr_files::IoError::new("rename", to, e.into()).into()),
    }
}

/// Links `from` to `to` only if `to` does not exist. Returns `Ok(false)` when it exists.
pub(crate) fn link_noreplace(from: &Path, to: &Path) -> Result<bool, SealError> {
    match std::fs::hard_link(from, to) {
        Ok(()) => Ok(true),
        Err(e) if e.kind() == io::ErrorKind::AlreadyExists => Ok(false),
        Err(e) => Err(hr_files::IoError::new("link", to, e).into()),
    }
}
