//! The managed training qualification's proof: the plan run natively without interruption, and
//! as a Determined trial paused after an optimizer step and activated again, compared step by
//! step and field by field with the same evidence fields as the native proof.

use std::path::{Path, PathBuf};

use hr_seal::SourceBinding;
use serde::{Deserialize, Serialize};

use crate::{CoreIdentity, Device, Divergence, Interruption, ProofError};

/// The schema of `managed-proof.json`.
pub const MANAGED_PROOF_SCHEMA: &str = "hessian-recipes/managed-training-proof/v2";

/// `managed-proof.json` of a managed training qualification.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct ManagedProof {
    /// [`MANAGED_PROOF_SCHEMA`].
    pub schema: String,
    /// sha256 of the canonical plan.
    pub plan_sha256: String,
    /// The environment backend.
    pub backend: String,
    /// Steps run.
    pub steps: u64,
    /// The uninterrupted native run's folder.
    pub reference: PathBuf,
    /// The managed trial's run folder (evidence, allocations, receipts).
    pub run_dir: PathBuf,
    /// The experiment.
    pub experiment_id: i64,
    /// The trial.
    pub trial_id: i64,
    /// The pause: the receipt's checkpoint and the one the next allocation restored.
    pub interruption: Interruption,
    /// Checkpoints the master lists for the trial.
    pub checkpoints_listed: u64,
    /// Whether every step and field is equal.
    pub equal: bool,
    /// Where they first differ.
    pub first_divergence: Option<Divergence>,
    /// The source binding of the binary that ran both.
    pub source: SourceBinding,
    /// The device both ran on (as every allocation of each recorded it).
    pub device: Device,
    /// The Core implementation the trial used.
    pub core: CoreIdentity,
    /// The version the master reported (`GET /api/v1/master`).
    pub master_version: String,
    /// The master's URL.
    pub master_url: String,
    /// The environment server's package and version (`nemo-gym 0.7.0`), none for the fixture.
    pub service_package: Option<String>,
}

impl ManagedProof {
    /// Writes the proof (create-only).
    pub fn write(&self, path: &Path) -> Result<(), ProofError> {
        crate::write_create_only(path, self)
    }
}
