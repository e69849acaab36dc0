//! Adopting a finished run's checkpoints for evaluation: the ones the plan's `evaluation`
//! section lists, found in a `train` run folder or a managed run folder, each verified in full
//! (seal and trust, manifest, payload digests, plan digest, step, run identity, base model). A
//! missing, tampered or foreign one is an error, never a skip.

use std::path::{Path, PathBuf};

use hr_plan::Plan;
use hr_seal::{Expectations, Trust, verify};
use serde::Serialize;

use crate::evaluation::evaluation;
use crate::listing::{Listed, listed};
use hr_train::{BASE_MODEL_FILE, BaseModel, NATIVE_DIR, TrainError};

/// A verified checkpoint of the run.
#[derive(Debug, Clone, Serialize)]
pub struct Adopted {
    /// Its step.
    pub step: u64,
    /// Its UUID.
    pub uuid: String,
    /// sha256 of its manifest.
    pub manifest_sha256: String,
    /// Its folder.
    #[serde(skip)]
    pub dir: PathBuf,
    /// What was verified (files are read through it, so what is loaded is what was verified).
    #[serde(skip)]
    pub verified: hr_seal::Verified,
}

/// Verifies every checkpoint the plan's evaluation lists in the run folder `run_dir` (a `train`
/// output folder, or a managed run folder in its checkpoint storage): seal, manifest, payload
/// digests, the plan's digest, the step, one run identity across all of them, and the base model
/// they were trained on (the plan's `model.path` now); with trusted keys, a seal signed by one
/// of them. Two
/// checkpoints of the run at one step are refused, not chosen between.
pub fn adopt(run_dir: &Path, plan: &Plan, trust: &Trust) -> Result<Vec<Adopted>, TrainError> {
    let eval = evaluation(plan)?;
    let (listed, mut run_id) = listed(run_dir, plan)?;
    let base = BaseModel::of(&plan.model.path)?;
    let local = run_id.is_none();
    let mut adopted = Vec::new();
    for &step in &eval.checkpoints {
        let refuse = |reason: String| TrainError::Checkpoint { step, reason };
        let at_step: Vec<&Listed> = listed.iter().filter(|(_, s, _)| *s == step).collect();
        // A local run lists reports in order: the latest report of a step counts.
        let (uuid, _, dir) = match (at_step.as_slice(), local) {
            ([], _) => {
                return Err(refuse(format!(
                    "none is kept in {} (a local run keeps its latest checkpoints.keep_last and \
                     the steps its plan's evaluation.checkpoints named while it trained)",
                    run_dir.display()
                )));
            }
            ([.., last], true) | ([last], false) => *last,
            (many, false) => {
                return Err(refuse(format!(
                    "{} checkpoints of this run are at that step: {}",
                    many.len(),
                    many.iter()
                        .map(|l| l.0.as_str())
                        .collect::<Vec<_>>()
                        .join(", ")
                )));
            }
        };
        let expect = Expectations {
            run_id: run_id.clone(),
            config_sha256: Some(plan.sha256()),
            step: Some(step),
            trust: trust.clone(),
            source: None,
        };
        let verified = verify(dir, &expect).map_err(|e| refuse(e.to_string()))?;
        for file in [hr_policy::ADAPTER_CONFIG, hr_policy::ADAPTER_WEIGHTS] {
            let sealed = format!("{}/{file}", NATIVE_DIR);
            if !verified.manifest.files.iter().any(|f| f.path == sealed) {
                return Err(refuse(format!("its manifest seals no {file}")));
            }
        }
        let sealed: BaseModel = verified
            .read_file(BASE_MODEL_FILE)
            .ok()
            .and_then(|b| serde_json::from_slice(&b).ok())
            .ok_or_else(|| refuse("its payload has no readable base_model.json".to_owned()))?;
        if let Some(what) = sealed.difference(&base) {
            return Err(refuse(format!(
                "it was trained on another base model than the plan's model.path: {what}"
            )));
        }
        run_id.get_or_insert_with(|| verified.manifest.run.run_id.clone());
        adopted.push(Adopted {
            step,
            uuid: uuid.clone(),
            manifest_sha256: verified.manifest_sha256.clone(),
            dir: dir.clone(),
            verified,
        });
    }
    Ok(adopted)
}
