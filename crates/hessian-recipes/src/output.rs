//! Output folders are fresh: a folder that has content is refused, never reused.

use std::{fmt, path::Path};

use anyhow::Context;

/// Bad input or a refused output folder; the binary exits 2 and touches nothing.
#[derive(Debug)]
pub struct Refused(pub String);

impl fmt::Display for Refused {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(&self.0)
    }
}

impl std::error::Error for Refused {}

/// A snapshot or checkpoint that failed verification; the binary exits 3.
#[derive(Debug)]
pub(crate) struct Invalid(pub(crate) String);

impl fmt::Display for Invalid {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(&self.0)
    }
}

impl std::error::Error for Invalid {}

/// Whether `path` is relative, non-empty and has no `..` or `.` parts (a folder inside the
/// checkout, the same on every machine that has it).
pub(crate) fn plain_relative(path: &Path) -> bool {
    path.is_relative()
        && path.components().next().is_some()
        && path
            .components()
            .all(|c| matches!(c, std::path::Component::Normal(_)))
}

/// Fails with [`Refused`] when `path` exists and is not an empty folder.
pub(crate) fn ensure_fresh(path: &Path) -> anyhow::Result<()> {
    match std::fs::read_dir(path) {
        Ok(mut entries) => {
            if entries.next().is_some() {
                return Err(Refused(format!(
                    "output folder {} already has content; choose a new folder (earlier results \
                     are never overwritten)",
                    path.display()
                ))
                .into());
            }
            Ok(())
        }
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => Ok(()),
        Err(_) if path.exists() => Err(Refused(format!(
            "output path {} exists and is not a folder; choose a new folder",
            path.display()
        ))
        .into()),
        Err(e) => Err(e).with_context(|| format!("cannot inspect {}", path.display())),
    }
}

/// Removes what a failed invocation wrote into the fresh output folder `path`: the folder itself
/// when the invocation `made` it, else only what it holds (an empty folder the user made stays).
pub(crate) fn clear_output(path: &Path, made: bool) {
    if made {
        let _ = std::fs::remove_dir_all(path);
        return;
    }
    for entry in std::fs::read_dir(path).into_iter().flatten().flatten() {
        let _ = if entry.file_type().is_ok_and(|t| t.is_dir()) {
            std::fs::remove_dir_all(entry.path())
        } else {
            std::fs::remove_file(entry.path())
        };
    }
}

/// Creates a fresh output folder (refusing one with content).
pub(crate) fn create_fresh(path: &Path) -> anyhow::Result<()> {
    ensure_fresh(path)?;
    std::fs::create_dir_all(path).with_context(|| format!("cannot create {}", path.display()))
}

/// Bad input exits 2, a refused checkpoint 3, anything else 1.
pub(crate) fn exit_error(e: hr_train::TrainError) -> anyhow::Error {
    match e {
        hr_train::TrainError::Refused(m) => Refused(m).into(),
        e @ (hr_train::TrainError::Restore(_)
        | hr_train::TrainError::RestoreRefused(_)
        | hr_train::TrainError::Checkpoint { .. }
        | hr_train::TrainError::Leak { .. }) => Invalid(e.to_string()).into(),
        other => other.into(),
    }
}
