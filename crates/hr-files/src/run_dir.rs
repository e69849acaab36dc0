//! The layout of a training run's folder, in one place: what `train` and `managed-training`
//! write, what the proofs, qualifications and `evaluate` read. A local run keeps its Core
//! context (checkpoints and the list of those reported) in `core/`, laid out as
//! [`local_core`] says.

use std::path::{Path, PathBuf};

/// Names inside a local Core context's folder (`hr_core::CoreContext::local`).
pub mod local_core {
    /// Checkpoint folders, one per UUID.
    pub const CHECKPOINTS_DIR: &str = "checkpoints";
    /// The reported checkpoints, one JSON line each (`uuid`, `steps_completed`, ...).
    pub const CHECKPOINT_LIST: &str = "checkpoints.jsonl";
    /// Reported metrics, one JSON line per report.
    pub const METRICS: &str = "metrics.jsonl";
    /// The number of allocations so far (each start is the next).
    pub const RUNS: &str = "local-runs";
    /// What stands in for the master's searcher: `preemption-acknowledged` and
    /// `searcher-completed` events, one JSON line each.
    pub const EVENTS: &str = "events.jsonl";
}

/// The name of a Determined trial's run folder starts with this: `hr-run-<experiment>-<trial>`.
const MANAGED_PREFIX: &str = "hr-run-";

/// A training run's folder.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct RunDir {
    root: PathBuf,
}

impl RunDir {
    /// The run folder at `root`.
    pub fn new(root: impl Into<PathBuf>) -> Self {
        Self { root: root.into() }
    }

    /// A Determined trial's run folder, which outlives its allocations, inside the checkpoint
    /// storage: `<storage>/hr-run-<experiment>-<trial>`.
    pub fn managed(storage: &Path, experiment: i32, trial: i32) -> Self {
        Self::new(storage.join(format!("{MANAGED_PREFIX}{experiment}-{trial}")))
    }

    /// The experiment and trial of a folder named as [`RunDir::managed`] names them.
    pub fn managed_ids(&self) -> Option<(i32, i32)> {
        let name = self.root.file_name()?.to_str()?;
        let (e, t) = name.strip_prefix(MANAGED_PREFIX)?.split_once('-')?;
        Some((e.parse().ok()?, t.parse().ok()?))
    }

    /// The folder itself.
    pub fn root(&self) -> &Path {
        &self.root
    }

    /// `plan.json`: the plan the run was started with.
    pub fn plan(&self) -> PathBuf {
        self.root.join("plan.json")
    }

    /// `evidence.jsonl`: the evidence stream, one JSON line per step.
    pub fn evidence(&self) -> PathBuf {
        self.root.join("evidence.jsonl")
    }

    /// `metrics.jsonl`: one JSON line per step, `step` and TRL's metric names.
    pub fn metrics(&self) -> PathBuf {
        self.root.join("metrics.jsonl")
    }

    /// `completions.jsonl.gz`: every step's decoded completions with their rewards and
    /// advantages, one gzip member per step.
    pub fn completions(&self) -> PathBuf {
        self.root.join("completions.jsonl.gz")
    }

    /// `tensorboard/`: TensorBoard event files with the metrics rows as scalars (one file per
    /// start; a fresh folder's first file carries the restored history).
    pub fn tensorboard(&self) -> PathBuf {
        self.root.join("tensorboard")
    }

    /// `allocations.jsonl`: every allocation's start (what it restored, its deadline and
    /// budget) and end.
    pub fn allocations(&self) -> PathBuf {
        self.root.join("allocations.jsonl")
    }

    /// `restores.jsonl`: the fixture trial's (`managed-trial cpu`) restore records, one JSON
    /// line per allocation that adopted or refused the checkpoint the master selected.
    pub fn restores(&self) -> PathBuf {
        self.root.join("restores.jsonl")
    }

    /// `report.md` (with its plots beside it), once the plan completed.
    pub fn report(&self) -> PathBuf {
        self.root.join("report.md")
    }

    /// `adapter/`: the finished run's PEFT adapter.
    pub fn adapter(&self) -> PathBuf {
        self.root.join("adapter")
    }

    /// `local-records.jsonl`: what a run outside Determined records in place of the master's
    /// acknowledgements (its checkpoints' publications), one JSON line each.
    pub fn local_records(&self) -> PathBuf {
        self.root.join("local-records.jsonl")
    }

    /// `service.log`: the output of the environment service the run owns.
    pub fn service_log(&self) -> PathBuf {
        self.root.join("service.log")
    }

    /// `core/`: a local run's Core context.
    pub fn core(&self) -> PathBuf {
        self.root.join("core")
    }

    /// `core/checkpoints.jsonl`: the checkpoints a local run reported.
    pub fn checkpoint_list(&self) -> PathBuf {
        self.core().join(local_core::CHECKPOINT_LIST)
    }

    /// `core/checkpoints/<uuid>/`: one of a local run's checkpoints.
    pub fn checkpoint(&self, uuid: &str) -> PathBuf {
        self.core().join(local_core::CHECKPOINTS_DIR).join(uuid)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_managed_run_folder_names_its_experiment_and_trial() {
        let dir = RunDir::managed(Path::new("/storage"), 17, 42);
        assert_eq!(dir.root(), Path::new("/storage/hr-run-17-42"));
        assert_eq!(dir.managed_ids(), Some((17, 42)));
        for other in [
            "/runs/local",
            "/s/hr-run-17",
            "/s/hr-run-a-1",
            "/s/run-17-42",
        ] {
            assert_eq!(RunDir::new(other).managed_ids(), None, "{other}");
        }
    }
}
