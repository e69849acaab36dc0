//! A local snapshot store: `snapshots/<step:020>/` committed snapshots, `.staging/` for writes in
//! progress, `quarantine/` for snapshots that may not be adopted (never deleted), and `HEAD`, a
//! hint naming the latest committed step. Ordering is by manifest step, never by names or times.

use hr_files::IoResultExt;
use std::path::{Path, PathBuf};

use serde::{Deserialize, Serialize};

use crate::{
    CommitOutcome, Expectations, ParentRef, RunIdentity, SealError, SnapshotWriter, SourceBinding,
    StagedSnapshot, Verified,
    commit::{fsync_dir, parent_dir, rename_noreplace},
    verify,
};

/// The `HEAD` hint.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct Head {
    /// Step of the latest committed snapshot.
    pub step: u64,
    /// Its folder name under `snapshots/`.
    pub name: String,
    /// sha256 of its manifest.
    pub manifest_sha256: String,
}

/// What [`Store::resolve`] decided.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Adoption {
    /// The snapshot to restore from, if any.
    pub adopted: Option<Verified>,
    /// Snapshots moved to `quarantine/` (new paths).
    pub quarantined: Vec<PathBuf>,
}

/// A snapshot store rooted at a folder.
#[derive(Debug, Clone)]
pub struct Store {
    root: PathBuf,
}

fn write_atomic(path: &Path, bytes: &[u8]) -> Result<(), SealError> {
    let tmp = path.with_extension("tmp");
    std::fs::write(&tmp, bytes).at("write", &tmp)?;
    std::fs::File::open(&tmp)
        .and_then(|f| f.sync_all())
        .at("fsync", &tmp)?;
    std::fs::rename(&tmp, path).at("rename", path)?;
    fsync_dir(parent_dir(path))
}

impl Store {
    /// Opens (creating if needed) a store at `root`.
    pub fn open(root: &Path) -> Result<Self, SealError> {
        let snapshots = root.join("snapshots");
        std::fs::create_dir_all(&snapshots).at("create", &snapshots)?;
        Ok(Self {
            root: root.to_owned(),
        })
    }

    /// The store's folder.
    pub fn root(&self) -> &Path {
        &self.root
    }

    /// The committed folder of `step`.
    pub fn snapshot_dir(&self, step: u64) -> PathBuf {
        self.root.join("snapshots").join(format!("{step:020}"))
    }

    /// The `HEAD` hint, if any.
    pub fn head(&self) -> Result<Option<Head>, SealError> {
        let path = self.root.join("HEAD");
        match std::fs::read(&path) {
            Ok(bytes) => serde_json::from_slice(&bytes)
                .map(Some)
                .map_err(|e| SealError::MalformedManifest(format!("HEAD: {e}"))),
            Err(e) if e.kind() == std::io::ErrorKind::NotFound => Ok(None),
            Err(e) => Err(hr_files::IoError::new("read", &path, e).into()),
        }
    }

    /// Holds the store's lock (an advisory `flock` on `HEAD.lock`, released when the returned
    /// file is dropped or the process dies), so HEAD is read and moved by one writer at a time.
    fn lock(&self) -> Result<std::fs::File, SealError> {
        let path = self.root.join("HEAD.lock");
        let file = std::fs::OpenOptions::new()
            .create(true)
            .truncate(false)
            .write(true)
            .open(&path)
            .at("open", &path)?;
        file.lock().at("lock", &path)?;
        Ok(file)
    }

    fn write_head(&self, head: &Head) -> Result<(), SealError> {
        write_atomic(
            &self.root.join("HEAD"),
            &serde_json::to_vec_pretty(head).expect("head serialises"),
        )
    }

    /// A writer for `step`, chained to the head. Refused before anything is written when the
    /// step is not above the head: `DuplicateStep` at the head's step, `NonMonotonicStep` below.
    pub fn writer(
        &self,
        run: RunIdentity,
        step: u64,
        source: SourceBinding,
        config_sha256: String,
    ) -> Result<SnapshotWriter, SealError> {
        let head = self.head()?;
        if let Some(h) = &head {
            if step == h.step {
                return Err(SealError::DuplicateStep { step });
            }
            if step < h.step {
                return Err(SealError::NonMonotonicStep { step, head: h.step });
            }
        }
        let mut writer = SnapshotWriter::staged(&self.root, run, step, source, config_sha256);
        if let Some(h) = head {
            writer.parent(ParentRef {
                step: h.step,
                manifest_sha256: h.manifest_sha256,
                storage_id: Some(h.name),
            });
        }
        Ok(writer)
    }

    /// Commits a staged snapshot under its step and moves `HEAD` to it, unless another writer
    /// already moved it to a higher step (HEAD never moves backwards by a publish; the returned
    /// [`Head`] names this snapshot either way).
    pub fn publish(&self, staged: StagedSnapshot) -> Result<(CommitOutcome, Head), SealError> {
        let step = staged.manifest.step;
        let head = Head {
            step,
            name: format!("{step:020}"),
            manifest_sha256: staged.manifest_sha256.clone(),
        };
        let outcome = staged.commit(&self.snapshot_dir(step))?;
        let _lock = self.lock()?;
        if self.head()?.is_none_or(|h| h.step < step) {
            self.write_head(&head)?;
        }
        Ok((outcome, head))
    }

    /// Committed snapshot folders, highest step first.
    fn committed(&self) -> Result<Vec<(u64, PathBuf)>, SealError> {
        let dir = self.root.join("snapshots");
        let mut out = Vec::new();
        for entry in std::fs::read_dir(&dir).at("read", &dir)? {
            let entry = entry.at("read", &dir)?;
            if let Some(step) = entry
                .file_name()
                .to_str()
                .and_then(|n| n.parse::<u64>().ok())
            {
                out.push((step, entry.path()));
            }
        }
        out.sort_by_key(|(step, _)| std::cmp::Reverse(*step));
        Ok(out)
    }

    /// Moves a snapshot folder to `quarantine/` (never deletes it); returns the new path.
    pub fn quarantine(&self, dir: &Path) -> Result<PathBuf, SealError> {
        let qdir = self.root.join("quarantine");
        std::fs::create_dir_all(&qdir).at("create", &qdir)?;
        let name = dir
            .file_name()
            .map(|n| n.to_string_lossy().into_owned())
            .unwrap_or_default();
        for n in 0u32.. {
            let target = qdir.join(if n == 0 {
                name.clone()
            } else {
                format!("{name}.{n}")
            });
            if rename_noreplace(dir, &target)? {
                fsync_dir(&qdir)?;
                fsync_dir(parent_dir(dir))?;
                return Ok(target);
            }
        }
        unreachable!("u32 names exhausted")
    }

    /// An explicit rewind to `step`: every committed snapshot above it moves to `quarantine/`
    /// (none is deleted) and `HEAD` points at the verified snapshot of `step`.
    pub fn rewind(&self, step: u64, expect: &Expectations) -> Result<Vec<PathBuf>, SealError> {
        let _lock = self.lock()?;
        let target = verify(
            &self.snapshot_dir(step),
            &Expectations {
                step: Some(step),
                ..expect.clone()
            },
        )?;
        let mut moved = Vec::new();
        for (s, dir) in self.committed()? {
            if s > step {
                moved.push(self.quarantine(&dir)?);
            }
        }
        self.write_head(&Head {
            step,
            name: format!("{step:020}"),
            manifest_sha256: target.manifest_sha256,
        })?;
        Ok(moved)
    }

    /// Removes unsealed leftovers in `.staging/` (never published, so never adoptable).
    pub fn gc_staging(&self) -> Result<usize, SealError> {
        let dir = self.root.join(".staging");
        let Ok(entries) = std::fs::read_dir(&dir) else {
            return Ok(0);
        };
        let mut removed = 0;
        for entry in entries {
            let path = entry.at("read", &dir)?.path();
            std::fs::remove_dir_all(&path).at("remove", &path)?;
            removed += 1;
        }
        Ok(removed)
    }

    /// Chooses the snapshot to restore from. `master` is the manifest digest the scheduler
    /// points at (`None` off-cluster: chains must then reach a snapshot without parent). A
    /// snapshot above the base is adopted only if it verifies and its parent chain reaches the
    /// base; every other snapshot above the base is quarantined. `HEAD` is moved to the result.
    pub fn resolve(
        &self,
        master: Option<&str>,
        expect: &Expectations,
    ) -> Result<Adoption, SealError> {
        let _lock = self.lock()?;
        let expect = Expectations {
            step: None,
            ..expect.clone()
        };
        let mut verified: Vec<Verified> = Vec::new();
        let mut broken: Vec<(u64, PathBuf)> = Vec::new();
        for (step, dir) in self.committed()? {
            match verify(&dir, &expect) {
                Ok(v) => verified.push(v),
                Err(_) => broken.push((step, dir)),
            }
        }
        let base = match master {
            Some(digest) => Some(
                verified
                    .iter()
                    .find(|v| v.manifest_sha256 == digest)
                    .cloned()
                    .ok_or_else(|| SealError::CheckpointNotFound {
                        path: self.root.join(format!("<manifest {digest}>")),
                    })?,
            ),
            None => None,
        };
        let base_step = base.as_ref().map(|b| b.manifest.step);
        let reaches_base = |start: &Verified| {
            let mut current = start.clone();
            loop {
                if Some(&current.manifest_sha256) == base.as_ref().map(|b| &b.manifest_sha256) {
                    return true;
                }
                match &current.manifest.parent {
                    None => return base.is_none(),
                    Some(p) => match verified
                        .iter()
                        .find(|v| v.manifest_sha256 == p.manifest_sha256)
                    {
                        Some(next) => current = next.clone(),
                        None => return false,
                    },
                }
            }
        };
        let above = |step: u64| base_step.is_none_or(|b| step > b);
        let adopted = verified
            .iter()
            .filter(|v| above(v.manifest.step))
            .find(|v| reaches_base(v))
            .cloned()
            .or(base);
        let mut on_chain: Vec<String> = Vec::new();
        if let Some(a) = &adopted {
            let mut current = Some(a.clone());
            while let Some(c) = current {
                on_chain.push(c.manifest_sha256.clone());
                current = c.manifest.parent.as_ref().and_then(|p| {
                    verified
                        .iter()
                        .find(|v| v.manifest_sha256 == p.manifest_sha256)
                        .cloned()
                });
            }
        }
        let mut quarantined = Vec::new();
        for v in verified
            .iter()
            .filter(|v| above(v.manifest.step) && !on_chain.contains(&v.manifest_sha256))
        {
            quarantined.push(self.quarantine(&v.dir)?);
        }
        for (_, dir) in broken.into_iter().filter(|(s, _)| above(*s)) {
            quarantined.push(self.quarantine(&dir)?);
        }
        if let Some(a) = &adopted {
            let name = a
                .dir
                .file_name()
                .map(|n| n.to_string_lossy().into_owned())
                .unwrap_or_default();
            self.write_head(&Head {
                step: a.manifest.step,
                name,
                manifest_sha256: a.manifest_sha256.clone(),
            })?;
        }
        Ok(Adoption {
            adopted,
            quarantined,
        })
    }
}
