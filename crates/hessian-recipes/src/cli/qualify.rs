//! The `qualify` subcommands' arguments: the qualifications a plan passes before it may run long.

use std::path::PathBuf;

use clap::{Args, Subcommand};

#[derive(Debug, Subcommand)]
pub(crate) enum QualifyKind {
    /// The managed CPU lifecycle: the fixture uninterrupted and paused after the step-3 metric,
    /// restored exactly in the next allocation; writes OUTPUT/proof.json and exits non-zero
    /// when anything differs. Starts a local devmaster unless --master is given.
    Cpu(QualifyCpuArgs),
    /// Native resume: the plan uninterrupted, then stopped after --stop-after-step and resumed in
    /// a new process; compares tasks, sampled tokens, rewards, advantages, adapter, optimizer,
    /// trainer state (step, RNG) and data cursor at every step and writes OUTPUT/proof.json
    /// (equal, or the first divergent step and field). Exit 0 when equal, 1 when not.
    Native(QualifyNativeArgs),
    /// Managed recovery: the plan natively and uninterrupted, then as a Determined trial
    /// (`managed-training`) paused once the metric of --pause-after-step is visible, acknowledged,
    /// activated, and restored from exactly the checkpoint in its preempted_at_checkpoint
    /// receipt; every step's evidence must equal the native run's. Both runs use one immutable
    /// copy of this binary (OUTPUT/source/). Starts a local devmaster unless --master is given.
    /// Writes OUTPUT/managed-proof.json; exit 0 when equal, 1 when not.
    Managed(QualifyManagedArgs),
    /// The kill soak: the plan natively, then as a `managed-training` trial on a local devmaster
    /// (its own process) whose worker is SIGKILLed --kills times at seeded random moments and
    /// whose master is SIGKILLed and restarted once midway. The trial must complete, the master
    /// must keep every checkpoint it had acknowledged, and the evidence must equal the native
    /// run's at every step. Writes OUTPUT/soak.json; exit 0 when all hold.
    Soak(QualifySoakArgs),
    /// An OpenEnv plan's qualification, as the gate reads it: `qualify native` into
    /// OUTPUT/native, then (when equal) `qualify managed --native-proof` into OUTPUT/managed, and
    /// both proofs re-checked. `--proofs OUTPUT` then admits long runs of the plan's family.
    /// Exit 0 when both are equal.
    Openenv(QualifyBackendArgs),
    /// A NeMo Gym plan's qualification, as for `qualify openenv`.
    Nemo(QualifyBackendArgs),
}

#[derive(Debug, Args)]
pub(crate) struct QualifyBackendArgs {
    /// The plan (its environment must be of this backend).
    #[arg(long)]
    pub(crate) plan: PathBuf,
    /// The proofs folder: its native/ and managed/ are written and must not exist yet (the
    /// folder may hold the plan).
    #[arg(long)]
    pub(crate) output: PathBuf,
    #[command(flatten)]
    pub(crate) trial: TrialArgs,
}

/// Where and how a qualification's managed trial runs.
#[derive(Debug, Args)]
pub(crate) struct TrialArgs {
    /// A Determined master to use instead of a local devmaster (http(s)://HOST:PORT, or HOST:PORT
    /// for http, as `det` reads `DET_MASTER`). Sign-in: `DET_USER_TOKEN`, else the token
    /// `det user login` cached, else `DET_USER`/`DET_PASS`. TLS as `det`: the web roots plus
    /// DET_MASTER_CERT_FILE (a PEM bundle, or `noverify`), checked against DET_MASTER_CERT_NAME.
    #[arg(long, env = "DET_MASTER")]
    pub(crate) master: Option<String>,
    /// Backend of the native run and of the trial's `managed-training`.
    #[arg(long, value_enum, default_value_t = crate::backend::DeviceKind::Cpu)]
    pub(crate) device: crate::backend::DeviceKind,
    /// Limit for each wait and the trial's --max-wall-seconds, seconds.
    #[arg(long, default_value_t = 2400)]
    pub(crate) timeout_seconds: u64,
}

#[derive(Debug, Args)]
pub(crate) struct QualifySoakArgs {
    /// The plan (one that checkpoints often; a fixture plan needs no service).
    #[arg(long)]
    pub(crate) plan: PathBuf,
    /// Fresh output folder (reference/, checkpoints/, devmaster/, soak.json).
    #[arg(long)]
    pub(crate) output: PathBuf,
    /// Worker kills to deliver.
    #[arg(long, default_value_t = 20)]
    pub(crate) kills: u32,
    /// Seed of the kill moments.
    #[arg(long, default_value_t = 1)]
    pub(crate) seed: u64,
    /// Limit for the soak, seconds.
    #[arg(long, default_value_t = 1800)]
    pub(crate) timeout_seconds: u64,
}

#[derive(Debug, Args)]
pub(crate) struct QualifyManagedArgs {
    /// The plan.
    #[arg(long)]
    pub(crate) plan: PathBuf,
    /// Fresh output folder (source/, reference/, managed/, managed-proof.json).
    #[arg(long)]
    pub(crate) output: PathBuf,
    #[command(flatten)]
    pub(crate) trial: TrialArgs,
    /// Pause once the training metric of this step is visible. As the seed's recovery point,
    /// the pause lands while the next step runs and the worker saves and stops there (default:
    /// sent after step 1, stopped at step 2); the first allocation holds after that next step
    /// until the stop arrives (HR_FAULT_HOLD_AT), so it stops exactly there however fast the
    /// steps are. The proof records both steps.
    #[arg(long, default_value_t = 1)]
    pub(crate) pause_after_step: u64,
    /// The native qualification's proof of this plan, made by this binary (`qualify native
    /// --output DIR` writes DIR/proof.json): its uninterrupted run is the reference, so no
    /// native run is made here and the managed half needs no device on this machine (a
    /// zero-GPU shell: the trial gets the GPU). Without it a native reference run comes first.
    #[arg(long, value_name = "FILE")]
    pub(crate) native_proof: Option<PathBuf>,
    /// Instead of pausing, SIGKILL the worker in the middle of the save of this step (a plan
    /// that saves every step); with `max_restarts: 1` the restart must restore the step before
    /// it (the last sealed checkpoint) and still equal the native run.
    #[arg(long, conflicts_with = "kill_rank_at")]
    pub(crate) kill_during_save_at: Option<u64>,
    /// Run the trial as N ranks, one per slot (resources.slots_per_trial N, `hessian-recipes
    /// launch --` before the entrypoint); N must divide the plan's parallel.shards. The
    /// reference runs as one rank, so EQUAL also shows the rank count changed no bit.
    #[arg(long, default_value_t = 1)]
    pub(crate) ranks: usize,
    /// Instead of pausing, SIGKILL rank 1 as this step starts (with --ranks 2 or more and a plan
    /// that saves every step): the launcher fails the allocation, and with `max_restarts: 1` the
    /// restart must restore the step before it and still equal the reference.
    #[arg(long)]
    pub(crate) kill_rank_at: Option<u64>,
}

#[derive(Debug, Args)]
pub(crate) struct QualifyNativeArgs {
    /// The plan.
    #[arg(long)]
    pub(crate) plan: PathBuf,
    /// Fresh output folder (reference/, interrupted/, resumed/, proof.json).
    #[arg(long)]
    pub(crate) output: PathBuf,
    /// Where the interrupted run stops.
    #[arg(long, default_value_t = 2)]
    pub(crate) stop_after_step: u64,
    /// A negative control applied at resume, which the proof must catch: skip-rng (re-seed the
    /// sampling RNG), drop-optimizer (optimizer moments removed: refused at load),
    /// cursor-off-by-one.
    #[arg(long, value_parser = hr_proof::Control::parse)]
    pub(crate) control: Option<hr_proof::Control>,
    /// Backend of the three runs (CUDA runs are not promised to be bit-exact).
    #[arg(long, value_enum, default_value_t = crate::backend::DeviceKind::Cpu)]
    pub(crate) device: crate::backend::DeviceKind,
}

#[derive(Debug, Args)]
pub(crate) struct QualifyCpuArgs {
    /// Fresh output folder (the binary is copied into OUTPUT/source/ and run from there).
    #[arg(long)]
    pub(crate) output: PathBuf,
    /// A Determined master to use instead of a local devmaster (http(s)://HOST:PORT, or HOST:PORT
    /// for http, as `det` reads `DET_MASTER`). Sign-in: `DET_USER_TOKEN`, else the token
    /// `det user login` cached, else `DET_USER`/`DET_PASS`. TLS as `det`: the web roots plus
    /// DET_MASTER_CERT_FILE (a PEM bundle, or `noverify`), checked against DET_MASTER_CERT_NAME.
    #[arg(long, env = "DET_MASTER")]
    pub(crate) master: Option<String>,
    /// Pause once the training metric of this step is visible (1 to 7: the fixture has 8 steps).
    #[arg(long, default_value_t = 3,
          value_parser = clap::value_parser!(u64).range(1..hr_qualify::CPU_FIXTURE_STEPS))]
    pub(crate) pause_after_step: u64,
    /// Wait this long after that metric before pausing.
    #[arg(long, default_value_t = 0)]
    pub(crate) pause_delay_ms: u64,
    /// Seconds per fixture step (0 to 3600).
    #[arg(long, default_value_t = 0.5, value_parser = seconds)]
    pub(crate) step_seconds: f64,
    /// Limit for each run, seconds.
    #[arg(long, default_value_t = 600)]
    pub(crate) timeout_seconds: u64,
    /// A negative control that the qualification must catch: skip-rng-restore (proof must say
    /// equal: false), stale-uuid (must fail), kill-during-save (must recover and stay equal).
    #[arg(long)]
    pub(crate) control: Option<String>,
}

/// The longest fixture step: an hour (a longer one would only stall the qualification, and a
/// huge one overflows a `Duration`).
const MAX_STEP_SECONDS: f64 = 3600.0;

/// A duration in seconds: a number from 0 to [`MAX_STEP_SECONDS`].
fn seconds(text: &str) -> Result<f64, String> {
    match text.parse::<f64>() {
        Ok(v) if (0.0..=MAX_STEP_SECONDS).contains(&v) => Ok(v),
        _ => Err(format!(
            "`{text}` is not a number of seconds from 0 to {MAX_STEP_SECONDS} (e.g. 0.5)"
        )),
    }
}
