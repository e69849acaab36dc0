//! Writing a snapshot in its final folder: payload files are hashed while they are written and
//! fsynced, then the manifest, then the seal (as `SEAL.tmp`), and last the create-only commit,
//! which links the seal to its name. Each stage calls the writer's hook first, which is how the
//! fault tests stop a writer at that point.

use hr_files::IoResultExt;
use std::{
    collections::BTreeMap,
    fs::{File, OpenOptions},
    io::{Read, Write},
    path::{Path, PathBuf},
};

use sha2::{Digest, Sha256};

use crate::{
    CommitOutcome, Envelope, EvidencePrefix, FileEntry, KeyPair, MANIFEST_FILE, Manifest,
    ParentRef, RunIdentity, SCHEMA_VERSION, SEAL_FILE, SealError, SourceBinding,
    commit::{fsync_dir, link_noreplace, parent_dir},
    digest::sha256_hex,
    manifest::{PAYLOAD_DIR, validate_payload_path},
};

const SEAL_TMP: &str = "SEAL.tmp";

/// The points a save passes, in order; the hook runs at each before the work that follows it.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum Stage {
    /// Nothing written yet.
    BeforeStaging,
    /// Half of the first payload file written.
    MidPayload,
    /// All payload files and folders fsynced.
    AfterPayloadFsync,
    /// `MANIFEST.json` written and fsynced.
    AfterManifest,
    /// `SEAL.tmp` written and fsynced.
    AfterSealTmp,
    /// The seal linked under its final name, folders not yet fsynced.
    AfterCommitRename,
    /// Commit durable; the caller has not yet told the master.
    AfterCommit,
}

impl Stage {
    /// Every stage, in order.
    pub const ALL: [Stage; 7] = [
        Stage::BeforeStaging,
        Stage::MidPayload,
        Stage::AfterPayloadFsync,
        Stage::AfterManifest,
        Stage::AfterSealTmp,
        Stage::AfterCommitRename,
        Stage::AfterCommit,
    ];

    /// The stage's name (`before-staging`, ...).
    pub fn name(self) -> &'static str {
        match self {
            Stage::BeforeStaging => "before-staging",
            Stage::MidPayload => "mid-payload",
            Stage::AfterPayloadFsync => "after-payload-fsync",
            Stage::AfterManifest => "after-manifest",
            Stage::AfterSealTmp => "after-seal-tmp",
            Stage::AfterCommitRename => "after-commit-rename",
            Stage::AfterCommit => "after-commit",
        }
    }

    /// The stage with this name.
    pub fn from_name(name: &str) -> Option<Stage> {
        Stage::ALL.into_iter().find(|s| s.name() == name)
    }
}

type Hook = Box<dyn FnMut(Stage) + Send>;

/// Builds one snapshot.
pub struct SnapshotWriter {
    dir: PathBuf,
    created: bool,
    manifest: Manifest,
    hook: Hook,
}

fn write_synced(path: &Path, bytes: &[u8]) -> Result<(), SealError> {
    let mut file = OpenOptions::new()
        .write(true)
        .create_new(true)
        .open(path)
        .at("create", path)?;
    file.write_all(bytes).at("write", path)?;
    file.sync_all().at("fsync", path).map_err(Into::into)
}

impl SnapshotWriter {
    /// A writer that writes straight into `dir` (which may exist, holding at most Determined's
    /// `metadata.json`) and commits by linking the seal.
    pub fn in_place(
        dir: &Path,
        run: RunIdentity,
        step: u64,
        source: SourceBinding,
        config_sha256: String,
    ) -> Self {
        Self {
            dir: dir.to_owned(),
            created: false,
            manifest: Manifest {
                schema_version: SCHEMA_VERSION,
                hash_alg: "sha256".to_owned(),
                run,
                step,
                parent: None,
                source,
                config_sha256,
                files: Vec::new(),
                evidence: Vec::new(),
                tools: BTreeMap::new(),
            },
            hook: Box::new(|_| {}),
        }
    }

    /// Sets the hook called at each [`Stage`].
    pub fn with_hook(mut self, hook: impl FnMut(Stage) + Send + 'static) -> Self {
        self.hook = Box::new(hook);
        self
    }

    /// Links this snapshot to its parent.
    pub fn parent(&mut self, parent: ParentRef) -> &mut Self {
        self.manifest.parent = Some(parent);
        self
    }

    /// Records an evidence prefix.
    pub fn evidence(&mut self, prefix: EvidencePrefix) -> &mut Self {
        self.manifest.evidence.push(prefix);
        self
    }

    /// Records a tool version.
    pub fn tool(&mut self, name: &str, version: &str) -> &mut Self {
        self.manifest
            .tools
            .insert(name.to_owned(), version.to_owned());
        self
    }

    fn ensure_created(&mut self) -> Result<(), SealError> {
        if !self.created {
            (self.hook)(Stage::BeforeStaging);
            let payload = self.dir.join(PAYLOAD_DIR);
            std::fs::create_dir_all(&payload).at("create", &payload)?;
            self.created = true;
        }
        Ok(())
    }

    fn target(&mut self, path: &str) -> Result<PathBuf, SealError> {
        validate_payload_path(path)?;
        if self.manifest.files.iter().any(|f| f.path == path) {
            return Err(SealError::InvalidPath {
                path: path.to_owned(),
                reason: "added twice",
            });
        }
        self.ensure_created()?;
        let full = self.dir.join(path);
        if let Some(parent) = full.parent() {
            std::fs::create_dir_all(parent).at("create", parent)?;
        }
        Ok(full)
    }

    /// Adds a payload file from a reader, hashing while writing (constant memory).
    pub fn add_reader(
        &mut self,
        path: &str,
        role: &str,
        mut reader: impl Read,
    ) -> Result<(), SealError> {
        let full = self.target(path)?;
        let first = self.manifest.files.is_empty();
        let mut file = OpenOptions::new()
            .write(true)
            .create_new(true)
            .open(&full)
            .at("create", &full)?;
        let mut hasher = Sha256::new();
        let mut buf = vec![0u8; 1 << 20];
        let mut size = 0u64;
        loop {
            let n = reader.read(&mut buf).at("read source for", &full)?;
            if n == 0 {
                break;
            }
            hasher.update(&buf[..n]);
            // The fault point "mid-payload": half of the first chunk of the first file is on disk.
            if first && size == 0 {
                let half = n / 2;
                file.write_all(&buf[..half]).at("write", &full)?;
                (self.hook)(Stage::MidPayload);
                file.write_all(&buf[half..n]).at("write", &full)?;
            } else {
                file.write_all(&buf[..n]).at("write", &full)?;
            }
            size += n as u64;
        }
        file.sync_all().at("fsync", &full)?;
        self.manifest.files.push(FileEntry {
            path: path.to_owned(),
            size,
            sha256: hex::encode(hasher.finalize()),
            role: role.to_owned(),
        });
        Ok(())
    }

    /// Adds a payload file from bytes.
    pub fn add_bytes(&mut self, path: &str, role: &str, bytes: &[u8]) -> Result<(), SealError> {
        self.add_reader(path, role, bytes)
    }

    /// Adds a payload file by copying `source`.
    pub fn add_file(&mut self, path: &str, role: &str, source: &Path) -> Result<(), SealError> {
        let file = File::open(source).at("open", source)?;
        self.add_reader(path, role, file)
    }

    /// Writes the manifest and the seal (as `SEAL.tmp`), fsyncing everything.
    pub fn seal(mut self, key: Option<&KeyPair>) -> Result<SealedSnapshot, SealError> {
        self.ensure_created()?;
        let dir = self.dir.clone();
        fsync_tree(&dir.join(PAYLOAD_DIR))?;
        fsync_dir(&dir)?;
        (self.hook)(Stage::AfterPayloadFsync);
        self.manifest.files.sort();
        let bytes = self.manifest.to_bytes();
        write_synced(&dir.join(MANIFEST_FILE), &bytes)?;
        let manifest_sha256 = sha256_hex(&bytes);
        (self.hook)(Stage::AfterManifest);
        let seal = Envelope::seal(
            &manifest_sha256,
            &self.manifest.run.run_id,
            self.manifest.step,
            key,
        );
        write_synced(&dir.join(SEAL_TMP), &seal.to_bytes())?;
        fsync_dir(&dir)?;
        (self.hook)(Stage::AfterSealTmp);
        Ok(SealedSnapshot {
            dir,
            manifest: self.manifest,
            manifest_sha256,
            hook: self.hook,
        })
    }
}

fn fsync_tree(dir: &Path) -> Result<(), SealError> {
    for entry in std::fs::read_dir(dir).at("read", dir)? {
        let path = entry.at("read", dir)?.path();
        if path.is_dir() {
            fsync_tree(&path)?;
        }
    }
    fsync_dir(dir)
}

/// A sealed snapshot not yet committed.
pub struct SealedSnapshot {
    dir: PathBuf,
    /// The manifest as written.
    pub manifest: Manifest,
    /// sha256 of `MANIFEST.json`.
    pub manifest_sha256: String,
    hook: Hook,
}

impl SealedSnapshot {
    /// Commits the snapshot in its folder: the seal is linked to its name only if no seal is
    /// there yet. Another writer's snapshot already sealed there is [`SealError::AlreadySealed`];
    /// the identical snapshot is [`CommitOutcome::Unchanged`].
    pub fn commit(mut self) -> Result<CommitOutcome, SealError> {
        let dir = &self.dir;
        let tmp = dir.join(SEAL_TMP);
        let won = link_noreplace(&tmp, &dir.join(SEAL_FILE))?;
        std::fs::remove_file(&tmp).at("remove", &tmp)?;
        if !won {
            let existing = std::fs::read(dir.join(MANIFEST_FILE)).map(|b| sha256_hex(&b));
            return match existing {
                Ok(digest) if digest == self.manifest_sha256 => Ok(CommitOutcome::Unchanged),
                _ => Err(SealError::AlreadySealed { path: dir.clone() }),
            };
        }
        (self.hook)(Stage::AfterCommitRename);
        fsync_dir(dir)?;
        fsync_dir(parent_dir(dir))?;
        (self.hook)(Stage::AfterCommit);
        Ok(CommitOutcome::Sealed)
    }
}
