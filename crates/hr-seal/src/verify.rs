//! Verification before adoption, in the order of `checkpoints.md` §4, cheap to expensive, failing
//! closed at the first failed check: folder, seal and signature, statement and manifest digest,
//! schema, identity (run, config, source), step, file set (regular files only: no symlinks,
//! FIFOs or devices; UTF-8 names; no stray or missing files, no empty folders), sizes, digests,
//! then safetensors structure.

use hr_files::IoResultExt;
use std::{
    collections::BTreeSet,
    fs::File,
    io::Read,
    path::{Path, PathBuf},
};

use crate::{
    Envelope, MANIFEST_FILE, Manifest, SEAL_FILE, SealError, SourceBinding, Trust,
    digest::{hash_files, sha256_hex},
    manifest::{DETERMINED_METADATA, PAYLOAD_DIR, ROOT_FILES},
    safetensors,
};

const MAX_SEAL_BYTES: u64 = 1 << 20;
const MAX_MANIFEST_BYTES: u64 = 64 << 20;

/// What the verifier requires of a snapshot besides its own integrity.
#[derive(Debug, Clone, Default)]
pub struct Expectations {
    /// Which seals are trusted.
    pub trust: Trust,
    /// The current run's id.
    pub run_id: Option<String>,
    /// The current run's config digest.
    pub config_sha256: Option<String>,
    /// The current run's source binding.
    pub source: Option<SourceBinding>,
    /// The step the scheduler reported for this checkpoint.
    pub step: Option<u64>,
}

/// A verified snapshot.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Verified {
    /// Its folder.
    pub dir: PathBuf,
    /// Its manifest.
    pub manifest: Manifest,
    /// sha256 of its `MANIFEST.json`.
    pub manifest_sha256: String,
}

impl Verified {
    /// Reads a payload file of this snapshot (`rel` as in the manifest, e.g. `payload/x.json`)
    /// and checks it is still the verified file: the size and sha256 the manifest seals. A
    /// restore that loads through this loads what was verified, even if the folder changed
    /// after [`verify`] returned.
    pub fn read_file(&self, rel: &str) -> Result<Vec<u8>, SealError> {
        let entry = self
            .manifest
            .files
            .iter()
            .find(|f| f.path == rel)
            .ok_or_else(|| SealError::MissingFile {
                path: rel.to_owned(),
            })?;
        let path = self.dir.join(rel);
        let mut bytes = Vec::new();
        File::open(&path)
            .and_then(|f| f.take(entry.size + 1).read_to_end(&mut bytes))
            .at("read", &path)?;
        if bytes.len() as u64 != entry.size {
            return Err(SealError::SizeMismatch {
                path: rel.to_owned(),
                expected: entry.size,
                actual: bytes.len() as u64,
            });
        }
        let digest = sha256_hex(&bytes);
        if digest != entry.sha256 {
            return Err(SealError::DigestMismatch {
                path: rel.to_owned(),
                expected: entry.sha256.clone(),
                actual: digest,
            });
        }
        Ok(bytes)
    }
}

/// Reads at most `cap` bytes of a regular file; anything else (a FIFO would block the open, a
/// symlink points elsewhere) is refused before it is opened.
fn read_capped(path: &Path, cap: u64) -> Result<Vec<u8>, SealError> {
    let kind = std::fs::symlink_metadata(path)
        .at("stat", path)?
        .file_type();
    if !kind.is_file() {
        let name = path.file_name().unwrap_or_default().to_string_lossy();
        return Err(if kind.is_symlink() {
            SealError::SymlinkRejected {
                path: name.into_owned(),
            }
        } else {
            SealError::UnexpectedFile {
                path: name.into_owned(),
            }
        });
    }
    let file = File::open(path).at("open", path)?;
    let mut bytes = Vec::new();
    file.take(cap + 1)
        .read_to_end(&mut bytes)
        .at("read", path)?;
    if bytes.len() as u64 > cap {
        return Err(SealError::MalformedSeal(format!(
            "{} is larger than {cap} bytes",
            path.display()
        )));
    }
    Ok(bytes)
}

/// Verifies the snapshot in `dir` against `expect`.
pub fn verify(dir: &Path, expect: &Expectations) -> Result<Verified, SealError> {
    // 1. The folder exists.
    if !dir.is_dir() {
        return Err(SealError::CheckpointNotFound {
            path: dir.to_owned(),
        });
    }
    // 2-3. Seal, signatures, statement; the subject is the manifest's digest.
    let seal_path = dir.join(SEAL_FILE);
    if !seal_path.is_file() {
        return Err(SealError::MalformedSeal(format!(
            "{SEAL_FILE} is missing: the snapshot was never sealed"
        )));
    }
    let sealed = Envelope::open(&read_capped(&seal_path, MAX_SEAL_BYTES)?, &expect.trust)?;
    let manifest_path = dir.join(MANIFEST_FILE);
    let bytes = read_capped(&manifest_path, MAX_MANIFEST_BYTES).map_err(|e| {
        SealError::MalformedManifest(format!(
            "{MANIFEST_FILE} is missing, not a regular file or too large ({e})"
        ))
    })?;
    let actual = sha256_hex(&bytes);
    if actual != sealed.manifest_sha256 {
        return Err(SealError::ManifestDigestMismatch {
            expected: sealed.manifest_sha256,
            actual,
        });
    }
    let manifest = Manifest::parse(&bytes)?;
    // The seal's predicate says the same run and step as the manifest it seals.
    if sealed.run_id != manifest.run.run_id || sealed.step != manifest.step {
        return Err(SealError::MalformedSeal(format!(
            "the seal names run {:?} step {}, its manifest run {:?} step {}",
            sealed.run_id, sealed.step, manifest.run.run_id, manifest.step
        )));
    }
    // 4. Identity.
    check_identity(&manifest, expect)?;
    // 5. Step.
    if let Some(step) = expect.step.filter(|s| *s != manifest.step) {
        return Err(SealError::StepMismatch {
            expected: step,
            actual: manifest.step,
        });
    }
    // 6. File set.
    let mut empty_folders = Vec::new();
    let on_disk = list_payload(dir, &mut empty_folders)?;
    let listed: BTreeSet<&str> = manifest.files.iter().map(|f| f.path.as_str()).collect();
    if let Some(extra) = on_disk.iter().find(|p| !listed.contains(p.as_str())) {
        return Err(SealError::UnexpectedFile {
            path: extra.clone(),
        });
    }
    if let Some(missing) = manifest.files.iter().find(|f| !on_disk.contains(&f.path)) {
        return Err(SealError::MissingFile {
            path: missing.path.clone(),
        });
    }
    if let Some(path) = empty_folders.into_iter().next() {
        return Err(SealError::EmptyFolder { path });
    }
    // 7. Sizes by stat, then streaming digests.
    for f in &manifest.files {
        let path = dir.join(&f.path);
        let size = std::fs::metadata(&path).at("stat", &path)?.len();
        if size != f.size {
            return Err(SealError::SizeMismatch {
                path: f.path.clone(),
                expected: f.size,
                actual: size,
            });
        }
    }
    let paths: Vec<PathBuf> = manifest.files.iter().map(|f| dir.join(&f.path)).collect();
    for (f, result) in manifest.files.iter().zip(hash_files(&paths)) {
        let (size, digest) = result?;
        if size != f.size {
            return Err(SealError::SizeMismatch {
                path: f.path.clone(),
                expected: f.size,
                actual: size,
            });
        }
        if digest != f.sha256 {
            return Err(SealError::DigestMismatch {
                path: f.path.clone(),
                expected: f.sha256.clone(),
                actual: digest,
            });
        }
    }
    // 8. Structure.
    for f in manifest
        .files
        .iter()
        .filter(|f| f.path.ends_with(".safetensors"))
    {
        safetensors::check(&dir.join(&f.path), &f.path)?;
    }
    Ok(Verified {
        dir: dir.to_owned(),
        manifest,
        manifest_sha256: actual,
    })
}

fn check_identity(manifest: &Manifest, expect: &Expectations) -> Result<(), SealError> {
    if let Some(run_id) = expect
        .run_id
        .as_ref()
        .filter(|r| **r != manifest.run.run_id)
    {
        return Err(SealError::RunIdMismatch {
            expected: run_id.clone(),
            actual: manifest.run.run_id.clone(),
        });
    }
    if let Some(config) = expect
        .config_sha256
        .as_ref()
        .filter(|c| **c != manifest.config_sha256)
    {
        return Err(SealError::ConfigMismatch {
            expected: config.clone(),
            actual: manifest.config_sha256.clone(),
        });
    }
    if let Some(source) = expect.source.as_ref().filter(|s| **s != manifest.source) {
        return Err(SealError::SourceMismatch {
            expected: format!("{source:?}"),
            actual: format!("{:?}", manifest.source),
        });
    }
    Ok(())
}

/// Lists the files under `payload/` (relative paths) and adds the folders that hold nothing to
/// `empty`; rejects symlinks, anything not a regular file or folder, names that are not UTF-8,
/// and anything at the top level other than the payload, the [`ROOT_FILES`], the manifest, the
/// seal and Determined's `metadata.json`.
fn list_payload(dir: &Path, empty: &mut Vec<String>) -> Result<BTreeSet<String>, SealError> {
    let mut files = BTreeSet::new();
    for entry in std::fs::read_dir(dir).at("read", dir)? {
        let entry = entry.at("read", dir)?;
        let name = utf8_name(&entry, "")?;
        let kind = entry.file_type().at("stat", entry.path())?;
        if kind.is_symlink() {
            return Err(SealError::SymlinkRejected { path: name });
        }
        match name.as_str() {
            MANIFEST_FILE | SEAL_FILE | DETERMINED_METADATA if kind.is_file() => {}
            _ if ROOT_FILES.contains(&name.as_str()) && kind.is_file() => {
                files.insert(name);
            }
            PAYLOAD_DIR if kind.is_dir() => walk(&entry.path(), PAYLOAD_DIR, &mut files, empty)?,
            _ => return Err(SealError::UnexpectedFile { path: name }),
        }
    }
    Ok(files)
}

/// An entry's name, refused when it is not UTF-8 (a lossy rendering could pass for a listed
/// name); `rel` is the folder it is in, for the error.
fn utf8_name(entry: &std::fs::DirEntry, rel: &str) -> Result<String, SealError> {
    entry
        .file_name()
        .into_string()
        .map_err(|raw| SealError::UnexpectedFile {
            path: format!("{rel}{} (not UTF-8)", raw.to_string_lossy()),
        })
}

/// Adds the files under `dir` to `files` and its folders that hold nothing to `empty`.
fn walk(
    dir: &Path,
    rel: &str,
    files: &mut BTreeSet<String>,
    empty: &mut Vec<String>,
) -> Result<(), SealError> {
    let mut holds_nothing = true;
    for entry in std::fs::read_dir(dir).at("read", dir)? {
        holds_nothing = false;
        let entry = entry.at("read", dir)?;
        let path = format!("{rel}/{}", utf8_name(&entry, &format!("{rel}/"))?);
        let kind = entry.file_type().at("stat", entry.path())?;
        if kind.is_symlink() {
            return Err(SealError::SymlinkRejected { path });
        } else if kind.is_dir() {
            walk(&entry.path(), &path, files, empty)?;
        } else if kind.is_file() {
            files.insert(path);
        } else {
            return Err(SealError::UnexpectedFile { path });
        }
    }
    if holds_nothing {
        empty.push(rel.to_owned());
    }
    Ok(())
}
