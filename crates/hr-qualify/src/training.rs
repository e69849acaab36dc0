//! The managed half of a training qualification: the `managed-training` entrypoint as a trial on
//! the devmaster (or a real master), paused once an optimizer-step metric is visible (step 1 by
//! default); the pause lands while the next step runs, and the worker saves at that step (2),
//! stops its service, publishes, writes its durable receipt and acknowledges; the
//! experiment is PAUSED; it is activated again; the next allocation must restore exactly the
//! receipt's checkpoint and finish. Comparing the evidence with a native run is the caller's.

use hr_files::{IoResultExt, RunDir};
use std::path::{Path, PathBuf};
use std::time::Duration;

use hr_det::{Client, wire::CheckpointSortBy, wire::State};
use hr_proof::{AllocationRecord, Interruption};

use crate::QualifyError;
use crate::driver::{activate, ending, pause, profile_for, start_master, start_run, wait_terminal};

/// What to run.
#[derive(Debug, Clone)]
pub struct ManagedOptions {
    /// Fresh output folder: `checkpoints/` (the trial's storage), `devmaster/`,
    /// `launch-config.yaml`.
    pub output: PathBuf,
    /// The checkout (for the local cluster profile).
    pub root: PathBuf,
    /// A real master; `None` starts a devmaster in `output/devmaster`.
    pub master: Option<String>,
    /// The trial's entrypoint (`.../hessian-recipes managed-training --plan ...`).
    pub entrypoint: Vec<String>,
    /// The plan's steps (the searcher's length).
    pub steps: u64,
    /// Request one GPU slot (with the GPU environment policy) for the trial; else zero slots.
    pub gpu: bool,
    /// Pause once the training metric of this step is visible.
    pub pause_after_step: u64,
    /// Limit for each wait.
    pub timeout: Duration,
    /// Instead of a pause: the worker is SIGKILLed in the middle of the save of this step (run
    /// 1); `max_restarts: 1` must recover it from the last sealed checkpoint.
    pub kill_during_save_at: Option<u64>,
    /// The trial's ranks, one per slot (`hessian-recipes launch` is already the entrypoint's
    /// first word when more than one); 1 is one process.
    pub ranks: usize,
    /// Instead of a pause: rank 1 is SIGKILLed as this step starts (run 1), the chief waiting
    /// for it inside the step; the launcher fails the allocation and `max_restarts: 1` must
    /// recover it from the last sealed checkpoint.
    pub kill_rank_at: Option<u64>,
}

/// A kill that replaces the pause, at a step of the first allocation.
#[derive(Debug, Clone, Copy)]
enum Kill {
    /// The chief in the middle of that step's save (`HR_FAULT_KILL_AT`).
    DuringSave(u64),
    /// Rank 1 as that step starts (`HR_FAULT_KILL_RANK`).
    RankMidStep(u64),
}

impl Kill {
    fn step(self) -> u64 {
        match self {
            Kill::DuringSave(step) | Kill::RankMidStep(step) => step,
        }
    }

    /// The fault variable that makes it happen.
    fn variable(self) -> &'static str {
        match self {
            Kill::DuringSave(_) => "HR_FAULT_KILL_AT",
            Kill::RankMidStep(_) => "HR_FAULT_KILL_RANK",
        }
    }

    /// Its name in the proof.
    fn kind(self) -> &'static str {
        match self {
            Kill::DuringSave(_) => "kill-during-save",
            Kill::RankMidStep(_) => "kill-rank-mid-step",
        }
    }
}

impl ManagedOptions {
    /// The kill that replaces the pause, if any.
    fn kill(&self) -> Option<Kill> {
        match (self.kill_during_save_at, self.kill_rank_at) {
            (Some(step), _) => Some(Kill::DuringSave(step)),
            (None, Some(step)) => Some(Kill::RankMidStep(step)),
            (None, None) => None,
        }
    }
}

/// What the managed run did.
#[derive(Debug, Clone)]
pub struct ManagedRecovery {
    /// The experiment.
    pub experiment_id: i32,
    /// The trial.
    pub trial_id: i32,
    /// The trial's run folder (`<storage>/hr-run-<experiment>-<trial>`).
    pub run_dir: PathBuf,
    /// The pause and the restore.
    pub interruption: Interruption,
    /// Checkpoints the master lists for the experiment.
    pub checkpoints_listed: u64,
    /// The version the master reported.
    pub master_version: String,
    /// The master's URL.
    pub master_url: String,
}

fn launch_config(opts: &ManagedOptions, storage: &Path) -> Result<String, QualifyError> {
    let mut config = hr_config::training_experiment(
        &profile_for(opts.master.as_deref(), &opts.root),
        "hessian-recipes managed training qualification".to_owned(),
        opts.entrypoint.clone(),
        opts.gpu,
        opts.steps,
    );
    // Where the qualifier reads them back; every checkpoint survives garbage collection.
    config.checkpoint_storage = Some(
        hr_config::CheckpointStorage::directory(storage.display().to_string())
            .retaining_latest(u32::try_from(opts.steps).unwrap_or(u32::MAX)),
    );
    if opts.ranks > 1 {
        config.resources.slots_per_trial = Some(u32::try_from(opts.ranks).unwrap_or(u32::MAX));
    }
    let variables = &mut config.environment.environment_variables;
    match opts.kill() {
        Some(kill) => {
            variables.push(format!("{}=1:{}", kill.variable(), kill.step()));
            config.max_restarts = 1;
        }
        // The seed's recovery point: the pause is sent once step k's metric is visible and
        // lands while step k + 1 runs, so the worker saves and stops at k + 1. The first
        // allocation holds after step k + 1 until the stop arrives, so that is where it lands
        // however fast the steps are (without it a 4-step tiny run can finish first).
        None => variables.push(format!("HR_FAULT_HOLD_AT=1:{}", opts.pause_after_step + 1)),
    }
    use hr_config::YamlConfig;
    Ok(config.to_yaml()?)
}

/// Runs the managed recovery; fails unless the run paused, restored the receipt's checkpoint
/// in the trial's second allocation, and completed.
pub async fn managed_recovery(opts: &ManagedOptions) -> Result<ManagedRecovery, QualifyError> {
    let storage = opts.output.join("checkpoints");
    std::fs::create_dir_all(&storage).at("create", &storage)?;
    let yaml = launch_config(opts, &storage)?;
    let path = opts.output.join("launch-config.yaml");
    std::fs::write(&path, &yaml).at("write", &path)?;
    // A GPU trial asks for one slot: the local GPU.
    let slots = u32::try_from(opts.ranks)
        .unwrap_or(u32::MAX)
        .max(u32::from(opts.gpu));
    let (master, url) = start_master(&opts.output, opts.master.as_deref(), slots).await?;
    let result = drive(opts, &url, &yaml, &storage).await;
    if let Some(m) = master {
        m.shutdown();
    }
    result
}

async fn drive(
    opts: &ManagedOptions,
    url: &str,
    yaml: &str,
    storage: &Path,
) -> Result<ManagedRecovery, QualifyError> {
    let mut client = Client::new(url)?;
    client.sign_in_from_env().await?;
    let run = start_run(&client, yaml).await?;
    let run_dir = RunDir::managed(storage, run.experiment, run.trial);
    // The pause, or nothing when the fault is a kill in the middle of a save.
    let receipt = match opts.kill() {
        Some(_) => None,
        None => {
            let receipt = pause(
                &client,
                &run,
                opts.pause_after_step,
                Duration::ZERO,
                run_dir.root(),
                opts.timeout,
            )
            .await?;
            activate(&client, &run).await?;
            Some(receipt)
        }
    };
    let end = wait_terminal(&client, &run, opts.timeout).await?;
    let records = hr_proof::read_allocations(&run_dir.allocations())?;
    let restore = records
        .iter()
        .filter_map(AllocationRecord::started)
        .find(|r| r.trial_run_id == 2)
        .ok_or_else(|| {
            QualifyError::Failed(format!(
                "no second allocation restored anything; the run ended {} ({})",
                end.as_str(),
                records
                    .iter()
                    .map(AllocationRecord::to_string)
                    .collect::<Vec<_>>()
                    .join("; ")
            ))
        })?;
    let restored_uuid = restore.restored_uuid.clone().unwrap_or_default();
    let restored_step = restore.restored_step.unwrap_or(0);
    let interruption = match (receipt, opts.kill()) {
        (Some(receipt), _) => {
            if receipt.step != opts.pause_after_step + 1 {
                return Err(QualifyError::Failed(format!(
                    "the pause sent after step {}'s metric stopped the worker at step {}, not at \
                     the next step ({})",
                    opts.pause_after_step,
                    receipt.step,
                    opts.pause_after_step + 1
                )));
            }
            if restored_uuid != receipt.uuid {
                return Err(QualifyError::Failed(format!(
                    "the second allocation restored checkpoint {restored_uuid:?} but the receipt names {}",
                    receipt.uuid
                )));
            }
            Interruption {
                kind: "pause".into(),
                step: receipt.step,
                uuid_at_pause: Some(receipt.uuid),
                paused_allocation: receipt.allocation,
                uuid_at_restore: restored_uuid,
                restored_allocation: restore.allocation.clone(),
                restored_run_id: 2,
                pause_sent_after_step: Some(opts.pause_after_step),
            }
        }
        (None, kill) => {
            let (killed, kind) = kill.map_or((0, "kill"), |k| (k.step(), k.kind()));
            // The half-written save of the killed step, or the step a rank died in, must never
            // be adopted.
            if restored_step + 1 != killed {
                return Err(QualifyError::Failed(format!(
                    "after a {kind} at step {killed} the restart restored step {restored_step}"
                )));
            }
            Interruption {
                kind: kind.into(),
                step: restored_step,
                uuid_at_pause: None,
                paused_allocation: records
                    .first()
                    .map(|r| r.allocation().to_owned())
                    .unwrap_or_default(),
                uuid_at_restore: restored_uuid,
                restored_allocation: restore.allocation.clone(),
                restored_run_id: 2,
                pause_sent_after_step: None,
            }
        }
    };
    if end != State::Completed {
        return Err(QualifyError::Failed(format!(
            "the managed run ended {}",
            ending(&client, &run, end).await
        )));
    }
    let listed = client
        .list_checkpoints(run.experiment, CheckpointSortBy::BatchNumber, false)
        .await?;
    Ok(ManagedRecovery {
        experiment_id: run.experiment,
        trial_id: run.trial,
        interruption,
        checkpoints_listed: listed.checkpoints.len() as u64,
        master_version: client.info().await?.version,
        master_url: client.master().to_owned(),
        run_dir: run_dir.root().to_owned(),
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    fn options(master: Option<&str>, gpu: bool) -> ManagedOptions {
        ManagedOptions {
            output: PathBuf::from("/tmp/q"),
            root: PathBuf::from("/tmp/checkout"),
            master: master.map(str::to_owned),
            entrypoint: vec!["hr".into(), "managed-training".into()],
            steps: 4,
            gpu,
            pause_after_step: 2,
            timeout: Duration::from_secs(60),
            kill_during_save_at: None,
            ranks: 1,
            kill_rank_at: None,
        }
    }

    #[test]
    fn a_cuda_qualification_asks_for_one_gpu_and_a_cpu_one_for_none() {
        for (master, gpu, slots) in [
            (None, false, "slots_per_trial: 0"),
            (
                Some("https://master.example:8443"),
                true,
                "slots_per_trial: 1",
            ),
        ] {
            let yaml = launch_config(&options(master, gpu), Path::new("/tmp/q/checkpoints"))
                .expect("config");
            assert!(yaml.contains(slots), "{slots} missing from:\n{yaml}");
            assert!(yaml.contains("batches: 4"), "{yaml}");
            assert!(yaml.contains("/tmp/q/checkpoints"), "{yaml}");
        }
    }
}
