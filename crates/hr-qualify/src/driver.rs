//! The experiment driver every managed qualification shares: start a master (or use the one
//! given), submit an experiment and find its trial, poll for what a running experiment should
//! bring about (failing at once, with the trial log's tail, when it ended instead), wait for
//! its end, and the seed's pause protocol, once: pause when the step's metric is visible, the
//! trial's durable receipt, the PAUSED state, activate.

use std::{
    future::Future,
    path::Path,
    time::{Duration, Instant},
};

use hr_det::{Client, ExperimentAction, wire::State};
use hr_files::IoResultExt;
use hr_snapshot::Receipt;

use crate::QualifyError;

/// A submitted experiment and its (single) trial.
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

/// The seed's pause protocol up to the PAUSED state: once the training metric of `after_step`
/// is visible (and `delay` later), pause the experiment, wait for the durable receipt the
/// trial writes into `run_dir` as it acknowledges, then for the PAUSED state. Returns the
/// receipt; the caller checks or injects what it must, then calls [`activate`].
pub(crate) async fn pause(
    client: &Client,
    run: &Run,
    after_step: u64,
    delay: Duration,
    run_dir: &Path,
    timeout: Duration,
) -> Result<Receipt, QualifyError> {
    poll_run(
        client,
        run,
        "the step metric to pause after",
        timeout,
        || async {
            let metrics = client.trial_metrics(run.trial, "training").await?;
            Ok(metrics
                .iter()
                .any(|m| u64::try_from(m.total_batches).is_ok_and(|s| s >= after_step))
                .then_some(()))
        },
    )
    .await?;
    tokio::time::sleep(delay).await;
    client
        .experiment_action(run.experiment, ExperimentAction::Pause)
        .await?;
    // A run that ended cannot write a receipt any more: said now, not at the timeout.
    let receipt = poll_run(
        client,
        run,
        "the preempted_at_checkpoint receipt (the pause did not land)",
        timeout,
        || async { Ok(Receipt::read(run_dir)?) },
    )
    .await?;
    poll_run(client, run, "the PAUSED state", timeout, || async {
        Ok((state_of(client, run).await? == State::Paused).then_some(()))
    })
    .await?;
    Ok(receipt)
}

/// Activates a paused experiment (the protocol's last step).
pub(crate) async fn activate(client: &Client, run: &Run) -> Result<(), QualifyError> {
    client
        .experiment_action(run.experiment, ExperimentAction::Activate)
        .await?;
    Ok(())
}
