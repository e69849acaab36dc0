//! `MANIFEST.json`: what a snapshot contains and whose it is. Its exact bytes are hashed and
//! sealed; it is never re-serialised before hashing.

use std::collections::BTreeMap;

use serde::{Deserialize, Serialize};

use crate::SealError;

/// The manifest schema version this crate writes and reads.
pub const SCHEMA_VERSION: u32 = 1;
/// The manifest's file name.
pub const MANIFEST_FILE: &str = "MANIFEST.json";
/// The seal's file name.
pub const SEAL_FILE: &str = "SEAL.dsse.json";
/// Determined writes this file into checkpoint folders itself; it is not sealed and is ignored.
pub(crate) const DETERMINED_METADATA: &str = "metadata.json";
/// Payload files live under this folder.
pub(crate) const PAYLOAD_DIR: &str = "payload";
/// The only files a snapshot may hold beside its payload, sealed like it: PEFT's adapter
/// files, so `PeftModel.from_pretrained(model, CHECKPOINT)` loads a downloaded checkpoint
/// folder as it is.
pub const ROOT_FILES: [&str; 2] = ["adapter_config.json", "adapter_model.safetensors"];

/// The snapshot manifest.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct Manifest {
    /// [`SCHEMA_VERSION`].
    pub schema_version: u32,
    /// Always `sha256`.
    pub hash_alg: String,
    /// Whose snapshot this is.
    pub run: RunIdentity,
    /// The optimizer step (Determined's `steps_completed`).
    pub step: u64,
    /// The snapshot this one continues, if any.
    pub parent: Option<ParentRef>,
    /// The source that produced it.
    pub source: SourceBinding,
    /// sha256 of the run's canonical config bytes.
    pub config_sha256: String,
    /// Every payload file, sorted by path.
    pub files: Vec<FileEntry>,
    /// Digests of evidence streams up to this step (rollouts, sampled tokens, ...), by name.
    pub evidence: Vec<EvidencePrefix>,
    /// Tool versions (informational).
    pub tools: BTreeMap<String, String>,
}

/// Run identity: stable across preemptions; `writer` changes with every allocation.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct RunIdentity {
    /// Stable id, e.g. `det:<experiment>/<trial>` or a local run name.
    pub run_id: String,
    /// The writer (allocation id): the fencing token of this save.
    pub writer: String,
}

/// A link to the previous snapshot.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct ParentRef {
    /// The parent's step.
    pub step: u64,
    /// sha256 of the parent's `MANIFEST.json`.
    pub manifest_sha256: String,
    /// Where the parent is (a Determined UUID or a local folder name), informational.
    pub storage_id: Option<String>,
}

/// The source binding.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct SourceBinding {
    /// Git commit.
    pub commit: String,
    /// sha256 of the source tree.
    pub tree_sha256: Option<String>,
    /// sha256 of `Cargo.lock`.
    pub cargo_lock_sha256: Option<String>,
    /// sha256 of the binary that wrote the snapshot.
    pub binary_sha256: Option<String>,
}

/// One payload file.
#[derive(Debug, Clone, PartialEq, Eq, PartialOrd, Ord, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct FileEntry {
    /// Relative path, under `payload/`.
    pub path: String,
    /// Size in bytes.
    pub size: u64,
    /// Hex sha256.
    pub sha256: String,
    /// The caller's role for it (`adapter`, `optimizer`, `rng`, ...).
    pub role: String,
}

/// The digest of an evidence stream's first `count` records.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct EvidencePrefix {
    /// Stream name.
    pub name: String,
    /// Records covered.
    pub count: u64,
    /// Hex sha256 of the ordered record digests.
    pub sha256: String,
}

/// Checks that `path` is a relative, normalised path under `payload/` with no `..`, `.`, empty
/// or backslash segments, or one of the [`ROOT_FILES`].
pub fn validate_payload_path(path: &str) -> Result<(), SealError> {
    if ROOT_FILES.contains(&path) {
        return Ok(());
    }
    let bad = |reason| {
        Err(SealError::InvalidPath {
            path: path.to_owned(),
            reason,
        })
    };
    if path.starts_with('/') {
        return bad("absolute");
    }
    if path.contains('\\') || path.contains('\0') {
        return bad("backslash or NUL");
    }
    let segments: Vec<&str> = path.split('/').collect();
    if segments.contains(&"..") {
        return bad("`..` segment");
    }
    if segments.iter().any(|s| s.is_empty() || *s == ".") {
        return bad("not normalised");
    }
    if segments.len() < 2 || segments[0] != PAYLOAD_DIR {
        return bad("outside payload/");
    }
    Ok(())
}

impl Manifest {
    /// The bytes written to `MANIFEST.json`.
    pub fn to_bytes(&self) -> Vec<u8> {
        let mut bytes = serde_json::to_vec_pretty(self).expect("manifest serialises");
        bytes.push(b'\n');
        bytes
    }

    /// Parses manifest bytes and checks the schema version, hash algorithm and file list.
    pub fn parse(bytes: &[u8]) -> Result<Self, SealError> {
        #[derive(Deserialize)]
        struct Version {
            schema_version: u32,
        }
        let version: Version = serde_json::from_slice(bytes)
            .map_err(|e| SealError::MalformedManifest(format!("no schema_version: {e}")))?;
        if version.schema_version != SCHEMA_VERSION {
            return Err(SealError::UnsupportedSchema(format!(
                "manifest schema_version {} (this build reads {SCHEMA_VERSION})",
                version.schema_version
            )));
        }
        let manifest: Manifest = serde_json::from_slice(bytes)
            .map_err(|e| SealError::MalformedManifest(e.to_string()))?;
        if manifest.hash_alg != "sha256" {
            return Err(SealError::UnsupportedSchema(format!(
                "hash_alg {:?}",
                manifest.hash_alg
            )));
        }
        for file in &manifest.files {
            validate_payload_path(&file.path)?;
        }
        if !manifest.files.windows(2).all(|w| w[0].path < w[1].path) {
            return Err(SealError::MalformedManifest(
                "files are not sorted and unique".into(),
            ));
        }
        Ok(manifest)
    }
}
