//! `qualify cpu`: the lifecycle check. Runs the fixture uninterrupted (reference) and paused after
//! the step-3 metric (managed), checks the receipt, the PAUSED state, the next allocation's trial
//! and run id, and that it restored exactly the receipt's checkpoint; verifies every published
//! snapshot and compares each step's state digest; writes `proof.json`.

use hr_files::{IoResultExt, RunDir};
use std::{
    path::{Path, PathBuf},
    time::Duration,
};

use hr_det::{
    Client,
    wire::{CheckpointSortBy, State},
};
use hr_proof::{CoreIdentity, Interruption, Proof, RunEvidence, StepEvidence, compare};
use hr_seal::{Expectations, Trust, sha256_hex, verify};
use hr_snapshot::Receipt;

use crate::driver::{
    Run, activate, ending, log_tail, pause, profile_for, start_master, start_run, wait_terminal,
};
use crate::trial::read_restores;
use crate::{FixtureState, QualifyError, SourceRecord};

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
        let bytes = v.read_file("payload/fixture/state.json")?;
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
    let run_dir = RunDir::managed(storage, managed.experiment, managed.trial);
    let interruption = if opts.control == Some(Control::KillDuringSave) {
        let end = wait_terminal(&client, &managed, opts.timeout).await?;
        if end != State::Completed {
            return Err(QualifyError::Failed(format!(
                "the killed run was not recovered: it ended {}",
                ending(&client, &managed, end).await
            )));
        }
        let restore = read_restores(&run_dir)?
            .into_iter()
            .next()
            .ok_or_else(|| QualifyError::Failed("no restore after the kill".into()))?;
        Interruption {
            kind: "kill-during-save".into(),
            step: restore.step.unwrap_or(0),
            uuid_at_pause: None,
            paused_allocation: format!(
                "{}.1",
                restore.allocation.rsplit_once('.').map_or("", |p| p.0)
            ),
            uuid_at_restore: restore.selected_uuid.unwrap_or_default(),
            restored_allocation: restore.allocation,
            restored_run_id: i64::from(restore.trial_run_id),
            pause_sent_after_step: None,
        }
    } else {
        pause_and_resume(opts, &client, &managed, &run_dir, storage).await?
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
    run_dir: &RunDir,
    storage: &Path,
) -> Result<Interruption, QualifyError> {
    let receipt = pause(
        client,
        managed,
        opts.pause_after_step,
        opts.pause_delay,
        run_dir.root(),
        opts.timeout,
    )
    .await?;
    if opts.control == Some(Control::StaleUuid) {
        inject_checkpoint(client, managed, &receipt, storage).await?;
    }
    activate(client, managed).await?;
    let end = wait_terminal(client, managed, opts.timeout).await?;
    let Some(restore) = read_restores(run_dir)?.into_iter().next() else {
        return Err(QualifyError::Failed(format!(
            "no restore was recorded; the run ended {}",
            ending(client, managed, end).await
        )));
    };
    let selected = restore.selected_uuid.unwrap_or_default();
    if selected != receipt.uuid {
        return Err(QualifyError::Failed(format!(
            "the scheduler selected checkpoint {selected} but the receipt names {} (outcome: {})",
            receipt.uuid, restore.outcome
        )));
    }
    if end != State::Completed {
        return Err(QualifyError::Failed(format!(
            "the managed run ended {} (its restore: {})",
            ending(client, managed, end).await,
            restore.outcome
        )));
    }
    let run_id = i64::from(restore.trial_run_id);
    let allocation = restore.allocation;
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
            let bytes = v.read_file("payload/fixture/state.json")?;
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
