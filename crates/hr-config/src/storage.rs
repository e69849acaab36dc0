//! Where a `checkpoint_storage` keeps its checkpoint folders, as a trial's container or the host
//! sees it: the one resolver the Core client, the devmaster and `evaluate` share. It follows
//! Determined's harness (`_full_storage_path`): `storage_path`, relative or absolute, is joined to
//! `host_path` and normalised, must stay under it (the expconf rule "storage_path must either be
//! a relative directory or a subdirectory of host_path"), and is then placed under the mount
//! (`/determined_shared_fs` in a container) or `host_path` (on the host).

use std::path::{Component, Path, PathBuf};

use serde_json::Value;

use crate::{CheckpointStorage, Error, StorageKind};

/// Where Determined mounts a `shared_fs` storage in task containers.
pub const SHARED_FS_MOUNT: &str = "/determined_shared_fs";

/// Who looks at the storage.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum StorageView {
    /// A process in a task container, where `shared_fs` is mounted at [`SHARED_FS_MOUNT`].
    Container,
    /// A process on the host (the devmaster's trials, a login node), where it is `host_path`.
    Host,
}

fn invalid(field: &'static str, message: String) -> Error {
    Error::InvalidInput { field, message }
}

impl CheckpointStorage {
    /// The fields that say where checkpoints live (`type`, `host_path`, `storage_path`,
    /// `container_path`) of an expconf `checkpoint_storage` as a master returns it; other fields
    /// (retention, `propagation`, a cloud store's settings) are not read.
    pub fn from_expconf(storage: &Value) -> Result<Self, Error> {
        let text = |key: &str| storage.get(key).and_then(Value::as_str).map(str::to_owned);
        let kind = match storage.get("type").and_then(Value::as_str) {
            Some("shared_fs") => StorageKind::SharedFs,
            Some("directory") => StorageKind::Directory,
            Some(other) => {
                return Err(invalid(
                    "checkpoint_storage.type",
                    format!(
                        "`{other}` keeps no folder on this machine: use shared_fs or directory"
                    ),
                ));
            }
            None => {
                return Err(invalid(
                    "checkpoint_storage.type",
                    "missing: read the config the master returns (it merges its default storage in)"
                        .to_owned(),
                ));
            }
        };
        Ok(Self {
            kind: Some(kind),
            host_path: text("host_path"),
            storage_path: text("storage_path"),
            container_path: text("container_path"),
            ..Self::default()
        })
    }

    /// The folder checkpoints are kept in, as `view` sees it: `directory` storage's
    /// `container_path` unchanged; `shared_fs` storage's `storage_path` under the mount or
    /// `host_path`. A `storage_path` that leaves `host_path` is refused naming the field.
    pub fn folder(&self, view: StorageView) -> Result<PathBuf, Error> {
        match self.kind {
            Some(StorageKind::Directory) => self
                .container_path
                .as_deref()
                .map(PathBuf::from)
                .ok_or_else(|| {
                    invalid(
                        "checkpoint_storage.container_path",
                        "directory storage needs one".to_owned(),
                    )
                }),
            Some(StorageKind::SharedFs) => {
                let host = self
                    .host_path
                    .as_deref()
                    .map(Path::new)
                    .filter(|h| h.is_absolute())
                    .ok_or_else(|| {
                        invalid(
                            "checkpoint_storage.host_path",
                            "shared_fs storage needs an absolute host_path".to_owned(),
                        )
                    })?;
                let host = normalised(host);
                let under = match &self.storage_path {
                    None => PathBuf::new(),
                    Some(sub) => normalised(&host.join(sub))
                        .strip_prefix(&host)
                        .map(Path::to_owned)
                        .map_err(|_| {
                            invalid(
                                "checkpoint_storage.storage_path",
                                format!(
                                    "`{sub}` must be a relative folder or a folder under host_path \
                                     `{}`",
                                    host.display()
                                ),
                            )
                        })?,
                };
                Ok(match view {
                    StorageView::Container => Path::new(SHARED_FS_MOUNT).join(under),
                    StorageView::Host => host.join(under),
                })
            }
            None => Err(invalid(
                "checkpoint_storage.type",
                "missing: use shared_fs or directory".to_owned(),
            )),
        }
    }
}

/// `path` with `.` dropped and `..` taking off the component before it, without touching the
/// filesystem (Python's `os.path.normpath`; `..` at the root stays at the root).
fn normalised(path: &Path) -> PathBuf {
    let mut out = PathBuf::new();
    for part in path.components() {
        match part {
            Component::CurDir => {}
            Component::ParentDir => {
                if !out.pop() {
                    out.push(part);
                }
            }
            other => out.push(other),
        }
    }
    out
}

#[cfg(test)]
mod tests {
    use serde_json::json;

    use super::*;

    fn folder(storage: &Value, view: StorageView) -> Result<PathBuf, String> {
        CheckpointStorage::from_expconf(storage)
            .and_then(|s| s.folder(view))
            .map_err(|e| e.to_string())
    }

    #[test]
    fn shared_fs_lies_under_the_mount_in_a_container_and_under_host_path_on_the_host() {
        use StorageView::{Container, Host};
        let shared = |sub: Option<&str>| {
            let mut s = json!({"type": "shared_fs", "host_path": "/mnt/share",
                "propagation": "rprivate", "save_trial_latest": 1});
            if let Some(sub) = sub {
                s["storage_path"] = json!(sub);
            }
            s
        };
        for (sub, host, container) in [
            (None, "/mnt/share", "/determined_shared_fs"),
            (
                Some("ckpts"),
                "/mnt/share/ckpts",
                "/determined_shared_fs/ckpts",
            ),
            (
                Some("/mnt/share/a/b"),
                "/mnt/share/a/b",
                "/determined_shared_fs/a/b",
            ),
            (
                Some("a/./b/../c"),
                "/mnt/share/a/c",
                "/determined_shared_fs/a/c",
            ),
        ] {
            assert_eq!(folder(&shared(sub), Host), Ok(host.into()), "{sub:?}");
            assert_eq!(
                folder(&shared(sub), Container),
                Ok(container.into()),
                "{sub:?}"
            );
        }
        // Determined's expconf test cases of the rule: each leaves host_path.
        for outside in [
            "/elsewhere",
            "../storage_path",
            "anywhere/../../storage_path",
            "/mnt/share/anywhere/../../storage_path",
            "/mnt/shared",
        ] {
            for view in [Host, Container] {
                let err = folder(&shared(Some(outside)), view).expect_err(outside);
                assert!(
                    err.starts_with("checkpoint_storage.storage_path: ")
                        && err.contains("under host_path `/mnt/share`"),
                    "{outside}: {err}"
                );
            }
        }
    }

    #[test]
    fn directory_is_used_unchanged_and_other_storage_is_refused_naming_the_field() {
        let directory = json!({"type": "directory", "container_path": "/ckpt"});
        assert_eq!(
            folder(&directory, StorageView::Container),
            Ok("/ckpt".into())
        );
        assert_eq!(folder(&directory, StorageView::Host), Ok("/ckpt".into()));
        for (storage, field) in [
            (
                json!({"type": "s3", "bucket": "b"}),
                "checkpoint_storage.type",
            ),
            (json!({"host_path": "/mnt"}), "checkpoint_storage.type"),
            (
                json!({"type": "directory"}),
                "checkpoint_storage.container_path",
            ),
            (
                json!({"type": "shared_fs", "host_path": "mnt"}),
                "checkpoint_storage.host_path",
            ),
        ] {
            let err = folder(&storage, StorageView::Host).expect_err("refused");
            assert!(err.starts_with(field), "{storage}: {err}");
        }
    }
}
