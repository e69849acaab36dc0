//! Qualification proofs: the per-step evidence of an uninterrupted reference run and of a run
//! that was interrupted and resumed, their comparison (equal, or the first divergent step and
//! field), and `proof.json`, which binds the source, the device and the Core implementation and
//! can be re-checked later against the sealed snapshots it names.
//!
//! Pure data and local files: it knows nothing about Determined's API or about tensors.
//!
//! # In detail
//!
//! Per-step evidence (state digest, checkpoint UUID, manifest digest, allocation) of a reference
//! run and a resumed run, their comparison (equal, or the first divergent step and field), and
//! `proof.json` (create-only) binding the source and the Core implementation.
//!
//! `device.rs`: `Device`, what ran the tensors (kind `cpu`, `cuda` or `vulkan`; the CPU's
//! architecture and GEMM vector class, the GPU's name or the Vulkan adapter's; the compute
//! capability; the locked burn and cubecl versions), which every allocation line records and every
//! training proof names; `mismatch` compares kind and name.
//!
//! `native.rs`: the native qualification's proof (`hessian-recipes/native-proof/v2`) and
//! `first_divergence`, which reports the first step and the earliest differing field in a fixed
//! causal order (tasks, tokens, rewards, advantages, adapter, optimizer, trainer state, data
//! cursor).
//!
//! `managed.rs`: the managed training qualification's proof
//! (`hessian-recipes/managed-training-proof/v2`, with the master's URL and version).
//!
//! `run_folder.rs`: `EvidenceLine`, the typed evidence record `hr-train` writes (its fields in key
//! order, so the lines a manifest seals are the same bytes as before it was typed) and the
//! qualifications read (unknown or missing fields are an error naming the line; floats compare bit
//! for bit), and the one reader of a run's evidence stream.
//!
//! `allocations.rs`: `AllocationRecord` (`Started` with the pid, restore, deadline, budget and
//! device; `Ended`; `Refused`), the typed lines of `allocations.jsonl` that `hr-train` writes (same
//! bytes as the untyped lines before) and `hr-qualify` reads through `read_allocations` (torn last
//! line left out, a bad line named).
//!
//! `layout.rs`: `ProofsDir`, the `--proofs DIR` layout (`native/proof.json`,
//! `managed/managed-proof.json`) the qualifications write, xtask assembles and the gate reads (the
//! qualification's length, `QUALIFICATION_STEPS`, is a plan family's: `hr-plan`).

mod allocations;
mod control;
mod device;
mod layout;
mod managed;
mod native;
mod run_folder;

use std::path::{Path, PathBuf};

pub use allocations::{
    AllocationEnd, AllocationRecord, AllocationStart, RestoreRefused, read_allocation_starts,
    read_allocations,
};
pub use control::Control;
pub use device::Device;
pub use layout::{MANAGED_PROOF_FILE, NATIVE_PROOF_FILE, ProofsDir};
pub use managed::{MANAGED_PROOF_SCHEMA, ManagedProof};
pub use native::{Divergence, NATIVE_FIELDS, NATIVE_PROOF_SCHEMA, NativeProof, first_divergence};
pub use run_folder::{CursorRecord, EvidenceLine, parse_evidence, read_evidence};

use hr_files::IoResultExt;
use hr_seal::SourceBinding;
use serde::{Deserialize, Serialize};

/// The proof schema this crate writes.
pub const PROOF_SCHEMA: &str = "hessian-recipes/proof/v1";

/// One step of one run.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct StepEvidence {
    /// The step.
    pub step: u64,
    /// sha256 of the step's full state (the fixture's state, or the trainer's native state).
    pub state_sha256: String,
    /// The checkpoint that holds it.
    pub checkpoint_uuid: String,
    /// sha256 of that checkpoint's manifest.
    pub manifest_sha256: String,
    /// The allocation that wrote it.
    pub allocation: String,
}

/// One run's evidence.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct RunEvidence {
    /// Determined experiment id.
    pub experiment_id: i64,
    /// Trial id.
    pub trial_id: i64,
    /// Allocations in order.
    pub allocations: Vec<String>,
    /// Steps in order.
    pub steps: Vec<StepEvidence>,
}

/// The pause and the restore of the interrupted run.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct Interruption {
    /// `pause` (preempted and acknowledged) or `kill-during-save` (no ack, restarted).
    pub kind: String,
    /// Step of the checkpoint the next allocation restored from.
    pub step: u64,
    /// The checkpoint UUID in the `preempted_at_checkpoint` receipt (none after a kill).
    pub uuid_at_pause: Option<String>,
    /// The allocation that was interrupted.
    pub paused_allocation: String,
    /// The checkpoint UUID the next allocation restored.
    pub uuid_at_restore: String,
    /// The allocation that restored it.
    pub restored_allocation: String,
    /// Its `trialRunId`.
    pub restored_run_id: i64,
    /// The step whose metric was visible when the pause was sent (the seed's recovery point:
    /// sent after step 1, it lands while step 2 runs, so the worker stops at step 2). Absent in
    /// proofs made before it was recorded, and after a kill.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub pause_sent_after_step: Option<u64>,
}

/// The Core implementation that ran the trial.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct CoreIdentity {
    /// Crate name.
    pub implementation: String,
    /// Crate version.
    pub version: String,
    /// sha256 of the binary that ran it.
    pub binary_sha256: String,
}

/// `proof.json`.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct Proof {
    /// [`PROOF_SCHEMA`].
    pub schema: String,
    /// What was qualified (e.g. `managed-cpu`).
    pub kind: String,
    /// The uninterrupted run.
    pub reference: RunEvidence,
    /// The interrupted and resumed run.
    pub resumed: RunEvidence,
    /// Pause and restore.
    pub interruption: Interruption,
    /// Whether every step's state is equal.
    pub equal: bool,
    /// The first step whose state differs, if any.
    pub first_divergent_step: Option<u64>,
    /// What differs there (`state_sha256`, `missing step`).
    pub first_divergent_field: Option<String>,
    /// The final state's digest in the resumed run.
    pub final_state_sha256: Option<String>,
    /// Folder of the checkpoints, for re-verification.
    pub checkpoint_storage: PathBuf,
    /// The source binding.
    pub source: SourceBinding,
    /// The Core implementation.
    pub core: CoreIdentity,
}

/// The result of comparing two runs step by step.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Comparison {
    /// Whether all steps match.
    pub equal: bool,
    /// First differing step.
    pub first_divergent_step: Option<u64>,
    /// What differs.
    pub field: Option<String>,
}

/// Compares the state digests of two runs, step by step.
pub fn compare(reference: &[StepEvidence], resumed: &[StepEvidence]) -> Comparison {
    let last = reference
        .iter()
        .chain(resumed)
        .map(|s| s.step)
        .max()
        .unwrap_or(0);
    for step in 1..=last {
        let a = reference.iter().find(|s| s.step == step);
        let b = resumed.iter().find(|s| s.step == step);
        let field = match (a, b) {
            (Some(a), Some(b)) if a.state_sha256 == b.state_sha256 => continue,
            (Some(_), Some(_)) => "state_sha256",
            _ => "missing step",
        };
        return Comparison {
            equal: false,
            first_divergent_step: Some(step),
            field: Some(field.to_owned()),
        };
    }
    Comparison {
        equal: last > 0,
        first_divergent_step: None,
        field: None,
    }
}

/// Errors reading or writing proofs.
#[derive(Debug, thiserror::Error)]
pub enum ProofError {
    /// A file operation failed.
    #[error(transparent)]
    Io(#[from] hr_files::IoError),
    /// The proof does not parse or has another schema.
    #[error("{path}: not a {PROOF_SCHEMA} proof: {message}")]
    Format {
        /// Where.
        path: PathBuf,
        /// Why.
        message: String,
    },
    /// A line of an evidence stream is not an evidence record.
    #[error("{path} line {line}: {message}")]
    Evidence {
        /// The stream.
        path: PathBuf,
        /// Its 1-based line.
        line: usize,
        /// Why.
        message: String,
    },
}

/// Writes `value` as pretty JSON to a new file, atomically and durably; an existing file is never
/// replaced.
pub(crate) fn write_create_only(path: &Path, value: &impl Serialize) -> Result<(), ProofError> {
    let bytes = serde_json::to_vec_pretty(value).map_err(|e| ProofError::Format {
        path: path.to_owned(),
        message: e.to_string(),
    })?;
    Ok(hr_files::write_new(path, &bytes)?)
}

impl Proof {
    /// Writes the proof to `path` (create-only: an existing proof is never overwritten).
    pub fn write(&self, path: &Path) -> Result<(), ProofError> {
        write_create_only(path, self)
    }

    /// Reads a proof.
    pub fn read(path: &Path) -> Result<Self, ProofError> {
        let bytes = std::fs::read(path).at("read", path)?;
        let proof: Proof = serde_json::from_slice(&bytes).map_err(|e| ProofError::Format {
            path: path.to_owned(),
            message: e.to_string(),
        })?;
        if proof.schema != PROOF_SCHEMA {
            return Err(ProofError::Format {
                path: path.to_owned(),
                message: format!("schema {:?}", proof.schema),
            });
        }
        Ok(proof)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn steps(digests: &[&str]) -> Vec<StepEvidence> {
        digests
            .iter()
            .enumerate()
            .map(|(i, d)| StepEvidence {
                step: i as u64 + 1,
                state_sha256: (*d).to_owned(),
                checkpoint_uuid: format!("u{i}"),
                manifest_sha256: String::new(),
                allocation: "a".into(),
            })
            .collect()
    }

    #[test]
    fn equal_runs_compare_equal_and_the_first_divergence_is_named() {
        assert!(compare(&steps(&["a", "b"]), &steps(&["a", "b"])).equal);
        let c = compare(&steps(&["a", "b", "c"]), &steps(&["a", "x", "y"]));
        assert_eq!(
            (c.equal, c.first_divergent_step, c.field.as_deref()),
            (false, Some(2), Some("state_sha256"))
        );
        let missing = compare(&steps(&["a", "b"]), &steps(&["a"]));
        assert_eq!(
            (missing.first_divergent_step, missing.field.as_deref()),
            (Some(2), Some("missing step"))
        );
        assert!(!compare(&[], &[]).equal, "no evidence proves nothing");
    }
}
