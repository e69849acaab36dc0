//! Writing a snapshot: payload files are hashed while they are written and fsynced, then the
//! manifest, then the seal (as `SEAL.tmp`), and last the create-only commit. Each stage calls the
//! writer's hook first, which is how the fault-injection tests kill a writer at that point.

use hr_files::IoResultExt;
use std::{
    collections::BTreeMap,
    fs::{File, OpenOptions},
    io::{Read, Write},
    path::{Path, PathBuf},
    sync::atomic::{AtomicU64, Ordering},
};

use sha2::{Digest, Sha256};

use crate::{
    CommitOutcome, Envelope, EvidencePrefix, FileEntry, KeyPair, MANIFEST_FILE, Manifest,
    ParentRef, RunIdentity, SCHEMA_VERSION, SEAL_FILE, SealError, SourceBinding,
    commit::{fsync_dir, link_noreplace, parent_dir, rename_noreplace},
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
    /// Committed under the final name, parent folder not yet fsynced.
    AfterCommitRename,
    /// Commit durable; the caller has not yet moved HEAD or told the master.
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

    /// The stage's name (`before-staging`, ...), as the fault probe takes it.
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

/// Where a snapshot is written.
enum Layout {
    /// A private staging folder renamed onto the final name at commit.
    Staged { staging: PathBuf },
    /// Written directly in its final folder (a Determined UUID folder); the seal is linked last.
    InPlace { dir: PathBuf },
}

/// Builds one snapshot.
pub struct SnapshotWriter {
    layout: Layout,
    created: bool,
    manifest: Manifest,
    hook: Hook,
}

fn unique_suffix() -> String {
    static COUNTER: AtomicU64 = AtomicU64::new(0);
    let nanos = std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .map_or(0, |d| d.subsec_nanos());
    format!(
        "{}-{nanos}-{}",
        std::process::id(),
        COUNTER.fetch_add(1, Ordering::Relaxed)
    )
}

fn sanitize(s: &str) -> String {
    s.chars()
        .map(|c| {
            if c.is_ascii_alphanumeric() || c == '-' {
                c
            } else {
                '_'
            }
        })
        .collect()
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
    fn with_layout(
        layout: Layout,
        run: RunIdentity,
        step: u64,
        source: SourceBinding,
        config_sha256: String,
    ) -> Self {
        Self {
            layout,
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

    /// A writer that stages under `<store_root>/.staging/` and commits by renaming.
    pub fn staged(
        store_root: &Path,
        run: RunIdentity,
        step: u64,
        source: SourceBinding,
        config_sha256: String,
    ) -> Self {
        let name = format!("{step:020}-{}-{}", sanitize(&run.writer), unique_suffix());
        let staging = store_root.join(".staging").join(name);
        Self::with_layout(Layout::Staged { staging }, run, step, source, config_sha256)
    }

    /// A writer that writes straight into `dir` (which may exist, holding at most Determined's
    /// `metadata.json`) and commits by linking the seal.
    pub fn in_place(
        dir: &Path,
        run: RunIdentity,
        step: u64,
        source: SourceBinding,
        config_sha256: String,
    ) -> Self {
        Self::with_layout(
            Layout::InPlace {
                dir: dir.to_owned(),
            },
            run,
            step,
            source,
            config_sha256,
        )
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

    fn dir(&self) -> &Path {
        match &self.layout {
            Layout::Staged { staging } => staging,
            Layout::InPlace { dir } => dir,
        }
    }

    fn ensure_created(&mut self) -> Result<(), SealError> {
        if !self.created {
            (self.hook)(Stage::BeforeStaging);
            let payload = self.dir().join(PAYLOAD_DIR);
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
        let full = self.dir().join(path);
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
    pub fn seal(mut self, key: Option<&KeyPair>) -> Result<StagedSnapshot, SealError> {
        self.ensure_created()?;
        let dir = self.dir().to_owned();
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
        Ok(StagedSnapshot {
            layout: self.layout,
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
pub struct StagedSnapshot {
    layout: Layout,
    /// The manifest as written.
    pub manifest: Manifest,
    /// sha256 of `MANIFEST.json`.
    pub manifest_sha256: String,
    hook: Hook,
}

impl StagedSnapshot {
    /// Commits a staged snapshot to `final_dir` (create-only), or an in-place one in its folder.
    /// Another writer's snapshot already there is [`SealError::AlreadySealed`]; the identical
    /// snapshot is [`CommitOutcome::Unchanged`]. Either way the loser's staging is removed.
    pub fn commit(mut self, final_dir: &Path) -> Result<CommitOutcome, SealError> {
        let won = match &self.layout {
            Layout::Staged { staging } => {
                let seal_tmp = staging.join(SEAL_TMP);
                std::fs::rename(&seal_tmp, staging.join(SEAL_FILE)).at("rename", &seal_tmp)?;
                fsync_dir(staging)?;
                let parent = parent_dir(final_dir);
                std::fs::create_dir_all(parent).at("create", parent)?;
                rename_noreplace(staging, final_dir)?
            }
            Layout::InPlace { dir } => {
                if dir != final_dir {
                    return Err(SealError::InvalidPath {
                        path: final_dir.display().to_string(),
                        reason: "an in-place snapshot commits in its own folder",
                    });
                }
                let tmp = dir.join(SEAL_TMP);
                let won = link_noreplace(&tmp, &dir.join(SEAL_FILE))?;
                std::fs::remove_file(&tmp).at("remove", &tmp)?;
                won
            }
        };
        if !won {
            if let Layout::Staged { staging } = &self.layout {
                std::fs::remove_dir_all(staging).at("remove", staging)?;
            }
            let existing = std::fs::read(final_dir.join(MANIFEST_FILE)).map(|b| sha256_hex(&b));
            return match existing {
                Ok(digest) if digest == self.manifest_sha256 => Ok(CommitOutcome::Unchanged),
                _ => Err(SealError::AlreadySealed {
                    path: final_dir.to_owned(),
                }),
            };
        }
        (self.hook)(Stage::AfterCommitRename);
        fsync_dir(final_dir)?;
        fsync_dir(parent_dir(final_dir))?;
        (self.hook)(Stage::AfterCommit);
        Ok(CommitOutcome::Sealed)
    }
}
