//! Fault injection for the recovery tests and negative controls, read from `HR_FAULT_*`
//! variables: where a process kills itself, holds for a preemption, sets its clock ahead, or
//! steps a data-parallel run with a deliberate bug.

use std::time::{Duration, Instant};

use hr_core::CoreContext;
use hr_grpo::ParallelFault;

use crate::TrainError;

/// The process dies at once (SIGKILL), `when` naming the point: `kill_during_save` (a save
/// half written, never sealed or reported) and `HR_FAULT_KILL_RANK` (a rank as a step starts).
pub(crate) fn kill_self(when: &str) {
    tracing::warn!("fault injection: SIGKILL {when}");
    let _ = std::process::Command::new("kill")
        .args(["-KILL", &std::process::id().to_string()])
        .status();
    std::thread::sleep(Duration::from_secs(60));
}

/// The longest `hold_for_preemption` waits before training goes on.
const HOLD_LIMIT: Duration = Duration::from_secs(600);

/// The recovery tests' fault injection read from the variable `name`, `RUN:STEP` (an
/// allocation run and a step): `HR_FAULT_KILL_AT` SIGKILLs the worker during the save of that
/// step ([`crate::AllocationOptions::kill_during_save`]).
pub(crate) fn fault_point(name: &str) -> Result<Option<(i32, u64)>, TrainError> {
    match fault_points(name)?.as_slice() {
        [] => Ok(None),
        [one] => Ok(Some(*one)),
        _ => Err(TrainError::Refused(format!("{name}: name one RUN:STEP"))),
    }
}

/// The seconds of `HR_FAULT_CLOCK_AHEAD_S` ([`crate::AllocationOptions::clock_ahead_s`]), 0 unset.
pub(crate) fn fault_clock_ahead() -> Result<u64, TrainError> {
    const NAME: &str = "HR_FAULT_CLOCK_AHEAD_S";
    match std::env::var(NAME).ok().filter(|v| !v.is_empty()) {
        None => Ok(0),
        Some(v) => v
            .parse()
            .map_err(|_| TrainError::Refused(format!("{NAME}={v}: give whole seconds, e.g. 3600"))),
    }
}

/// As [`fault_point`], `RUN:STEP[,RUN:STEP...]`: `HR_FAULT_HOLD_AT` holds after each such
/// step's metrics until a stop is requested, so a pause lands exactly there however fast the
/// steps are ([`crate::AllocationOptions::hold_for_preemption`]).
pub(crate) fn fault_points(name: &str) -> Result<Vec<(i32, u64)>, TrainError> {
    let Some(v) = std::env::var(name).ok().filter(|v| !v.is_empty()) else {
        return Ok(Vec::new());
    };
    v.split(',')
        .map(|point| {
            point
                .split_once(':')
                .and_then(|(run, step)| Some((run.parse().ok()?, step.parse().ok()?)))
                .ok_or_else(|| {
                    TrainError::Refused(format!(
                        "{name}={v}: use RUN:STEP[,RUN:STEP...], e.g. 1:3,2:5"
                    ))
                })
        })
        .collect()
}

/// The hold of `hold_for_preemption`: returns when Core asks to stop or after [`HOLD_LIMIT`].
pub(crate) fn hold_for_preemption(core: &CoreContext, step: u64) {
    tracing::warn!("fault injection: holding after step {step} until a stop is requested");
    let held = Instant::now();
    while !core.should_preempt() && held.elapsed() < HOLD_LIMIT {
        std::thread::sleep(Duration::from_millis(20));
    }
}

/// The negative control of data-parallel steps named by `HR_FAULT_PARALLEL` (`rank-keyed-rng`
/// or `sequential-sum`), read by every rank; none unset.
pub(crate) fn parallel_fault() -> Result<Option<ParallelFault>, TrainError> {
    const NAME: &str = "HR_FAULT_PARALLEL";
    let Some(v) = std::env::var(NAME).ok().filter(|v| !v.is_empty()) else {
        return Ok(None);
    };
    let names: Vec<&str> = ParallelFault::ALL.iter().map(|(n, _)| *n).collect();
    ParallelFault::parse(&v)
        .map(Some)
        .ok_or_else(|| TrainError::Refused(format!("{NAME}={v}: use one of {}", names.join(", "))))
}
