//! The checkpoints a finished run's folder lists: a `train` output folder's
//! `core/checkpoints.jsonl` along its resume chain, or a managed run folder's checkpoints in its
//! storage; read, not verified (`adopt.rs` verifies those it adopts).

use std::path::{Path, PathBuf};

use hr_files::IoResultExt;
use hr_plan::Plan;
use hr_train::TrainError;

/// A checkpoint a run folder lists: UUID, step, folder.
pub(crate) type Listed = (String, u64, PathBuf);

/// The checkpoints of a `train` run folder (its `core/checkpoints.jsonl`) with no run id to
/// expect, or of a managed run folder `<storage>/hr-run-<experiment>-<trial>` (the checkpoints
/// in `<storage>` whose manifest names this trial's run) with that run id.
pub(crate) fn listed(
    run_dir: &Path,
    plan: &Plan,
) -> Result<(Vec<Listed>, Option<String>), TrainError> {
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

/// The steps of the checkpoints the run in `run_dir` lists, ascending, each once.
pub(crate) fn saved_steps(run_dir: &Path, plan: &Plan) -> Result<Vec<u64>, TrainError> {
    let mut steps: Vec<u64> = listed(run_dir, plan)?.0.into_iter().map(|l| l.1).collect();
    steps.sort_unstable();
    steps.dedup();
    Ok(steps)
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
