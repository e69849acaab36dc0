//! Adopting a finished run's checkpoints for evaluation: the ones the plan's `evaluation`
//! section lists, found in a `train` run folder or a managed run folder, each verified in full
//! (seal and trust, manifest, payload digests, plan digest, step, run identity, base model). A
//! missing, tampered or foreign one is an error, never a skip.

use hr_files::IoResultExt;
use std::path::{Path, PathBuf};

use hr_plan::{Evaluation, Plan};
use hr_seal::{Expectations, Trust, verify};
use serde::Serialize;

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

/// The plan's evaluation section, or why there is none.
pub fn evaluation(plan: &Plan) -> Result<&Evaluation, TrainError> {
    plan.evaluation.as_ref().ok_or_else(|| {
        TrainError::Refused(format!(
            "plan `{}` has no `evaluation` section: add {{\"checkpoints\": [...], \"dev\": ..., \
             \"held_out\": ...}} before training (see plans/README.md)",
            plan.name
        ))
    })
}

/// A checkpoint a run folder lists: UUID, step, folder.
type Listed = (String, u64, PathBuf);

/// The checkpoints of a `train` run folder (its `core/checkpoints.jsonl`) with no run id to
/// expect, or of a managed run folder `<storage>/hr-run-<experiment>-<trial>` (the checkpoints
/// in `<storage>` whose manifest names this trial's run) with that run id.
fn listed(run_dir: &Path, plan: &Plan) -> Result<(Vec<Listed>, Option<String>), TrainError> {
    let layout = hr_files::RunDir::new(run_dir);
    if layout.checkpoint_list().is_file() {
        return Ok((local_chain(run_dir, 0)?, None));
    }
    let trial = hr_files::RunDir::new(run_dir).managed_ids();
    let (Some((experiment, trial)), Some(storage)) = (trial, run_dir.parent()) else {
        return Err(TrainError::Refused(format!(
            "{}: not a run folder: give a `train` output folder or a managed run folder \
             <checkpoint storage>/hr-run-<experiment>-<trial>",
            run_dir.display()
        )));
    };
    let run_id = hr_train::managed_run_id(&plan.name, experiment, trial);
    let entries = std::fs::read_dir(storage).at("list", storage)?;
    let mut list = Vec::new();
    for entry in entries.flatten() {
        let dir = entry.path();
        let json = |file: &str| -> Option<serde_json::Value> {
            serde_json::from_slice(&std::fs::read(dir.join(file)).ok()?).ok()
        };
        let (Some(meta), Some(manifest)) = (json("metadata.json"), json("MANIFEST.json")) else {
            continue;
        };
        if manifest["run"]["run_id"] != run_id.as_str() {
            continue;
        }
        if let Some(step) = meta["steps_completed"].as_u64() {
            list.push((entry.file_name().to_string_lossy().into_owned(), step, dir));
        }
    }
    Ok((list, Some(run_id)))
}

/// How many resumes back [`local_chain`] follows (a chain longer than any real run's; a cycle
/// of folders stops there).
const MAX_RESUMES: usize = 64;

/// The checkpoints of the `train` run folder `run_dir` in report order, preceded by those of the
/// runs it was resumed from (`train --resume A --output B` copies only A's latest checkpoint into
/// B; its earlier steps are still A's): each source's checkpoints up to the step it was resumed
/// from, so a later report of a step (the resumed run's own) counts.
fn local_chain(run_dir: &Path, depth: usize) -> Result<Vec<Listed>, TrainError> {
    let layout = hr_files::RunDir::new(run_dir);
    let own = hr_core::local_checkpoints(&layout.core())?
        .into_iter()
        .map(|(uuid, step)| {
            let dir = layout.checkpoint(&uuid);
            (uuid, step, dir)
        });
    // `<source run>/core/checkpoints/<uuid>`: a checkpoint of another run folder.
    let source = hr_core::local_import_source(&layout.core())?.and_then(|(from, step)| {
        let run = from.parent()?.parent()?.parent()?;
        (hr_files::RunDir::new(run).checkpoint_list().is_file() && depth < MAX_RESUMES)
            .then(|| (run.to_owned(), step))
    });
    let mut list = match source {
        Some((run, step)) => local_chain(&run, depth + 1)?
            .into_iter()
            .filter(|(_, s, _)| *s < step)
            .collect(),
        None => Vec::new(),
    };
    list.extend(own);
    Ok(list)
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
            ([], _) => return Err(refuse(format!("none is listed in {}", run_dir.display()))),
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
