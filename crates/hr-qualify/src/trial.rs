//! `managed-trial cpu`: the fixture as a Core API trial. Restores the scheduler-selected
//! checkpoint (fully verified), then per step: advance, report the metric (RNG preserved),
//! and publish a sealed snapshot; on preemption the step's save is the terminal one (publish,
//! receipt, ack, exit 0); step 8 is the final save.

use hr_files::{IoResultExt, RunDir};
use std::time::Duration;

use hr_core::CoreContext;
use hr_seal::{SnapshotWriter, SourceBinding, Trust, sha256_hex};
use hr_snapshot::{Binding, Publisher, TerminalKind};
use serde::{Deserialize, Serialize};
use serde_json::json;

use crate::{FixtureState, QualifyError};

/// Test controls, read from the environment by the trial (they exist to prove that the
/// qualification catches what it must).
#[derive(Debug, Clone, Default, PartialEq)]
pub struct TrialControls {
    /// Seconds per step (`HR_FIXTURE_STEP_SECONDS`, default 0.5).
    pub step_seconds: f64,
    /// Negative control: do not restore the RNG (`HR_FIXTURE_SKIP_RNG_RESTORE=1`).
    pub skip_rng_restore: bool,
    /// SIGKILL itself in the middle of the save of `(run, step)` (`HR_FIXTURE_KILL_AT=run:step`).
    pub kill_at: Option<(i32, u64)>,
    /// In `(run, step)`, after reporting the step's metrics, wait until asked to preempt
    /// (`HR_FIXTURE_HOLD_AT=run:step`): a pause aimed before that step then lands in time on a
    /// machine of any speed.
    pub hold_at: Option<(i32, u64)>,
}

impl TrialControls {
    /// From `HR_FIXTURE_*`.
    pub fn from_env() -> Self {
        let var = |n: &str| std::env::var(n).ok().filter(|v| !v.is_empty());
        Self {
            step_seconds: var("HR_FIXTURE_STEP_SECONDS")
                .and_then(|v| v.parse().ok())
                .unwrap_or(0.5),
            skip_rng_restore: var("HR_FIXTURE_SKIP_RNG_RESTORE").is_some_and(|v| v == "1"),
            kill_at: var("HR_FIXTURE_KILL_AT").and_then(|v| run_step(&v)),
            hold_at: var("HR_FIXTURE_HOLD_AT").and_then(|v| run_step(&v)),
        }
    }
}

fn run_step(v: &str) -> Option<(i32, u64)> {
    let (run, step) = v.split_once(':')?;
    Some((run.parse().ok()?, step.parse().ok()?))
}

/// What an allocation of the fixture trial did with the checkpoint the master selected, one
/// line of [`RunDir::restores`].
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub(crate) struct RestoreRecord {
    /// The allocation that restored (`<task>.<n>`).
    pub(crate) allocation: String,
    /// Its run number within the trial.
    pub(crate) trial_run_id: i32,
    /// The checkpoint the master selected (none for a refusal before one was named).
    pub(crate) selected_uuid: Option<String>,
    /// The step restored (an adopted checkpoint only).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub(crate) step: Option<u64>,
    /// `adopted`, or `refused: <why>`.
    pub(crate) outcome: String,
}

impl RestoreRecord {
    fn append(&self, run: &RunDir) -> Result<(), QualifyError> {
        let line = serde_json::to_string(self).expect("a restore record serialises");
        hr_files::append_line(&run.restores(), &line).map_err(Into::into)
    }
}

/// The restore records of `run`, oldest first (none before the first restore); a line that is
/// not one is an error naming it, a torn last line is left out.
pub(crate) fn read_restores(run: &RunDir) -> Result<Vec<RestoreRecord>, QualifyError> {
    let path = run.restores();
    let text = match std::fs::read_to_string(&path) {
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => return Ok(Vec::new()),
        read => read.at("read", &path)?,
    };
    hr_files::complete_lines(&text)
        .enumerate()
        .map(|(i, line)| {
            serde_json::from_str(line).map_err(|e| {
                QualifyError::Failed(format!("{} line {}: {e}", path.display(), i + 1))
            })
        })
        .collect()
}

fn payload(
    state: &FixtureState,
    kill: bool,
) -> impl FnOnce(&mut SnapshotWriter) -> Result<(), String> + '_ {
    move |w| {
        w.add_bytes("payload/fixture/state.json", "trainer", &state.to_bytes())
            .map_err(|e| e.to_string())?;
        if kill {
            // The fault: the process dies with the save half written, never sealed or reported.
            let _ = std::process::Command::new("kill")
                .args(["-KILL", &std::process::id().to_string()])
                .status();
            std::thread::sleep(Duration::from_secs(60));
        }
        w.add_bytes(
            "payload/rng/rng.json",
            "rng",
            &serde_json::to_vec(&state.rng).expect("rng serialises"),
        )
        .map_err(|e| e.to_string())
    }
}

/// Runs the fixture trial in this allocation; `source` binds the binary.
pub fn managed_trial_cpu(
    source: SourceBinding,
    controls: &TrialControls,
) -> Result<(), QualifyError> {
    let ctx = CoreContext::from_environment()?;
    let info = ctx.info().clone();
    let run = RunDir::managed(ctx.storage_dir(), info.experiment_id, info.trial_id);
    std::fs::create_dir_all(run.root()).at("create", run.root())?;
    let binding = Binding {
        run_id: format!("det:{}/{}", info.experiment_id, info.trial_id),
        writer: info.allocation_id.clone(),
        source,
        config_sha256: sha256_hex(info.config.to_string().as_bytes()),
    };
    let mut publisher =
        Publisher::new(ctx, binding, None, Trust::DigestOnly, run.root().to_owned());
    let selected = publisher.core().info().latest_checkpoint.clone();
    let restored = match publisher.restore() {
        Ok(r) => r,
        Err(e) => {
            RestoreRecord {
                allocation: info.allocation_id.clone(),
                trial_run_id: info.trial_run_id,
                selected_uuid: selected,
                step: None,
                outcome: format!("refused: {e}"),
            }
            .append(&run)?;
            return Err(e.into());
        }
    };
    let mut state = FixtureState::new(info.trial_seed);
    if let Some(r) = &restored {
        let bytes = r.snapshot.read_file("payload/fixture/state.json")?;
        let restored_state: FixtureState = serde_json::from_slice(&bytes)
            .map_err(|e| QualifyError::Failed(format!("restored state.json: {e}")))?;
        let rng = if controls.skip_rng_restore {
            FixtureRng::seeded(info.trial_seed)
        } else {
            restored_state.rng
        };
        state = FixtureState {
            rng,
            ..restored_state
        };
        RestoreRecord {
            allocation: info.allocation_id.clone(),
            trial_run_id: info.trial_run_id,
            selected_uuid: Some(r.uuid.clone()),
            step: Some(state.step),
            outcome: "adopted".to_owned(),
        }
        .append(&run)?;
    }
    let Some(op) = publisher.core().searcher_operation()? else {
        return Ok(());
    };
    while state.step < op.length {
        state.advance();
        let step = state.step;
        let mut rng = state.rng;
        publisher.report_metrics(&mut rng, step, json!({"loss": state.loss()}))?;
        let kill = controls.kill_at == Some((info.trial_run_id, step));
        if controls.hold_at == Some((info.trial_run_id, step)) {
            while !publisher.core().should_preempt() {
                std::thread::sleep(Duration::from_millis(50));
            }
        }
        if publisher.core().should_preempt() {
            let (published, receipt) = publisher
                .terminal(TerminalKind::Preemption, step)?
                .native_cleanup(|| Ok(()))?
                .stop_services(|| Ok(()))?
                .publish(payload(&state, kill))?
                .write_receipt()?;
            publisher.acknowledge_preemption(receipt)?;
            let _ = published;
            return Ok(());
        }
        if step == op.length {
            publisher
                .terminal(TerminalKind::Final, step)?
                .native_cleanup(|| Ok(()))?
                .stop_services(|| Ok(()))?
                .publish(payload(&state, kill))?
                .finish()?;
        } else {
            publisher.save_periodic(step, payload(&state, kill))?;
        }
        publisher.core().report_progress(step as f64)?;
        std::thread::sleep(Duration::from_secs_f64(controls.step_seconds));
    }
    publisher.core().complete_operation(op, state.loss())?;
    Ok(())
}

use crate::FixtureRng;
