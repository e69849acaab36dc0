//! The typed failures of sealing, committing and verifying; one variant per check.

use std::path::PathBuf;

/// A seal, commit or verification failure. Verification stops at the first failing check.
#[derive(Debug, thiserror::Error)]
pub enum SealError {
    /// The snapshot folder does not exist.
    #[error("checkpoint not found: {path}")]
    CheckpointNotFound {
        /// The folder looked for.
        path: PathBuf,
    },
    /// The seal file is missing, too large or not a DSSE envelope.
    #[error("malformed seal: {0}")]
    MalformedSeal(String),
    /// An unknown schema version, payload type, statement type or hash algorithm.
    #[error("unsupported schema: {0}")]
    UnsupportedSchema(String),
    /// A signature by a trusted key does not verify.
    #[error("bad signature by key {keyid}")]
    BadSignature {
        /// The key id of the failing signature.
        keyid: String,
    },
    /// No signature comes from a trusted key (or the snapshot is unsigned and keys are required).
    #[error("untrusted signer: signatures by {keyids:?}, none trusted")]
    UntrustedSigner {
        /// The key ids the envelope names.
        keyids: Vec<String>,
    },
    /// The seal's subject digest is not the sha256 of `MANIFEST.json`.
    #[error("manifest digest mismatch: sealed {expected}, file has {actual}")]
    ManifestDigestMismatch {
        /// Digest in the seal.
        expected: String,
        /// Digest of the file.
        actual: String,
    },
    /// `MANIFEST.json` does not parse or is inconsistent.
    #[error("malformed manifest: {0}")]
    MalformedManifest(String),
    /// The snapshot belongs to another run.
    #[error("run id mismatch: expected {expected}, snapshot has {actual}")]
    RunIdMismatch {
        /// This run's id.
        expected: String,
        /// The snapshot's.
        actual: String,
    },
    /// The snapshot was made with another config.
    #[error("config mismatch: expected {expected}, snapshot has {actual}")]
    ConfigMismatch {
        /// This run's config digest.
        expected: String,
        /// The snapshot's.
        actual: String,
    },
    /// The snapshot was made by other source.
    #[error("source mismatch: expected commit {expected}, snapshot has {actual}")]
    SourceMismatch {
        /// This run's source binding, rendered.
        expected: String,
        /// The snapshot's.
        actual: String,
    },
    /// The snapshot's step is not the one the scheduler reported.
    #[error("step mismatch: expected {expected}, snapshot has {actual}")]
    StepMismatch {
        /// The expected step.
        expected: u64,
        /// The snapshot's step.
        actual: u64,
    },
    /// A file in the folder that the manifest does not list.
    #[error("unexpected file {path}")]
    UnexpectedFile {
        /// Relative path.
        path: String,
    },
    /// A folder inside `payload/` that holds nothing (no manifest entry can account for it).
    #[error("empty folder {path}")]
    EmptyFolder {
        /// Relative path.
        path: String,
    },
    /// A file the manifest lists is absent.
    #[error("missing file {path}")]
    MissingFile {
        /// Relative path.
        path: String,
    },
    /// A symbolic link inside the snapshot.
    #[error("symlink rejected: {path}")]
    SymlinkRejected {
        /// Relative path.
        path: String,
    },
    /// A path that is absolute, not normalised, escapes with `..`, or is outside `payload/`.
    #[error("invalid path {path:?}: {reason}")]
    InvalidPath {
        /// The path as given.
        path: String,
        /// Why it is refused.
        reason: &'static str,
    },
    /// A file's size differs from the manifest.
    #[error("size mismatch for {path}: manifest says {expected} bytes, file has {actual}")]
    SizeMismatch {
        /// Relative path.
        path: String,
        /// Size in the manifest.
        expected: u64,
        /// Size on disk.
        actual: u64,
    },
    /// A file's sha256 differs from the manifest.
    #[error("digest mismatch for {path}: manifest says {expected}, file has {actual}")]
    DigestMismatch {
        /// Relative path.
        path: String,
        /// Digest in the manifest.
        expected: String,
        /// Digest of the file.
        actual: String,
    },
    /// A `.safetensors` file whose header is not well formed (its digest may still match).
    #[error("malformed safetensors {path}: {reason}")]
    MalformedSafetensors {
        /// Relative path.
        path: String,
        /// What is wrong.
        reason: String,
    },
    /// The commit target already holds a sealed snapshot: another writer won.
    #[error("already sealed: {path}")]
    AlreadySealed {
        /// The commit target.
        path: PathBuf,
    },
    /// A filesystem operation failed.
    #[error(transparent)]
    Io(#[from] hr_files::IoError),
}

impl SealError {
    /// The variant's name, a stable code for logs and exit messages (`DigestMismatch`, ...).
    pub fn code(&self) -> &'static str {
        match self {
            Self::CheckpointNotFound { .. } => "CheckpointNotFound",
            Self::MalformedSeal(_) => "MalformedSeal",
            Self::UnsupportedSchema(_) => "UnsupportedSchema",
            Self::BadSignature { .. } => "BadSignature",
            Self::UntrustedSigner { .. } => "UntrustedSigner",
            Self::ManifestDigestMismatch { .. } => "ManifestDigestMismatch",
            Self::MalformedManifest(_) => "MalformedManifest",
            Self::RunIdMismatch { .. } => "RunIdMismatch",
            Self::ConfigMismatch { .. } => "ConfigMismatch",
            Self::SourceMismatch { .. } => "SourceMismatch",
            Self::StepMismatch { .. } => "StepMismatch",
            Self::UnexpectedFile { .. } => "UnexpectedFile",
            Self::EmptyFolder { .. } => "EmptyFolder",
            Self::MissingFile { .. } => "MissingFile",
            Self::SymlinkRejected { .. } => "SymlinkRejected",
            Self::InvalidPath { .. } => "InvalidPath",
            Self::SizeMismatch { .. } => "SizeMismatch",
            Self::DigestMismatch { .. } => "DigestMismatch",
            Self::MalformedSafetensors { .. } => "MalformedSafetensors",
            Self::AlreadySealed { .. } => "AlreadySealed",
            Self::Io { .. } => "Io",
        }
    }
}
