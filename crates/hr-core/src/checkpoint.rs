//! Checkpoint storage as the Python client lays it out: `<base>/<uuid>/` holding the user's files
//! and `metadata.json` (indent 2), with `resources` mapping every relative path to its size
//! (folders as `"sub/": 0`).

use hr_files::IoResultExt;
use std::{
    collections::BTreeMap,
    path::{Path, PathBuf},
};

use serde_json::Value;

use crate::CoreError;

/// A checkpoint folder being written; report it to publish it.
#[derive(Debug)]
pub struct StoredCheckpoint {
    pub(crate) uuid: String,
    pub(crate) path: PathBuf,
}

impl StoredCheckpoint {
    /// The checkpoint's UUID.
    pub fn uuid(&self) -> &str {
        &self.uuid
    }

    /// The folder to write into.
    pub fn path(&self) -> &Path {
        &self.path
    }
}

/// The folder a trial keeps checkpoints in: its `checkpoint_storage` as a task container sees
/// it (`hr-config`'s one resolver).
pub(crate) fn storage_base(storage: &Value) -> Result<PathBuf, CoreError> {
    hr_config::CheckpointStorage::from_expconf(storage)
        .and_then(|s| s.folder(hr_config::StorageView::Container))
        .map_err(|e| CoreError::Storage(e.to_string()))
}

/// A fresh UUID4 from the OS's randomness (the `uuid` crate panics rather than mint a
/// predictable id when the OS has none).
pub(crate) fn uuid4() -> String {
    uuid::Uuid::new_v4().to_string()
}

/// Relative path -> size of everything under `dir` (folders as `"sub/": 0`).
pub(crate) fn resources(dir: &Path) -> Result<BTreeMap<String, i64>, CoreError> {
    let mut out = BTreeMap::new();
    let mut stack = vec![dir.to_owned()];
    while let Some(d) = stack.pop() {
        for entry in std::fs::read_dir(&d).at("read", &d)? {
            let entry = entry.at("read", &d)?;
            let path = entry.path();
            let rel = path
                .strip_prefix(dir)
                .unwrap_or(&path)
                .to_string_lossy()
                .into_owned();
            let meta = entry.metadata().at("stat", &path)?;
            if meta.is_dir() {
                out.insert(format!("{rel}/"), 0);
                stack.push(path);
            } else {
                out.insert(rel, i64::try_from(meta.len()).unwrap_or(i64::MAX));
            }
        }
    }
    Ok(out)
}

/// Writes `metadata.json` (indent 2), as the Python client does before listing resources.
pub(crate) fn write_metadata(dir: &Path, metadata: &Value) -> Result<(), CoreError> {
    let path = dir.join("metadata.json");
    let text = serde_json::to_string_pretty(metadata).expect("metadata serialises");
    std::fs::write(&path, text)
        .at("write", &path)
        .map_err(Into::into)
}

/// Copies a folder tree of regular files and folders; a symlink, FIFO, socket or device in it
/// is refused before it is read.
pub(crate) fn copy_tree(from: &Path, to: &Path) -> Result<(), CoreError> {
    std::fs::create_dir_all(to).at("create", to)?;
    for entry in std::fs::read_dir(from).at("read", from)? {
        let entry = entry.at("read", from)?;
        let target = to.join(entry.file_name());
        // Never follow a link (the copy would hold what a verifier of the source refuses) nor
        // open a FIFO or device (it could block forever before anything is verified).
        let kind = entry.file_type().at("stat", entry.path())?;
        if kind.is_dir() {
            copy_tree(&entry.path(), &target)?;
        } else if kind.is_file() {
            std::fs::copy(entry.path(), &target).at("copy", &target)?;
        } else {
            return Err(CoreError::NotACheckpoint {
                path: entry.path(),
                why: if kind.is_symlink() {
                    "a symbolic link; checkpoints hold only regular files and folders".to_owned()
                } else {
                    "not a regular file or folder (a FIFO, socket or device)".to_owned()
                },
            });
        }
    }
    Ok(())
}
