//! Integration tests of hr-core: the Rust conformance trial through the whole managed lifecycle
//! under the devmaster (metrics, checkpoints, preemption with ack, restore in run 2), and the
//! local mode with a real SIGTERM.

use std::{
    io::{BufRead, BufReader},
    process::{Command, Stdio},
    time::Duration,
};

use hr_det::{ExperimentAction, wire::State};
use hr_devmaster::{Devmaster, DevmasterConfig};

const TRIAL: &str = env!("CARGO_BIN_EXE_hr-core-conformance-trial");

async fn wait_for(what: &str, mut f: impl AsyncFnMut() -> bool) {
    for _ in 0..2400 {
        if f().await {
            return;
        }
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
    panic!("timed out waiting for {what}");
}

fn log_of(dir: &std::path::Path) -> String {
    std::fs::read_dir(dir.join("logs"))
        .map(|entries| {
            entries
                .filter_map(|e| e.ok())
                .filter_map(|e| std::fs::read_to_string(e.path()).ok())
                .collect()
        })
        .unwrap_or_default()
}

/// A devmaster in `state` and a logged-in client.
async fn start_master(state: &std::path::Path) -> (Devmaster, hr_det::Client) {
    start_master_with(state, None, hr_det::MasterTrust::default(), 0).await
}

/// A devmaster in `state` serving `tls` with `slots` slots, and a client logged in trusting it
/// as `trust` says.
async fn start_master_with(
    state: &std::path::Path,
    tls: Option<hr_devmaster::TlsFiles>,
    trust: hr_det::MasterTrust,
    slots: u32,
) -> (Devmaster, hr_det::Client) {
    let config = DevmasterConfig {
        listen: "127.0.0.1:0".parse().expect("addr"),
        state_dir: state.to_owned(),
        trial_info: hr_devmaster::TrialInfo::Private,
        preemption_timeout: Duration::from_secs(60),
        record_requests: None,
        password: None,
        tls,
        slots,
    };
    let master = Devmaster::start(config).await.expect("start");
    let mut client = hr_det::Client::with_trust(master.url(), trust).expect("client");
    client.login("determined", "").await.expect("login");
    (master, client)
}

/// Runs a two-step experiment of the conformance trial on `slots_per_trial` slots to its end;
/// returns its id and final state.
async fn two_steps(
    client: &hr_det::Client,
    name: &str,
    slots_per_trial: usize,
    shared: &std::path::Path,
) -> (i32, State) {
    let yaml = format!(
        "name: {name}\nentrypoint: [{TRIAL:?}]\nsearcher: {{name: single, metric: loss, max_length: {{batches: 2}}}}\n\
         resources: {{slots_per_trial: {slots_per_trial}}}\nmax_restarts: 0\n\
         checkpoint_storage: {{type: shared_fs, host_path: {:?}, storage_path: ckpts}}\n\
         environment: {{environment_variables: [STEP_SECONDS=0]}}\n",
        shared.display().to_string()
    );
    let id = client
        .create_experiment(&yaml, None, true)
        .await
        .expect("create")
        .experiment
        .id;
    wait_for("a terminal state", async || {
        client
            .get_experiment(id)
            .await
            .is_ok_and(|e| e.experiment.state.is_terminal())
    })
    .await;
    let state = client
        .get_experiment(id)
        .await
        .expect("get")
        .experiment
        .state;
    (id, state)
}

/// The training metrics the master holds for the experiment's trial.
async fn training_metrics(
    client: &hr_det::Client,
    experiment: i32,
) -> Vec<hr_det::wire::MetricsReport> {
    let trial = client
        .list_trials(experiment)
        .await
        .expect("trials")
        .trials
        .remove(0);
    client
        .trial_metrics(trial.id, "training")
        .await
        .expect("metrics")
}

/// Runs the conformance trial in local mode again in `run_dir` (no step delay) to its end;
/// returns its stdout.
fn rerun_local(run_dir: &str) -> String {
    let again = Command::new(TRIAL)
        .args(["--local", run_dir])
        .env("STEP_SECONDS", "0")
        .output()
        .expect("rerun");
    String::from_utf8_lossy(&again.stdout).into_owned()
}

/// The conformance trial in local mode in `run_dir` with steps of `step_seconds`; returns it and
/// its stdout lines once it has printed its first step.
fn local_trial(
    run_dir: &str,
    step_seconds: &str,
) -> (
    std::process::Child,
    std::io::Lines<BufReader<std::process::ChildStdout>>,
) {
    let mut child = Command::new(TRIAL)
        .args(["--local", run_dir])
        .env("STEP_SECONDS", step_seconds)
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .expect("spawn");
    let mut lines = BufReader::new(child.stdout.take().expect("stdout")).lines();
    let first = lines.next().expect("a line").expect("utf-8");
    assert!(first.starts_with("step 1 checkpoint"), "{first}");
    (child, lines)
}

#[tokio::test]
async fn a_rust_trial_runs_pauses_acks_and_restores_under_the_devmaster() {
    let tmp = tempfile::tempdir().expect("tmp");
    let state = tmp.path().join("state");
    let shared = tmp.path().join("shared");
    std::fs::create_dir_all(&shared).expect("shared");
    let (master, client) = start_master(&state).await;
    let yaml = format!(
        "name: rust-trial\nentrypoint: [{TRIAL:?}]\nsearcher: {{name: single, metric: loss, max_length: {{batches: 6}}}}\n\
         resources: {{slots_per_trial: 0}}\nmax_restarts: 0\n\
         checkpoint_storage: {{type: shared_fs, host_path: {:?}, storage_path: ckpts}}\n\
         environment: {{environment_variables: [STEP_SECONDS=0.3]}}\n",
        shared.display().to_string()
    );
    let exp = client
        .create_experiment(&yaml, None, true)
        .await
        .expect("create");
    let id = exp.experiment.id;
    wait_for("step 2", async || {
        log_of(&state).contains("step 2 checkpoint")
    })
    .await;
    client
        .experiment_action(id, ExperimentAction::Pause)
        .await
        .expect("pause");
    assert_eq!(
        client
            .get_experiment(id)
            .await
            .expect("get")
            .experiment
            .state,
        State::Paused,
        "PAUSED at once"
    );
    wait_for("preempted", async || {
        log_of(&state).contains("preempted at step")
    })
    .await;
    wait_for("allocation gone", async || {
        client
            .list_trials(id)
            .await
            .is_ok_and(|t| t.trials[0].state == State::Paused)
    })
    .await;
    let log = log_of(&state);
    let preempted_at: u64 = log
        .lines()
        .find_map(|l| l.strip_prefix("preempted at step "))
        .and_then(|n| n.trim().parse().ok())
        .expect("preempted step");
    client
        .experiment_action(id, ExperimentAction::Activate)
        .await
        .expect("activate");
    wait_for("COMPLETED", async || {
        client
            .get_experiment(id)
            .await
            .is_ok_and(|e| e.experiment.state == State::Completed)
    })
    .await;
    let log = log_of(&state);
    assert!(
        log.contains(&format!("at step {preempted_at} run 2")),
        "run 2 restores the step it stopped at:\n{log}"
    );
    assert!(log.contains("completed at step 6"), "{log}");
    let ckpts = client
        .list_checkpoints(id, hr_det::wire::CheckpointSortBy::BatchNumber, false)
        .await
        .expect("ckpts");
    assert_eq!(
        ckpts.checkpoints.len(),
        6,
        "one checkpoint per step, none twice"
    );
    assert!(ckpts.checkpoints.iter().all(
        |c| c.resources.contains_key("metadata.json") && c.resources.contains_key("state.json")
    ));
    let metrics = training_metrics(&client, id).await;
    let runs: std::collections::BTreeSet<i32> = metrics.iter().map(|m| m.trial_run_id).collect();
    assert_eq!(runs.into_iter().collect::<Vec<_>>(), [1, 2]);
    master.shutdown();
}

#[tokio::test]
async fn a_trial_given_two_slots_is_refused_instead_of_leaving_one_idle() {
    let tmp = tempfile::tempdir().expect("tmp");
    let state = tmp.path().join("state");
    let shared = tmp.path().join("shared");
    std::fs::create_dir_all(&shared).expect("shared");
    let (master, client) = start_master_with(&state, None, hr_det::MasterTrust::default(), 2).await;
    let (id, end) = two_steps(&client, "rust-trial-two-slots", 2, &shared).await;
    let log = log_of(&state);
    assert_eq!(end, State::Error, "{log}");
    assert!(
        log.contains("given 2 slots") && log.contains("resources.slots_per_trial: 1"),
        "{log}"
    );
    assert!(
        training_metrics(&client, id).await.is_empty(),
        "nothing trained"
    );
    master.shutdown();
}

#[tokio::test]
async fn a_rust_trial_trusts_a_tls_master_through_the_certificate_it_is_handed() {
    let tmp = tempfile::tempdir().expect("tmp");
    let ca = hr_tests::private_ca::PrivateCa::new(tmp.path(), "cluster");
    let cert = ca.issue("master", &["127.0.0.1"]);
    let state = tmp.path().join("state");
    let shared = tmp.path().join("shared");
    std::fs::create_dir_all(&shared).expect("shared");
    let tls = hr_devmaster::TlsFiles {
        cert: cert.chain,
        key: cert.key,
    };
    let trust = hr_det::MasterTrust::from_pem_file(&ca.ca_pem).expect("bundle");
    let (master, client) = start_master_with(&state, Some(tls), trust, 0).await;
    let (id, end) = two_steps(&client, "rust-trial-tls", 0, &shared).await;
    assert_eq!(end, State::Completed, "{}", log_of(&state));
    assert_eq!(
        training_metrics(&client, id).await.len(),
        2,
        "both steps' metrics over TLS"
    );
    master.shutdown();
}

#[test]
fn local_mode_takes_preemption_from_sigterm_and_restores_the_latest_checkpoint() {
    let tmp = tempfile::tempdir().expect("tmp");
    let run_dir = tmp.path().to_str().expect("utf-8");
    let (mut child, lines) = local_trial(run_dir, "0.2");
    assert!(send_sigterm(child.id()));
    let rest: Vec<String> = lines.map_while(Result::ok).collect();
    assert!(child.wait().expect("wait").success());
    let stopped: u64 = rest
        .iter()
        .find_map(|l| l.strip_prefix("preempted at step "))
        .and_then(|n| n.parse().ok())
        .unwrap_or_else(|| panic!("no preemption line in {rest:?}"));
    let events = std::fs::read_to_string(tmp.path().join("events.jsonl")).expect("events");
    assert!(events.contains("preemption-acknowledged"));
    let out = rerun_local(run_dir);
    assert!(out.contains(&format!("at step {stopped} run 2")), "{out}");
    assert!(out.contains("completed at step 8"), "{out}");
    let metrics = std::fs::read_to_string(tmp.path().join("metrics.jsonl")).expect("metrics");
    assert_eq!(metrics.lines().count(), 8, "each step reported once");
}

/// Sends SIGTERM with the `kill` command (no unsafe code, no extra crate).
fn send_sigterm(pid: u32) -> bool {
    send(pid, "-TERM")
}

fn send(pid: u32, signal: &str) -> bool {
    Command::new("kill")
        .args([signal, &pid.to_string()])
        .status()
        .is_ok_and(|s| s.success())
}

#[test]
fn a_second_interrupt_aborts_at_once_and_the_run_resumes_from_its_last_checkpoint() {
    let tmp = tempfile::tempdir().expect("tmp");
    let run_dir = tmp.path().to_str().expect("utf-8");
    // Steps of 30 s: the step-1 line comes after the trial decided to go on, so it then sleeps
    // and only the second signal can end it soon.
    let (mut child, _lines) = local_trial(run_dir, "30");
    assert!(send(child.id(), "-INT"));
    // The second signal only once the first was taken (two pending signals may merge into one).
    let mut stderr = BufReader::new(child.stderr.take().expect("stderr")).lines();
    let first = stderr.next().expect("a line").expect("utf-8");
    assert!(
        first.starts_with("stop signal: finishing this step"),
        "{first}"
    );
    assert!(send(child.id(), "-INT"));
    let rest: Vec<String> = stderr.map(|l| l.expect("utf-8")).collect();
    let status = child.wait().expect("wait");
    assert_eq!(status.code(), Some(130), "{rest:?}");
    // It exits by the abort, not after the 30 s step.
    assert!(
        rest.iter().any(|l| l.contains("second stop signal")),
        "{rest:?}"
    );
    let out = rerun_local(run_dir);
    assert!(out.contains("at step 1 run 2"), "{out}");
    assert!(out.contains("completed at step 8"), "{out}");
}

#[tokio::test]
async fn queued_reports_are_all_delivered_once_when_flushed() {
    let tmp = tempfile::tempdir().expect("tmp");
    let state = tmp.path().join("state");
    let (master, client) = start_master(&state).await;
    // The bench mode: 30 synchronous reports (steps 1-30), then 30 queued and flushed (31-60).
    let yaml = format!(
        "name: rust-queue\nentrypoint: [{TRIAL:?}]\nsearcher: {{name: single, metric: loss, max_length: {{batches: 6}}}}\n\
         resources: {{slots_per_trial: 0}}\nmax_restarts: 0\n\
         environment: {{environment_variables: [BENCH_REPORTS=30]}}\n",
    );
    let exp = client
        .create_experiment(&yaml, None, true)
        .await
        .expect("create");
    wait_for("the flush", async || {
        log_of(&state).contains("bench metrics 30")
    })
    .await;
    let metrics = training_metrics(&client, exp.experiment.id).await;
    let mut steps: Vec<i32> = metrics.iter().map(|m| m.total_batches).collect();
    steps.sort_unstable();
    assert_eq!(
        steps,
        (1..=60).collect::<Vec<_>>(),
        "each report exactly once"
    );
    master.shutdown();
}
