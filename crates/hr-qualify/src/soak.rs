//! The kill soak: a `managed-training` trial on a local devmaster whose worker is SIGKILLed again
//! and again at seeded random moments (while loading and restoring, stepping or saving: 0 to 3
//! steps after its restore, then 0 to 200 ms), and whose master is
//! itself killed and restarted once in the middle. With `max_restarts` above the number of kills
//! the trial must still complete; every restart restores the last sealed checkpoint (a save cut
//! short is never adopted), and the master's restart loses no checkpoint or metric it had
//! acknowledged. [`SoakQualification`] runs the plan's native uninterrupted reference first and
//! judges the soak's evidence against it, writing `soak.json`.

use hr_files::IoResultExt;
use std::path::{Path, PathBuf};
use std::time::{Duration, Instant};

use std::io::{BufRead, BufReader};
use std::process::{Child, Command, Stdio};

use hr_det::Client;
use hr_files::RunDir;
use hr_plan::Plan;
use hr_proof::{AllocationStart, read_allocation_starts};
use serde::Serialize;

use crate::QualifyError;
use crate::driver::{Run, poll, poll_run, profile_for, start_run, state_of, wait_terminal};

/// What to run.
#[derive(Debug, Clone)]
pub struct SoakOptions {
    /// Fresh output folder: `checkpoints/` (the trial's storage), `devmaster/`.
    pub output: PathBuf,
    /// The checkout (for the local cluster profile).
    pub root: PathBuf,
    /// The trial's entrypoint (`.../hessian-recipes managed-training --plan ...`).
    pub entrypoint: Vec<String>,
    /// The plan's steps.
    pub steps: u64,
    /// Worker kills to deliver.
    pub kills: u32,
    /// Seed of the kill moments.
    pub seed: u64,
    /// Limit for the whole soak.
    pub timeout: Duration,
}

/// What the soak did.
#[derive(Debug, Clone)]
pub struct SoakReport {
    /// The trial's run folder.
    pub run_dir: PathBuf,
    /// SIGKILLs delivered to a live worker.
    pub kills: u32,
    /// Allocations the trial had: the first, one per kill, and one more when the master's
    /// restart replaced an allocation its predecessor had just started.
    pub allocations: usize,
    /// Checkpoints the master listed before it was killed, all still listed after its restart.
    pub checkpoints_kept_over_master_restart: usize,
    /// Training-metric reports the master held before it was killed, all still held after.
    pub metrics_kept_over_master_restart: usize,
    /// Wall time.
    pub seconds: f64,
}

/// SplitMix64: the kill moments depend only on the seed.
fn next(state: &mut u64) -> u64 {
    *state = state.wrapping_add(0x9E37_79B9_7F4A_7C15);
    let mut z = *state;
    z = (z ^ (z >> 30)).wrapping_mul(0xBF58_476D_1CE4_E5B9);
    z = (z ^ (z >> 27)).wrapping_mul(0x94D0_49BB_1331_11EB);
    z ^ (z >> 31)
}

/// The allocation start records of the run folder.
fn starts(run_dir: &RunDir) -> Result<Vec<AllocationStart>, QualifyError> {
    Ok(read_allocation_starts(&run_dir.allocations())?)
}

/// A devmaster as its own process (`<binary> devmaster`), so that killing it is a real crash:
/// its trial processes live on, as they would on a cluster node.
fn spawn_master(binary: &str, output: &Path) -> Result<(Child, String), QualifyError> {
    let state = output.join("devmaster");
    let mut child = Command::new(binary)
        .args(["devmaster", "--listen", "127.0.0.1:0", "--state-dir"])
        .arg(&state)
        .stdout(Stdio::piped())
        .stderr(Stdio::null())
        .spawn()
        .at("start the devmaster", binary)?;
    let stdout = child
        .stdout
        .take()
        .ok_or_else(|| QualifyError::Failed("the devmaster has no stdout".into()))?;
    let mut first = String::new();
    BufReader::new(stdout)
        .read_line(&mut first)
        .at("read the devmaster's address from", binary)?;
    let url = first
        .split_whitespace()
        .find(|w| w.starts_with("http://"))
        .ok_or_else(|| QualifyError::Failed(format!("the devmaster printed {first:?}")))?
        .to_owned();
    Ok((child, url))
}

fn sigkill(pid: u32, what: &str) -> Result<(), QualifyError> {
    let pid = i32::try_from(pid)
        .ok()
        .and_then(rustix::process::Pid::from_raw)
        .ok_or_else(|| QualifyError::Failed(format!("{what}: no pid")))?;
    rustix::process::kill_process(pid, rustix::process::Signal::KILL)
        .map_err(|e| QualifyError::Failed(format!("{what} ({pid:?}) was not running: {e}")))
}

/// Steps the run folder's evidence records so far.
fn steps_done(run_dir: &RunDir) -> u64 {
    std::fs::read_to_string(run_dir.evidence()).map_or(0, |t| t.lines().count() as u64)
}

async fn signed_in(url: &str) -> Result<Client, QualifyError> {
    let mut client = Client::new(url)?;
    client.sign_in_from_env().await?;
    Ok(client)
}

/// The training metrics the master holds for the trial: (allocation run, step) pairs.
async fn metric_keys(client: &Client, run: &Run) -> Result<Vec<(i32, i32)>, QualifyError> {
    Ok(client
        .trial_metrics(run.trial, "training")
        .await?
        .iter()
        .map(|m| (m.trial_run_id, m.total_batches))
        .collect())
}

async fn checkpoint_uuids(client: &Client, run: &Run) -> Result<Vec<String>, QualifyError> {
    let list = client
        .list_checkpoints(run.experiment, hr_det::wire::CheckpointSortBy::Uuid, false)
        .await?;
    Ok(list.checkpoints.into_iter().map(|c| c.uuid).collect())
}

/// Runs the soak; fails unless every kill hit a live worker, the master's restart kept what it
/// had acknowledged, and the trial completed.
pub async fn kill_soak(opts: &SoakOptions) -> Result<SoakReport, QualifyError> {
    let started = Instant::now();
    let storage = opts.output.join("checkpoints");
    std::fs::create_dir_all(&storage).at("create", &storage)?;
    let mut config = hr_config::training_experiment(
        &profile_for(None, &opts.root),
        "hessian-recipes kill soak".to_owned(),
        opts.entrypoint.clone(),
        false,
        opts.steps,
    );
    config.checkpoint_storage = Some(
        hr_config::CheckpointStorage::directory(storage.display().to_string())
            .retaining_latest(u32::MAX),
    );
    // One restart per kill, and one for the allocation the master's restart replaces.
    config.max_restarts = opts.kills + 2;
    let yaml = {
        use hr_config::YamlConfig;
        config.to_yaml()?
    };
    let binary = opts
        .entrypoint
        .first()
        .ok_or_else(|| QualifyError::Failed("an empty entrypoint".into()))?
        .clone();
    let (mut devmaster, url) = spawn_master(&binary, &opts.output)?;
    let mut client = signed_in(&url).await?;
    let run = start_run(&client, &yaml).await?;
    let run_dir = RunDir::managed(&storage, run.experiment, run.trial);
    let mut rng = opts.seed;
    let (mut kept, mut kept_metrics) = (0, 0);
    // Start records already dealt with (killed, or replaced before the kill landed).
    let mut seen = 0usize;
    let mut kills = 0;
    while kills < opts.kills {
        // The newest allocation (its start record names its pid).
        let waiting = format!("allocation {} to start", seen + 1);
        let (index, record) = poll(&waiting, opts.timeout, || async {
            let all = starts(&run_dir)?;
            if all.len() > seen {
                let last = all.len() - 1;
                return Ok(Some((last, all[last].clone())));
            }
            let state = state_of(&client, &run).await?;
            if state.is_terminal() {
                return Err(QualifyError::Failed(format!(
                    "the trial ended {} after {kills} of {} kills: give a longer plan",
                    state.as_str(),
                    opts.kills
                )));
            }
            Ok(None)
        })
        .await?;
        seen = index + 1;
        let pid = record.pid;
        // The moment, independent of how fast a step is: after 0 to 3 further steps of this
        // allocation (0: while it loads and restores), then 0 to 200 ms into the next step or
        // save.
        let restored = record.restored_step.unwrap_or(0);
        let target = restored + next(&mut rng) % 4;
        poll_run(
            &client,
            &run,
            &format!("step {target}"),
            opts.timeout,
            || async {
                let done = steps_done(&run_dir);
                let replaced = starts(&run_dir)?.len() > seen;
                Ok((done >= target || replaced).then_some(()))
            },
        )
        .await?;
        tokio::time::sleep(Duration::from_millis(next(&mut rng) % 200)).await;
        // Gone already: the master's restart replaced it; wait for its successor.
        if sigkill(pid, &format!("allocation {seen}'s worker")).is_err() {
            continue;
        }
        kills += 1;
        if kills == opts.kills.div_ceil(2) {
            // The master crashes too, then comes back from its state folder.
            let before = checkpoint_uuids(&client, &run).await?;
            let metrics_before = metric_keys(&client, &run).await?;
            sigkill(devmaster.id(), "the devmaster")?;
            let _ = devmaster.wait();
            let (restarted, url) = spawn_master(&binary, &opts.output)?;
            devmaster = restarted;
            client = signed_in(&url).await?;
            let after = checkpoint_uuids(&client, &run).await?;
            if let Some(lost) = before.iter().find(|u| !after.contains(u)) {
                return Err(QualifyError::Failed(format!(
                    "the restarted master lost checkpoint {lost} it had acknowledged"
                )));
            }
            let metrics_after = metric_keys(&client, &run).await?;
            if let Some((run_id, step)) = metrics_before.iter().find(|k| !metrics_after.contains(k))
            {
                return Err(QualifyError::Failed(format!(
                    "the restarted master lost the step-{step} metrics of run {run_id} it had \
                     acknowledged"
                )));
            }
            kept = before.len();
            kept_metrics = metrics_before.len();
        }
    }
    let end = wait_terminal(&client, &run, opts.timeout).await;
    // SIGTERM: the devmaster stops its trial processes and exits.
    if let Some(pid) = i32::try_from(devmaster.id())
        .ok()
        .and_then(rustix::process::Pid::from_raw)
    {
        let _ = rustix::process::kill_process(pid, rustix::process::Signal::TERM);
    }
    let _ = devmaster.wait();
    let end = end?;
    if end != hr_det::wire::State::Completed {
        return Err(QualifyError::Failed(format!(
            "the trial ended {} after {} kills",
            crate::driver::ending(&client, &run, end).await,
            opts.kills
        )));
    }
    Ok(SoakReport {
        allocations: starts(&run_dir)?.len(),
        run_dir: run_dir.root().to_owned(),
        kills,
        checkpoints_kept_over_master_restart: kept,
        metrics_kept_over_master_restart: kept_metrics,
        seconds: started.elapsed().as_secs_f64(),
    })
}

/// The kill soak of a plan judged against its native uninterrupted run, checked before any
/// output exists ([`SoakQualification::new`]) and then run ([`SoakQualification::run`]).
#[derive(Debug)]
pub struct SoakQualification {
    binary: PathBuf,
    plan_path: PathBuf,
    plan: Plan,
    output: PathBuf,
    kills: u32,
    seed: u64,
    timeout: Duration,
}

/// What `soak.json` records.
#[derive(Debug, Clone, Serialize)]
pub struct SoakSummary {
    /// The plan's name.
    pub plan: String,
    /// Its steps.
    pub steps: u64,
    /// Worker kills delivered.
    pub kills: u32,
    /// Seed of the kill moments.
    pub seed: u64,
    /// Master restarts (one).
    pub master_restarts: u32,
    /// Allocations the trial had.
    pub allocations: usize,
    /// Checkpoints the master kept over its restart.
    pub checkpoints_kept_over_master_restart: usize,
    /// Metric reports the master kept over its restart.
    pub metrics_kept_over_master_restart: usize,
    /// Wall seconds of the soak.
    pub seconds: f64,
    /// Whether the trial's evidence equals the native run's, every step of it.
    pub evidence_equal: bool,
    /// The trial's run folder.
    pub run_dir: PathBuf,
}

impl SoakQualification {
    /// The soak of the plan at `plan` by `binary` (its `train` and `managed-training`) into
    /// `output`: `kills` worker SIGKILLs at moments drawn from `seed`, within `timeout`. A plan
    /// that does not load or no kills is [`QualifyError::Refused`].
    pub fn new(
        binary: PathBuf,
        plan: &Path,
        output: &Path,
        (kills, seed): (u32, u64),
        timeout: Duration,
    ) -> Result<Self, QualifyError> {
        let parsed = Plan::from_file(plan).map_err(|e| QualifyError::Refused(e.to_string()))?;
        if kills == 0 {
            return Err(QualifyError::Refused(
                "--kills must be at least 1".to_owned(),
            ));
        }
        let absolute = |p: &Path| std::path::absolute(p).at("resolve", p);
        Ok(Self {
            binary,
            plan_path: absolute(plan)?,
            plan: parsed,
            output: absolute(output)?,
            kills,
            seed,
            timeout,
        })
    }

    /// Runs the native reference, then the soak from the checkout `root`, into the output folder
    /// the caller has made; writes and returns the summary.
    pub async fn run(self, root: &Path) -> Result<SoakSummary, QualifyError> {
        let reference = self.output.join("reference");
        tracing::info!(
            "qualify soak: the native uninterrupted run -> {}",
            reference.display()
        );
        let native = Command::new(&self.binary)
            .arg("train")
            .arg("--plan")
            .arg(&self.plan_path)
            .arg("--output")
            .arg(&reference)
            .output()
            .map_err(|e| QualifyError::Failed(format!("running the native reference: {e}")))?;
        if !native.status.success() {
            return Err(QualifyError::Failed(format!(
                "the native reference failed ({}): {}",
                native.status,
                String::from_utf8_lossy(&native.stderr)
            )));
        }
        let timeout_seconds = self.timeout.as_secs().to_string();
        let opts = SoakOptions {
            output: self.output.clone(),
            root: root.to_owned(),
            entrypoint: vec![
                self.binary.display().to_string(),
                "managed-training".to_owned(),
                "--plan".to_owned(),
                self.plan_path.display().to_string(),
                "--backend".to_owned(),
                self.plan.environment.backend().to_owned(),
                "--max-wall-seconds".to_owned(),
                timeout_seconds,
                "--unqualified".to_owned(),
            ],
            steps: self.plan.steps,
            kills: self.kills,
            seed: self.seed,
            timeout: self.timeout,
        };
        tracing::info!(
            "qualify soak: {} SIGKILLs of the worker (seed {}) and one master crash",
            self.kills,
            self.seed
        );
        let report = kill_soak(&opts).await?;
        let read = |run: &Path| {
            let path = RunDir::new(run).evidence();
            std::fs::read_to_string(&path).at("read", &path)
        };
        let (theirs, ours) = (read(&report.run_dir)?, read(&reference)?);
        let summary = SoakSummary {
            plan: self.plan.name.clone(),
            steps: self.plan.steps,
            kills: report.kills,
            seed: self.seed,
            master_restarts: 1,
            allocations: report.allocations,
            checkpoints_kept_over_master_restart: report.checkpoints_kept_over_master_restart,
            metrics_kept_over_master_restart: report.metrics_kept_over_master_restart,
            seconds: report.seconds,
            evidence_equal: theirs == ours && ours.lines().count() as u64 == self.plan.steps,
            run_dir: report.run_dir,
        };
        let path = self.output.join("soak.json");
        let bytes = serde_json::to_vec_pretty(&summary).expect("a summary serialises");
        std::fs::write(&path, bytes).at("write", &path)?;
        Ok(summary)
    }
}
