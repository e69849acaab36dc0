//! Where qualification proofs live: the `--proofs DIR` folder a backend's qualification leaves
//! (`DIR/native/proof.json`, `DIR/managed/managed-proof.json`) and the gate reads.

use std::path::{Path, PathBuf};

/// The native qualification's proof, in its output folder.
pub const NATIVE_PROOF_FILE: &str = "proof.json";

/// The managed qualification's proof, in its output folder.
pub const MANAGED_PROOF_FILE: &str = "managed-proof.json";

/// A backend's proofs folder: the native qualification's output in `native/`, the managed
/// one's in `managed/`.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ProofsDir {
    root: PathBuf,
}

impl ProofsDir {
    /// The proofs folder at `root`.
    pub fn new(root: impl Into<PathBuf>) -> Self {
        Self { root: root.into() }
    }

    /// The folder itself.
    pub fn root(&self) -> &Path {
        &self.root
    }

    /// The native qualification's output folder (`qualify native --output`).
    pub fn native(&self) -> PathBuf {
        self.root.join("native")
    }

    /// The managed qualification's output folder (`qualify managed --output`).
    pub fn managed(&self) -> PathBuf {
        self.root.join("managed")
    }

    /// The native proof.
    pub fn native_proof(&self) -> PathBuf {
        self.native().join(NATIVE_PROOF_FILE)
    }

    /// The managed proof.
    pub fn managed_proof(&self) -> PathBuf {
        self.managed().join(MANAGED_PROOF_FILE)
    }
}
