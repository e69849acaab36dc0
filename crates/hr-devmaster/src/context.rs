//! An experiment's model definition (the context directory `det experiment create CONFIG DIR`
//! uploads): checked at create, kept with the experiment under `context/<id>`, and copied into
//! each allocation's work folder, where the entrypoint runs, as the master unpacks it into a
//! trial's working directory.

use std::{
    io::Write,
    os::unix::fs::{OpenOptionsExt, PermissionsExt},
    path::{Component, Path, PathBuf},
};

use base64::Engine;
use hr_det::wire::File;

use crate::error::ApiError;

/// Where experiments' model definitions live inside the state folder.
const CONTEXT_DIR: &str = "context";
/// Tar type flags `det` sends: a regular file (`'0'`, or NUL in old archives) and a folder.
const REGULAR: [i32; 2] = [b'0' as i32, 0];
const FOLDER: i32 = b'5' as i32;
/// The largest request the master accepts (`det`'s `MAX_HTTP_REQUEST_SIZE`); a context near
/// `det`'s own limit fits in it.
pub(crate) const MAX_REQUEST_BYTES: usize = 128 * 1024 * 1024;

/// The folder experiment `id`'s model definition is kept in.
fn kept(state_dir: &Path, id: i32) -> PathBuf {
    state_dir.join(CONTEXT_DIR).join(id.to_string())
}

/// Checks `files` (relative paths that stay inside the folder, regular files and folders only,
/// base64 content) and writes them, durably, into a fresh folder under the state folder; returns
/// it for [`keep`]. A bad entry is refused naming its index, field and path.
pub(crate) fn stage(state_dir: &Path, files: &[File]) -> Result<PathBuf, ApiError> {
    let mut checked = Vec::with_capacity(files.len());
    for (i, f) in files.iter().enumerate() {
        let field = |name: &str| format!("modelDefinition[{i}].{name} ({:?})", f.path);
        let relative = Path::new(&f.path);
        let inside = !f.path.is_empty()
            && relative
                .components()
                .all(|c| matches!(c, Component::Normal(_) | Component::CurDir));
        if !inside {
            return Err(ApiError::InvalidArgument(format!(
                "{}: a model definition path must be relative and stay inside the folder",
                field("path")
            )));
        }
        let content = if REGULAR.contains(&f.kind) {
            Some(
                base64::engine::general_purpose::STANDARD
                    .decode(&f.content)
                    .map_err(|e| {
                        ApiError::InvalidArgument(format!("{}: not base64: {e}", field("content")))
                    })?,
            )
        } else if f.kind == FOLDER {
            None
        } else {
            return Err(ApiError::InvalidArgument(format!(
                "{}: type {} is neither a regular file (48) nor a folder (53)",
                field("type"),
                f.kind
            )));
        };
        checked.push((relative, content, f.mode));
    }
    refuse_conflicts(&checked)?;
    let root = state_dir.join(CONTEXT_DIR);
    let staged = root.join(format!(".incoming-{}", crate::info::random_hex(8)));
    write_tree(&staged, &checked).map_err(|e| {
        let _ = std::fs::remove_dir_all(&staged);
        ApiError::Internal(format!("cannot keep the model definition: {e}"))
    })?;
    Ok(staged)
}

/// Refuses entries that cannot all be written (so a bad request is a 400, not a failed write):
/// a path that names the folder itself, one listed twice, or one under a path listed as a file.
fn refuse_conflicts(files: &[(&Path, Option<Vec<u8>>, i32)]) -> Result<(), ApiError> {
    let normal = |p: &Path| -> PathBuf {
        p.components()
            .filter(|c| matches!(c, Component::Normal(_)))
            .collect()
    };
    let mut seen = std::collections::BTreeMap::new();
    for (i, (path, content, _)) in files.iter().enumerate() {
        let name = normal(path);
        let refuse = |why: &str| {
            ApiError::InvalidArgument(format!("modelDefinition[{i}].path ({path:?}): {why}"))
        };
        if name.as_os_str().is_empty() {
            return Err(refuse("names the folder itself"));
        }
        if seen.insert(name, content.is_some()).is_some() {
            return Err(refuse("is listed twice"));
        }
    }
    for name in seen.keys() {
        if let Some(file) = name
            .ancestors()
            .skip(1)
            .find(|a| seen.get(*a) == Some(&true))
        {
            return Err(ApiError::InvalidArgument(format!(
                "modelDefinition: {name:?} lies under {file:?}, which is listed as a file"
            )));
        }
    }
    Ok(())
}

fn write_tree(dir: &Path, files: &[(&Path, Option<Vec<u8>>, i32)]) -> std::io::Result<()> {
    std::fs::create_dir_all(dir)?;
    for (relative, content, mode) in files {
        let path = dir.join(relative);
        // Owner access is kept whatever the sender's bits say: the trial must read its files.
        let bits = u32::try_from(*mode).unwrap_or(0) & 0o777;
        match content {
            None => {
                std::fs::create_dir_all(&path)?;
                std::fs::set_permissions(&path, std::fs::Permissions::from_mode(bits | 0o700))?;
            }
            Some(bytes) => {
                if let Some(parent) = path.parent() {
                    std::fs::create_dir_all(parent)?;
                }
                let mut file = std::fs::OpenOptions::new()
                    .write(true)
                    .create(true)
                    .truncate(true)
                    .mode(bits | 0o600)
                    .open(&path)?;
                file.write_all(bytes)?;
                file.sync_all()?;
            }
        }
    }
    std::fs::File::open(dir)?.sync_all()
}

/// Keeps a staged model definition as experiment `id`'s (call with the state lock held, before
/// staging the state that lists the experiment). A folder already there is a leftover of a
/// devmaster that crashed before listing its experiment: it is replaced.
pub(crate) fn keep(state_dir: &Path, staged: &Path, id: i32) -> std::io::Result<()> {
    let target = kept(state_dir, id);
    if target.exists() {
        std::fs::remove_dir_all(&target)?;
    }
    std::fs::rename(staged, &target)?;
    std::fs::File::open(state_dir.join(CONTEXT_DIR))?.sync_all()
}

/// Copies experiment `id`'s model definition, if it has one, into `work_dir`.
pub(crate) fn unpack(state_dir: &Path, id: i32, work_dir: &Path) -> std::io::Result<()> {
    let from = kept(state_dir, id);
    if from.is_dir() {
        copy_tree(&from, work_dir)?;
    }
    Ok(())
}

fn copy_tree(from: &Path, to: &Path) -> std::io::Result<()> {
    std::fs::create_dir_all(to)?;
    for entry in std::fs::read_dir(from)? {
        let entry = entry?;
        let target = to.join(entry.file_name());
        if entry.file_type()?.is_dir() {
            copy_tree(&entry.path(), &target)?;
            std::fs::set_permissions(&target, entry.metadata()?.permissions())?;
        } else {
            std::fs::copy(entry.path(), &target)?;
        }
    }
    Ok(())
}

/// Removes experiment `id`'s model definition (its experiment was deleted).
pub(crate) fn remove(state_dir: &Path, id: i32) {
    let _ = std::fs::remove_dir_all(kept(state_dir, id));
}

#[cfg(test)]
mod tests {
    use super::*;

    fn file(path: &str, kind: u8, content: &str) -> File {
        File {
            path: path.to_owned(),
            kind: i32::from(kind),
            content: base64::engine::general_purpose::STANDARD.encode(content),
            mode: 0o644,
            mtime: 0,
            uid: 0,
            gid: 0,
        }
    }

    #[test]
    fn a_context_is_kept_and_unpacked_into_the_work_folder() {
        let tmp = tempfile::tempdir().expect("tmp");
        let files = [
            file("train.py", b'0', "print('hi')\n"),
            file("pkg", b'5', ""),
            file("pkg/util.py", b'0', "X = 1\n"),
        ];
        let staged = stage(tmp.path(), &files).expect("stage");
        keep(tmp.path(), &staged, 7).expect("keep");
        let work = tmp.path().join("work");
        unpack(tmp.path(), 7, &work).expect("unpack");
        assert_eq!(
            std::fs::read_to_string(work.join("train.py")).expect("file"),
            "print('hi')\n"
        );
        assert_eq!(
            std::fs::read_to_string(work.join("pkg/util.py")).expect("file"),
            "X = 1\n"
        );
        remove(tmp.path(), 7);
        assert!(!kept(tmp.path(), 7).exists());
    }

    #[test]
    fn paths_leaving_the_folder_and_other_types_are_refused_by_name() {
        let tmp = tempfile::tempdir().expect("tmp");
        for (bad, field) in [
            (file("../escape.py", b'0', "x"), "modelDefinition[0].path"),
            (file("/etc/x", b'0', "x"), "modelDefinition[0].path"),
            (file("", b'0', "x"), "modelDefinition[0].path"),
            (file("link", b'2', ""), "modelDefinition[0].type"),
            (
                File {
                    content: "not base64!".to_owned(),
                    ..file("a.py", b'0', "")
                },
                "modelDefinition[0].content",
            ),
        ] {
            let err = stage(tmp.path(), &[bad]).expect_err("refused").to_string();
            assert!(err.contains(field), "{err}");
        }
        // Nothing is left behind by a refusal.
        let left = std::fs::read_dir(tmp.path().join(CONTEXT_DIR))
            .map(|d| d.count())
            .unwrap_or(0);
        assert_eq!(left, 0);
    }
}
