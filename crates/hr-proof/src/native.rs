//! The native qualification's proof: the same plan run uninterrupted and stopped-then-resumed
//! in new processes, compared step by step and field by field (tasks, sampled tokens, rewards,
//! advantages, adapter, optimizer, trainer state with the RNG, data cursor).

use std::path::{Path, PathBuf};

use hr_seal::SourceBinding;
use serde::{Deserialize, Serialize};

use crate::{Device, EvidenceLine, ProofError};

/// The schema of `proof.json` for native qualifications.
pub const NATIVE_PROOF_SCHEMA: &str = "hessian-recipes/native-proof/v2";

/// Evidence fields in the order they are compared ([`EvidenceLine::first_difference`]): a step's
/// first differing field is the earliest cause (different tasks explain different tokens, which
/// explain different updates).
pub const NATIVE_FIELDS: [&str; 8] = [
    "task_ids",
    "tokens_sha256",
    "rewards",
    "advantages_sha256",
    "adapter_sha256",
    "optimizer_sha256",
    "trainer_state_sha256",
    "data_cursor",
];

/// Where two evidence streams first differ.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct Divergence {
    /// The step.
    pub step: u64,
    /// The field (one of [`NATIVE_FIELDS`], or `missing step`).
    pub field: String,
}

/// Compares evidence lines step by step, field by field in [`NATIVE_FIELDS`] order. `None`
/// when both streams hold the same steps with equal fields.
pub fn first_divergence(
    reference: &[EvidenceLine],
    resumed: &[EvidenceLine],
) -> Option<Divergence> {
    let last = reference
        .iter()
        .chain(resumed)
        .map(|l| l.step)
        .max()
        .unwrap_or(0);
    for step in 1..=last {
        let a = reference.iter().find(|l| l.step == step);
        let b = resumed.iter().find(|l| l.step == step);
        let (Some(a), Some(b)) = (a, b) else {
            return Some(Divergence {
                step,
                field: "missing step".to_owned(),
            });
        };
        if let Some(field) = a.first_difference(b) {
            return Some(Divergence {
                step,
                field: field.to_owned(),
            });
        }
    }
    None
}

/// `proof.json` of a native qualification.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct NativeProof {
    /// [`NATIVE_PROOF_SCHEMA`].
    pub schema: String,
    /// sha256 of the canonical plan, the digest every checkpoint's manifest binds (native proofs
    /// written before 2026-12-04 hold the sha256 of the run folder's plan file instead).
    pub plan_sha256: String,
    /// Steps run.
    pub steps: u64,
    /// The step after which the interrupted run stopped.
    pub stopped_after: u64,
    /// A negative control applied at resume, if any.
    pub control: Option<String>,
    /// The uninterrupted run's folder.
    pub reference: PathBuf,
    /// The interrupted run's folder.
    pub interrupted: PathBuf,
    /// The resumed run's folder.
    pub resumed: PathBuf,
    /// Whether every step and field is equal.
    pub equal: bool,
    /// Where they first differ.
    pub first_divergence: Option<Divergence>,
    /// The source binding of the binary that ran all three.
    pub source: SourceBinding,
    /// The device all three ran on (as every allocation of each recorded it).
    pub device: Device,
}

impl NativeProof {
    /// Writes the proof (create-only), its run folders recorded relative to the proof's own
    /// folder when they lie inside it, so the proof means the same from any working folder (a
    /// trial's included) and after its folder moves.
    pub fn write(&self, path: &Path) -> Result<(), ProofError> {
        let dir = path.parent().unwrap_or(Path::new(""));
        let mut relative = self.clone();
        for run in relative.runs_mut() {
            if let Ok(inside) = run.strip_prefix(dir) {
                *run = inside.to_owned();
            }
        }
        crate::write_create_only(path, &relative)
    }

    /// The proof read from the file at `path` with its run folders resolved: a relative one
    /// against the proof's folder (as [`NativeProof::write`] records them), or, for a proof
    /// written before 2026-12-06 whose relative paths named folders from where `qualify` ran,
    /// as written when only that exists.
    pub fn resolved_at(mut self, path: &Path) -> Self {
        let dir = path.parent().unwrap_or(Path::new(""));
        for run in self.runs_mut() {
            if run.is_relative() {
                let beside = dir.join(&*run);
                if beside.exists() || !run.exists() {
                    *run = beside;
                }
            }
        }
        self
    }

    fn runs_mut(&mut self) -> [&mut PathBuf; 3] {
        [
            &mut self.reference,
            &mut self.interrupted,
            &mut self.resumed,
        ]
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    use crate::CursorRecord;

    fn line(step: u64, tokens: &str, adapter: &str) -> EvidenceLine {
        EvidenceLine {
            step,
            task_ids: vec!["t".into()],
            rewards: vec![0.5],
            tokens_sha256: tokens.into(),
            advantages_sha256: "x".into(),
            adapter_sha256: adapter.into(),
            optimizer_sha256: "x".into(),
            trainer_state_sha256: "x".into(),
            data_cursor: CursorRecord {
                epoch: 0,
                position: step,
            },
        }
    }

    #[test]
    fn a_proof_names_its_runs_relative_to_itself_and_reads_them_back_from_anywhere() {
        let dir = tempfile::tempdir().expect("tmp");
        let out = dir.path().join("native");
        let run = |name: &str| out.join(name);
        let proof = NativeProof {
            schema: NATIVE_PROOF_SCHEMA.to_owned(),
            plan_sha256: "p".into(),
            steps: 4,
            stopped_after: 2,
            control: None,
            reference: run("reference"),
            interrupted: run("interrupted"),
            resumed: run("resumed"),
            equal: true,
            first_divergence: None,
            source: SourceBinding {
                commit: "c".into(),
                tree_sha256: None,
                cargo_lock_sha256: None,
                binary_sha256: None,
            },
            device: Device::new("cpu", "x86_64", "burn"),
        };
        std::fs::create_dir_all(run("reference")).expect("folder");
        let file = out.join(crate::NATIVE_PROOF_FILE);
        proof.write(&file).expect("write");
        let text = std::fs::read_to_string(&file).expect("read");
        let written: NativeProof = serde_json::from_str(&text).expect("json");
        assert_eq!(written.reference, Path::new("reference"), "{text}");
        assert_eq!(written.resolved_at(&file), proof);
    }

    #[test]
    fn every_field_is_compared_in_the_documented_order() {
        let a = line(1, "t", "a");
        let changes: [fn(&mut EvidenceLine); 8] = [
            |l| l.task_ids.push("u".into()),
            |l| l.tokens_sha256.push('!'),
            |l| l.rewards[0] = -0.5,
            |l| l.advantages_sha256.push('!'),
            |l| l.adapter_sha256.push('!'),
            |l| l.optimizer_sha256.push('!'),
            |l| l.trainer_state_sha256.push('!'),
            |l| l.data_cursor.epoch += 1,
        ];
        for (field, change) in NATIVE_FIELDS.iter().zip(changes) {
            let mut b = a.clone();
            change(&mut b);
            assert_eq!(a.first_difference(&b), Some(*field));
        }
        // Floats bit for bit: 0.0 and -0.0 are different rewards.
        let mut b = a.clone();
        b.rewards[0] = 0.0;
        let mut c = a.clone();
        c.rewards[0] = -0.0;
        assert_eq!(b.first_difference(&c), Some("rewards"));
        assert_eq!(a.first_difference(&a.clone()), None);
    }

    #[test]
    fn the_first_step_and_earliest_field_are_reported() {
        let a = vec![
            line(1, "t1", "a1"),
            line(2, "t2", "a2"),
            line(3, "t3", "a3"),
        ];
        assert_eq!(first_divergence(&a, &a.clone()), None);
        let b = vec![
            line(1, "t1", "a1"),
            line(2, "t2", "DIFF"),
            line(3, "DIFF", "DIFF"),
        ];
        assert_eq!(
            first_divergence(&a, &b),
            Some(Divergence {
                step: 2,
                field: "adapter_sha256".into()
            })
        );
        let c = vec![line(1, "t1", "a1"), line(2, "DIFF", "DIFF")];
        assert_eq!(
            first_divergence(&a, &c),
            Some(Divergence {
                step: 2,
                field: "tokens_sha256".into()
            })
        );
        assert_eq!(
            first_divergence(&a, &a[..2]),
            Some(Divergence {
                step: 3,
                field: "missing step".into()
            })
        );
    }
}
