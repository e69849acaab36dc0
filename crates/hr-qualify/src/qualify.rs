//! `qualify cpu`: the lifecycle check. Runs the fixture uninterrupted (reference) and paused after
//! the step-3 metric (managed), checks the receipt, the PAUSED state, the next allocation's trial
//! and run id, and that it restored exactly the receipt's checkpoint; verifies every published
//! snapshot and compares each step's state digest; writes `proof.json`.

use hr_files::IoResultExt;
use std::{
    future::Future,
    path::{Path, PathBuf},
    time::{Duration, Instant},
};

use hr_det::{
    Client, ExperimentAction,
    wire::{CheckpointSortBy, State},
};
use hr_proof::{CoreIdentity, Interruption, Proof, RunEvidence, StepEvidence, compare};
use hr_seal::{Expectations, Trust, sha256_hex, verify};
use hr_snapshot::Receipt;
use serde_json::Value;

use crate::{FixtureState, QualifyError, SourceRecord, trial::run_dir};

/// A negative control: a fault the qualification must catch (or survive).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Control {
    /// The resumed allocation does not restore the RNG: the proof must say `equal: false`.
    SkipRngRestore,
    /// Another client reports a second checkpoint at the receipt's step, which the master's
    /// restore rule then prefers: the qualification must fail.
    StaleUuid,
    /// Instead of a pause, the trial is SIGKILLed in the middle of a save (no ack): `max_restarts`
    /// must recover it from the last sealed snapshot and the proof must still be equal.
    KillDuringSave,
}

/// What to run.
#[derive(Debug, Clone)]
pub struct QualifyOptions {
    /// Fresh output folder (`runs/NAME`).
    pub output: PathBuf,
    /// The checkout (for the source digests and the local profile).
    pub root: PathBuf,
    /// A real master; `None` starts a devmaster in `output/devmaster`.
    pub master: Option<String>,
    /// Pause once the training metric of this step is visible.
    pub pause_after_step: u64,
    /// Extra delay between seeing that metric and pausing.
    pub pause_delay: Duration,
    /// Seconds per fixture step.
    pub step_seconds: f64,
    /// A negative control, if any.
    pub control: Option<Control>,
    /// The binary that runs the trial (copied into `output/source/`).
    pub binary: PathBuf,
    /// Its git commit.
    pub commit: String,
    /// Limit for each run.
    pub timeout: Duration,
}

/// Steps of the fixture plan `qualify cpu` runs.
pub const STEPS: u64 = 8;

pub(crate) struct Run {
    pub(crate) experiment: i32,
    pub(crate) trial: i32,
}

/// Lines of a failed trial's log quoted in the error.
const LOG_TAIL: usize = 20;

/// `end` (a run's terminal state) and, unless it completed, the last lines of its trial's log
/// (from the master), so that a failed qualification says why its trial failed.
pub(crate) async fn ending(client: &Client, run: &Run, end: State) -> String {
    if end == State::Completed {
        return end.as_str().to_owned();
    }
    format!("{}; {}", end.as_str(), log_tail(client, run).await)
}

/// The last [`LOG_TAIL`] lines of a run's trial log, as the master serves them.
pub(crate) async fn log_tail(client: &Client, run: &Run) -> String {
    let task = client
        .list_trials(run.experiment)
        .await
        .ok()
        .and_then(|t| t.trials.into_iter().next())
        .and_then(|t| t.task_id);
    let Some(task) = task else {
        return "it has no trial".to_owned();
    };
    match client.task_logs(&task).await {
        Ok(logs) => {
            let lines: Vec<&str> = logs.iter().map(|l| l.log.trim_end()).collect();
            let tail = &lines[lines.len().saturating_sub(LOG_TAIL)..];
            format!("its trial's log ends:\n{}", tail.join("\n"))
        }
        Err(e) => format!("its trial's log is unavailable: {e}"),
    }
}

/// Polls `f` every 100 ms until it yields a value or `timeout` passes.
pub(crate) async fn poll<T, F, Fut>(
    what: &str,
    timeout: Duration,
    mut f: F,
) -> Result<T, QualifyError>
where
    F: FnMut() -> Fut,
    Fut: Future<Output = Result<Option<T>, QualifyError>>,
{
    let start = Instant::now();
    while start.elapsed() < timeout {
        if let Some(v) = f().await? {
            return Ok(v);
        }
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
    Err(QualifyError::Failed(format!(
        "timed out after {timeout:?} waiting for {what}"
    )))
}

/// [`poll`] for what a running experiment should bring about: fails at once, naming the state
/// and the trial log's last lines, once the experiment has ended (ERROR, CANCELED, or COMPLETED
/// before it came).
pub(crate) async fn poll_run<T, F, Fut>(
    client: &Client,
    run: &Run,
    what: &str,
    timeout: Duration,
    mut f: F,
) -> Result<T, QualifyError>
where
    F: FnMut() -> Fut,
    Fut: Future<Output = Result<Option<T>, QualifyError>>,
{
    poll(what, timeout, || {
        let next = f();
        async move {
            // The state first: a run that ends after its awaited moment came is no failure.
            let state = state_of(client, run).await?;
            if let Some(v) = next.await? {
                return Ok(Some(v));
            }
            if state.is_terminal() {
                return Err(QualifyError::Failed(format!(
                    "the experiment ended {} while waiting for {what}",
                    ending(client, run, state).await
                )));
            }
            Ok(None)
        }
    })
    .await
}

/// The cluster profile a qualification's configs use: the local devmaster's, or JAIF's for a
/// real master.
pub(crate) fn profile_for(master: Option<&str>, root: &Path) -> hr_config::ClusterProfile {
    match master {
        Some(_) => hr_config::ClusterProfile::jaif(),
        None => hr_config::ClusterProfile::local(root),
    }
}

/// The managed CPU template's experiment config: the jaif profile for a real master (its pool,
/// mount and defaults), the local one for the devmaster.
fn managed_cpu_config(
    master: Option<&str>,
    root: &Path,
) -> Result<hr_config::ExperimentConfig, QualifyError> {
    let profile = profile_for(master, root);
    let template = hr_config::templates(&profile)
        .into_iter()
        .find(|t| t.file_name.ends_with("-managed-cpu.yaml"))
        .ok_or_else(|| QualifyError::Failed("no managed-cpu template".into()))?;
    match template.config {
        hr_config::TemplateConfig::Experiment(config) => Ok(*config),
        _ => Err(QualifyError::Failed(
            "the managed-cpu template is not an experiment".into(),
        )),
    }
}

/// Which of the two runs a launch config is for.
#[derive(Clone, Copy, PartialEq, Eq)]
enum Role {
    /// Runs uninterrupted.
    Reference,
    /// Is paused (or killed) and resumed.
    Managed,
}

fn launch_config(
    opts: &QualifyOptions,
    record: &SourceRecord,
    storage: &Path,
    name: &str,
    role: Role,
) -> Result<String, QualifyError> {
    // Checkpoints go to `output/checkpoints`, which the qualifier reads back (on JAIF the output
    // folder lies on the shared mount the trial containers see).
    let mut config = managed_cpu_config(opts.master.as_deref(), &opts.root)?;
    config.name = name.to_owned();
    config.entrypoint = vec![
        opts.output.join(&record.binary).display().to_string(),
        "managed-trial".into(),
        "cpu".into(),
    ];
    // Where the qualifier reads them back; every checkpoint survives garbage collection.
    config.checkpoint_storage = Some(
        hr_config::CheckpointStorage::directory(storage.display().to_string())
            .retaining_latest(STEPS as u32),
    );
    let mut env = vec![format!("HR_FIXTURE_STEP_SECONDS={}", opts.step_seconds)];
    match opts.control {
        Some(Control::SkipRngRestore) => env.push("HR_FIXTURE_SKIP_RNG_RESTORE=1".into()),
        Some(Control::KillDuringSave) => {
            env.push("HR_FIXTURE_KILL_AT=1:5".into());
            config.max_restarts = 1;
        }
        _ => {}
    }
    if role == Role::Managed && opts.control != Some(Control::KillDuringSave) {
        // However slow the machine, the pause lands before the run ends: its first allocation
        // waits at the second step after the one the pause follows until it is asked to stop.
        let hold = (opts.pause_after_step + 2).min(STEPS);
        env.push(format!("HR_FIXTURE_HOLD_AT=1:{hold}"));
    }
    config.environment.environment_variables.extend(env);
    use hr_config::YamlConfig;
    Ok(config.to_yaml()?)
}

pub(crate) async fn start_run(client: &Client, yaml: &str) -> Result<Run, QualifyError> {
    let exp = client.create_experiment(yaml, None, true).await?;
    let experiment = exp.experiment.id;
    let trial = poll("the trial to exist", Duration::from_secs(30), || async {
        Ok(client
            .list_trials(experiment)
            .await?
            .trials
            .first()
            .map(|t| t.id))
    })
    .await?;
    Ok(Run { experiment, trial })
}

pub(crate) async fn state_of(client: &Client, run: &Run) -> Result<State, QualifyError> {
    Ok(client
        .get_experiment(run.experiment)
        .await?
        .experiment
        .state)
}

pub(crate) async fn wait_terminal(
    client: &Client,
    run: &Run,
    timeout: Duration,
) -> Result<State, QualifyError> {
    poll("the experiment to finish", timeout, || async {
        let state = state_of(client, run).await?;
        Ok(state.is_terminal().then_some(state))
    })
    .await
}

/// Every step's evidence from the run's published checkpoints, each fully verified.
async fn evidence(
    client: &Client,
    run: &Run,
    storage: &Path,
    record: &SourceRecord,
) -> Result<RunEvidence, QualifyError> {
    let listed = client
        .list_checkpoints(run.experiment, CheckpointSortBy::BatchNumber, false)
        .await?;
    let mut steps = Vec::new();
    let mut allocations: Vec<String> = Vec::new();
    for c in &listed.checkpoints {
        let expect = Expectations {
            trust: Trust::DigestOnly,
            run_id: Some(format!("det:{}/{}", run.experiment, run.trial)),
            config_sha256: None,
            source: None,
            step: c.steps_completed().and_then(|s| u64::try_from(s).ok()),
        };
        let v = verify(&storage.join(&c.uuid), &expect)?;
        if v.manifest.source.binary_sha256 != record.binding.binary_sha256
            || v.manifest.source.commit != record.binding.commit
        {
            return Err(QualifyError::Failed(format!(
                "checkpoint {} was written by another binary",
                c.uuid
            )));
        }
        let bytes = std::fs::read(v.dir.join("payload/fixture/state.json")).at("read", &v.dir)?;
        let state: FixtureState = serde_json::from_slice(&bytes)
            .map_err(|e| QualifyError::Failed(format!("{}: {e}", c.uuid)))?;
        if !allocations.contains(&v.manifest.run.writer) {
            allocations.push(v.manifest.run.writer.clone());
        }
        steps.push(StepEvidence {
            step: v.manifest.step,
            state_sha256: state.digest(),
            checkpoint_uuid: c.uuid.clone(),
            manifest_sha256: v.manifest_sha256,
            allocation: v.manifest.run.writer,
        });
    }
    Ok(RunEvidence {
        experiment_id: run.experiment.into(),
        trial_id: run.trial.into(),
        allocations,
        steps,
    })
}

fn read_restores(storage: &Path, run: &Run) -> Vec<Value> {
    std::fs::read_to_string(run_dir(storage, run.experiment, run.trial).join("restores.jsonl"))
        .unwrap_or_default()
        .lines()
        .filter_map(|l| serde_json::from_str(l).ok())
        .collect()
}

/// The master to use: `master` if given, else a fresh devmaster in `output/devmaster` (returned
/// so the caller shuts it down).
pub(crate) async fn start_master(
    output: &Path,
    master: Option<&str>,
    slots: u32,
) -> Result<(Option<hr_devmaster::Devmaster>, String), QualifyError> {
    if let Some(url) = master {
        return Ok((None, url.to_owned()));
    }
    let config = hr_devmaster::DevmasterConfig {
        listen: "127.0.0.1:0".parse().expect("loopback address"),
        state_dir: output.join("devmaster"),
        trial_info: hr_devmaster::TrialInfo::Private,
        preemption_timeout: Duration::from_secs(600),
        record_requests: None,
        password: None,
        tls: None,
        slots,
    };
    let m = hr_devmaster::Devmaster::start(config)
        .await
        .at("start devmaster in", output)?;
    let url = m.url().to_owned();
    Ok((Some(m), url))
}

/// Runs the qualification and writes `<output>/proof.json`; returns the proof (which may say
/// `equal: false`) or the reason the lifecycle itself failed.
pub async fn qualify_cpu(
    opts: &QualifyOptions,
    record: &SourceRecord,
) -> Result<Proof, QualifyError> {
    let storage = opts.output.join("checkpoints");
    std::fs::create_dir_all(&storage).at("create", &storage)?;
    let (master, url) = start_master(&opts.output, opts.master.as_deref(), 0).await?;
    let result = run_both(opts, record, &storage, &url).await;
    if let Some(m) = master {
        m.shutdown();
    }
    let proof = result?;
    proof.write(&opts.output.join("proof.json"))?;
    Ok(proof)
}

async fn run_both(
    opts: &QualifyOptions,
    record: &SourceRecord,
    storage: &Path,
    url: &str,
) -> Result<Proof, QualifyError> {
    let mut client = Client::new(url)?;
    client.sign_in_from_env().await?;
    let reference_yaml = launch_config(
        opts,
        record,
        storage,
        "hessian-recipes managed CPU lifecycle (reference)",
        Role::Reference,
    )?;
    let managed_yaml = launch_config(
        opts,
        record,
        storage,
        "hessian-recipes managed CPU lifecycle",
        Role::Managed,
    )?;
    for (name, yaml) in [
        ("launch-config.yaml", &managed_yaml),
        ("reference-config.yaml", &reference_yaml),
    ] {
        let path = opts.output.join(name);
        std::fs::write(&path, yaml).at("write", &path)?;
    }

    // The uninterrupted reference.
    let reference = start_run(&client, &reference_yaml).await?;
    let end = wait_terminal(&client, &reference, opts.timeout).await?;
    if end != State::Completed {
        return Err(QualifyError::Failed(format!(
            "the reference run ended {}",
            ending(&client, &reference, end).await
        )));
    }

    // The managed run.
    let managed = start_run(&client, &managed_yaml).await?;
    let receipt_dir = run_dir(storage, managed.experiment, managed.trial);
    let interruption = if opts.control == Some(Control::KillDuringSave) {
        let end = wait_terminal(&client, &managed, opts.timeout).await?;
        if end != State::Completed {
            return Err(QualifyError::Failed(format!(
                "the killed run was not recovered: it ended {}",
                ending(&client, &managed, end).await
            )));
        }
        let restore = read_restores(storage, &managed)
            .into_iter()
            .next()
            .ok_or_else(|| QualifyError::Failed("no restore after the kill".into()))?;
        Interruption {
            kind: "kill-during-save".into(),
            step: restore["step"].as_u64().unwrap_or(0),
            uuid_at_pause: None,
            paused_allocation: format!(
                "{}.1",
                restore["allocation"]
                    .as_str()
                    .unwrap_or("")
                    .rsplit_once('.')
                    .map_or("", |p| p.0)
            ),
            uuid_at_restore: restore["selected_uuid"].as_str().unwrap_or("").to_owned(),
            restored_allocation: restore["allocation"].as_str().unwrap_or("").to_owned(),
            restored_run_id: restore["trial_run_id"].as_i64().unwrap_or(0),
            pause_sent_after_step: None,
        }
    } else {
        pause_and_resume(opts, &client, &managed, &receipt_dir, storage).await?
    };
    let reference_ev = evidence(&client, &reference, storage, record).await?;
    let resumed_ev = evidence(&client, &managed, storage, record).await?;
    for (name, ev) in [("reference", &reference_ev), ("managed", &resumed_ev)] {
        if ev.steps.len() as u64 != STEPS {
            return Err(QualifyError::Failed(format!(
                "the {name} run published {} checkpoints, not {STEPS}",
                ev.steps.len()
            )));
        }
    }
    if resumed_ev.allocations.len() != 2 {
        return Err(QualifyError::Failed(format!(
            "the managed run used allocations {:?}, not 2",
            resumed_ev.allocations
        )));
    }
    let cmp = compare(&reference_ev.steps, &resumed_ev.steps);
    Ok(Proof {
        schema: hr_proof::PROOF_SCHEMA.to_owned(),
        kind: "managed-cpu".to_owned(),
        final_state_sha256: resumed_ev.steps.last().map(|s| s.state_sha256.clone()),
        reference: reference_ev,
        resumed: resumed_ev,
        interruption,
        equal: cmp.equal,
        first_divergent_step: cmp.first_divergent_step,
        first_divergent_field: cmp.field,
        checkpoint_storage: storage.to_owned(),
        source: record.binding.clone(),
        core: CoreIdentity {
            implementation: "hr-core".to_owned(),
            version: env!("CARGO_PKG_VERSION").to_owned(),
            binary_sha256: record.binding.binary_sha256.clone().unwrap_or_default(),
        },
    })
}

async fn pause_and_resume(
    opts: &QualifyOptions,
    client: &Client,
    managed: &Run,
    receipt_dir: &Path,
    storage: &Path,
) -> Result<Interruption, QualifyError> {
    poll_run(
        client,
        managed,
        "the step metric to pause after",
        opts.timeout,
        || async {
            let metrics = client.trial_metrics(managed.trial, "training").await?;
            Ok(metrics
                .iter()
                .any(|m| u64::try_from(m.total_batches).is_ok_and(|s| s >= opts.pause_after_step))
                .then_some(()))
        },
    )
    .await?;
    tokio::time::sleep(opts.pause_delay).await;
    client
        .experiment_action(managed.experiment, ExperimentAction::Pause)
        .await?;
    if state_of(client, managed).await? != State::Paused {
        return Err(QualifyError::Failed(
            "the experiment was not PAUSED at once".into(),
        ));
    }
    let receipt = poll_run(
        client,
        managed,
        "the preempted_at_checkpoint receipt",
        opts.timeout,
        || async { Ok(Receipt::read(receipt_dir)?) },
    )
    .await?;
    if opts.control == Some(Control::StaleUuid) {
        inject_checkpoint(client, managed, &receipt, storage).await?;
    }
    client
        .experiment_action(managed.experiment, ExperimentAction::Activate)
        .await?;
    let end = wait_terminal(client, managed, opts.timeout).await?;
    let restores = read_restores(storage, managed);
    let Some(restore) = restores.first() else {
        return Err(QualifyError::Failed(format!(
            "no restore was recorded; the run ended {}",
            ending(client, managed, end).await
        )));
    };
    let selected = restore["selected_uuid"].as_str().unwrap_or("").to_owned();
    if selected != receipt.uuid {
        return Err(QualifyError::Failed(format!(
            "the scheduler selected checkpoint {selected} but the receipt names {} (outcome: {})",
            receipt.uuid, restore["outcome"]
        )));
    }
    if end != State::Completed {
        return Err(QualifyError::Failed(format!(
            "the managed run ended {} (its restore: {})",
            ending(client, managed, end).await,
            restore["outcome"]
        )));
    }
    let run_id = restore["trial_run_id"].as_i64().unwrap_or(0);
    let allocation = restore["allocation"].as_str().unwrap_or("").to_owned();
    let paused_task = receipt
        .allocation
        .rsplit_once('.')
        .map(|p| p.0.to_owned())
        .unwrap_or_default();
    if run_id != 2 || !allocation.starts_with(&format!("{paused_task}.")) {
        return Err(QualifyError::Failed(format!(
            "the restore ran in allocation {allocation} (run {run_id}), not run 2 of the paused \
             trial's task {paused_task}; {}",
            log_tail(client, managed).await
        )));
    }
    Ok(Interruption {
        kind: "pause".into(),
        step: receipt.step,
        uuid_at_pause: Some(receipt.uuid.clone()),
        paused_allocation: receipt.allocation,
        uuid_at_restore: selected,
        restored_allocation: allocation,
        restored_run_id: run_id,
        pause_sent_after_step: Some(opts.pause_after_step),
    })
}

/// The seed's failure, reproduced: another client reports a second checkpoint at the receipt's
/// step, copied from it, with a later report time.
async fn inject_checkpoint(
    client: &Client,
    run: &Run,
    receipt: &Receipt,
    storage: &Path,
) -> Result<(), QualifyError> {
    let listed = client
        .list_checkpoints(run.experiment, CheckpointSortBy::BatchNumber, false)
        .await?;
    let original = listed
        .checkpoints
        .iter()
        .find(|c| c.uuid == receipt.uuid)
        .ok_or_else(|| QualifyError::Failed("the receipt's checkpoint is not listed".into()))?;
    let mut copy = original.clone();
    copy.uuid = format!(
        "{}-0000-4000-a000-{}",
        &sha256_hex(receipt.uuid.as_bytes())[..8],
        &sha256_hex(b"stale")[..12]
    );
    copy.report_time = Some("2999-01-01T00:00:00Z".into());
    let from = storage.join(&receipt.uuid);
    let to = storage.join(&copy.uuid);
    copy_dir(&from, &to)?;
    client.report_checkpoint(&copy).await?;
    Ok(())
}

fn copy_dir(from: &Path, to: &Path) -> Result<(), QualifyError> {
    std::fs::create_dir_all(to).at("create", to)?;
    for entry in std::fs::read_dir(from).at("read", from)? {
        let entry = entry.at("read", from)?;
        let target = to.join(entry.file_name());
        if entry.path().is_dir() {
            copy_dir(&entry.path(), &target)?;
        } else {
            std::fs::copy(entry.path(), &target).at("copy", &target)?;
        }
    }
    Ok(())
}

/// Re-checks a proof against the snapshots it names: each checkpoint verifies, its state digest
/// is the recorded one, and the comparison gives the recorded verdict.
pub fn verify_proof(path: &Path) -> Result<Proof, QualifyError> {
    let proof = Proof::read(path)?;
    for run in [&proof.reference, &proof.resumed] {
        for s in &run.steps {
            let expect = Expectations {
                trust: Trust::DigestOnly,
                run_id: Some(format!("det:{}/{}", run.experiment_id, run.trial_id)),
                step: Some(s.step),
                ..Expectations::default()
            };
            let v = verify(&proof.checkpoint_storage.join(&s.checkpoint_uuid), &expect)?;
            if v.manifest_sha256 != s.manifest_sha256 {
                return Err(QualifyError::Failed(format!(
                    "checkpoint {} changed since the proof",
                    s.checkpoint_uuid
                )));
            }
            let bytes =
                std::fs::read(v.dir.join("payload/fixture/state.json")).at("read", &v.dir)?;
            let state: FixtureState =
                serde_json::from_slice(&bytes).map_err(|e| QualifyError::Failed(e.to_string()))?;
            if state.digest() != s.state_sha256 {
                return Err(QualifyError::Failed(format!(
                    "step {} state digest differs from the proof",
                    s.step
                )));
            }
        }
    }
    let cmp = compare(&proof.reference.steps, &proof.resumed.steps);
    if cmp.equal != proof.equal || cmp.first_divergent_step != proof.first_divergent_step {
        return Err(QualifyError::Failed(
            "the recorded verdict does not follow from the evidence".into(),
        ));
    }
    Ok(proof)
}
