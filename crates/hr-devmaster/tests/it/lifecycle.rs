//! Pause, activate, kill and restart with real child processes.

use std::time::Duration;

use hr_det::{
    ExperimentAction,
    wire::{Checkpoint, CheckpointState, CheckpointTraining, State},
};
use serde_json::json;

use crate::support::{config, create_trial, eventually, start};

fn checkpoint(task: &str, run: i32, uuid: &str, steps: i64, time: &str) -> Checkpoint {
    Checkpoint {
        uuid: uuid.into(),
        task_id: Some(task.into()),
        allocation_id: Some(format!("{task}.{run}")),
        report_time: Some(time.into()),
        state: CheckpointState::Completed,
        resources: Default::default(),
        metadata: json!({"steps_completed": steps}),
        training: CheckpointTraining::default(),
        storage_id: None,
    }
}

#[tokio::test]
async fn pause_is_immediate_activate_restores_by_steps_with_a_tie_break_and_state_survives_a_restart()
 {
    let tmp = tempfile::tempdir().expect("tmp");
    let (master, client) = start(tmp.path(), Duration::from_secs(3600)).await;
    // The trial records its environment and pid, then waits.
    let script = "echo $$ > pid-$DET_TRIAL_RUN_ID; env | grep ^DET_ | sort > env.tmp && mv env.tmp env-$DET_TRIAL_RUN_ID.txt; exec sleep 3600";
    let exp = client
        .create_experiment(&config(script, 0), Some(363), true)
        .await
        .expect("create");
    let id = exp.experiment.id;
    assert_eq!(exp.experiment.project_id, 363);
    let trial = client
        .list_trials(id)
        .await
        .expect("trials")
        .trials
        .remove(0);
    let task = trial.task_id.clone().expect("task id");
    let work = |run: i32| tmp.path().join("work").join(format!("{task}.{run}"));
    eventually("run 1 wrote its env", || async {
        work(1).join("env-1.txt").exists()
    })
    .await;
    let env1 = std::fs::read_to_string(work(1).join("env-1.txt")).expect("env");
    assert!(
        env1.contains("DET_STEPS_COMPLETED=0") && !env1.contains("DET_LATEST_CHECKPOINT"),
        "{env1}"
    );
    assert!(work(1).join("info/cluster.json").exists() && work(1).join("info/trial.json").exists());

    // Two checkpoints at step 2 (the seed's historical case) and one at step 1.
    client
        .report_checkpoint(&checkpoint(
            &task,
            1,
            "aaaaaaaa-0000-4000-a000-000000000001",
            1,
            "2026-10-21T10:00:01Z",
        ))
        .await
        .expect("c1");
    client
        .report_checkpoint(&checkpoint(
            &task,
            1,
            "aaaaaaaa-0000-4000-a000-000000000002",
            2,
            "2026-10-21T10:00:03Z",
        ))
        .await
        .expect("c2");
    client
        .report_checkpoint(&checkpoint(
            &task,
            1,
            "aaaaaaaa-0000-4000-a000-000000000003",
            2,
            "2026-10-21T10:00:02Z",
        ))
        .await
        .expect("c3");

    // Pause: PAUSED at once; the trial never made a Core call, so it is killed, not preempted.
    client
        .experiment_action(id, ExperimentAction::Pause)
        .await
        .expect("pause");
    let now = client.get_experiment(id).await.expect("get");
    assert_eq!(now.experiment.state, State::Paused);
    assert_eq!(
        client.list_trials(id).await.expect("trials").trials[0].state,
        State::Paused
    );
    let pid1: u32 = std::fs::read_to_string(work(1).join("pid-1"))
        .expect("pid")
        .trim()
        .parse()
        .expect("a pid");
    eventually("run 1 killed", || async { !running(pid1) }).await;

    // Restart the devmaster on the same state: nothing is lost.
    master.shutdown();
    let (master, client) = start(tmp.path(), Duration::from_secs(3600)).await;
    let again = client
        .get_experiment(id)
        .await
        .expect("experiment survives");
    assert_eq!(again.experiment.state, State::Paused);
    let ckpts = client
        .list_checkpoints(id, hr_det::wire::CheckpointSortBy::BatchNumber, false)
        .await
        .expect("list");
    let uuids: Vec<&str> = ckpts.checkpoints.iter().map(|c| c.uuid.as_str()).collect();
    assert_eq!(
        uuids,
        [
            "aaaaaaaa-0000-4000-a000-000000000001",
            "aaaaaaaa-0000-4000-a000-000000000003",
            "aaaaaaaa-0000-4000-a000-000000000002"
        ]
    );

    // Activate: run 2 restores the step-2 checkpoint with the latest report time.
    client
        .experiment_action(id, ExperimentAction::Activate)
        .await
        .expect("activate");
    eventually("run 2 wrote its env", || async {
        work(2).join("env-2.txt").exists()
    })
    .await;
    let env2 = std::fs::read_to_string(work(2).join("env-2.txt")).expect("env");
    let trial = &client.list_trials(id).await.expect("trials").trials[0];
    assert_eq!(
        (trial.state, trial.restarts),
        (State::Active, 0),
        "a kill the pause caused is no restart"
    );
    assert!(env2.contains("DET_TRIAL_RUN_ID=2"), "{env2}");
    assert!(env2.contains("DET_STEPS_COMPLETED=2"), "{env2}");
    assert!(
        env2.contains("DET_LATEST_CHECKPOINT=aaaaaaaa-0000-4000-a000-000000000002"),
        "{env2}"
    );

    // Kill: STOPPING_KILLED then CANCELED (there is no KILLED).
    client
        .experiment_action(id, ExperimentAction::Kill)
        .await
        .expect("kill");
    eventually("CANCELED", || async {
        client
            .get_experiment(id)
            .await
            .is_ok_and(|e| e.experiment.state == State::Canceled)
    })
    .await;
    master.shutdown();
}

#[tokio::test]
async fn a_failing_trial_is_restarted_up_to_max_restarts_then_errors() {
    let tmp = tempfile::tempdir().expect("tmp");
    let (master, client) = start(tmp.path(), Duration::from_secs(3600)).await;
    let exp = client
        .create_experiment(&config("exit 3", 2), None, true)
        .await
        .expect("create");
    let id = exp.experiment.id;
    eventually("ERROR after 2 restarts", || async {
        client
            .get_experiment(id)
            .await
            .is_ok_and(|e| e.experiment.state == State::Error)
    })
    .await;
    let trial = client
        .list_trials(id)
        .await
        .expect("trials")
        .trials
        .remove(0);
    assert_eq!((trial.restarts, trial.state), (3, State::Error));
    master.shutdown();
}

#[tokio::test]
async fn exit_zero_completes_and_commands_run_to_termination() {
    let tmp = tempfile::tempdir().expect("tmp");
    let (master, client) = start(tmp.path(), Duration::from_secs(3600)).await;
    let exp = client
        .create_experiment(&config("echo done", 0), None, true)
        .await
        .expect("create");
    eventually("COMPLETED", || async {
        client
            .get_experiment(exp.experiment.id)
            .await
            .is_ok_and(|e| e.experiment.state == State::Completed)
    })
    .await;
    let cmd = client
        .create_command(
            json!({"entrypoint": ["sh", "-c", "echo from-command; exit 4"]}),
            None,
        )
        .await
        .expect("cmd");
    eventually("command terminated", || async {
        client
            .get_command(&cmd.command.id)
            .await
            .is_ok_and(|c| c.command.state == hr_det::wire::TaskState::Terminated)
    })
    .await;
    let done = client.get_command(&cmd.command.id).await.expect("get");
    assert_eq!(done.command.exit_status.as_deref(), Some("4"));
    let logs = client.task_logs(&cmd.command.id).await.expect("logs");
    assert!(
        logs.iter().any(|l| l.log.contains("from-command")),
        "{logs:?}"
    );
    master.shutdown();
}

/// Whether `pid` runs (a zombie waiting to be reaped does not).
fn running(pid: u32) -> bool {
    std::fs::read_to_string(format!("/proc/{pid}/stat"))
        .ok()
        .and_then(|s| s.rfind(')').map(|i| !s[i + 2..].starts_with('Z')))
        .unwrap_or(false)
}

#[tokio::test]
async fn a_restarted_devmaster_stops_the_allocations_of_the_one_that_crashed() {
    let tmp = tempfile::tempdir().expect("tempdir");
    let pidfile = tmp.path().join("trial.pid");
    let (master, client) = start(&tmp.path().join("state"), Duration::from_secs(5)).await;
    let script = format!("echo $$ > {}; exec sleep 300", pidfile.display());
    let exp = client
        .create_experiment(&config(&script, 0), None, true)
        .await
        .expect("create");
    eventually("the trial runs", || async { pidfile.is_file() }).await;
    let pid: u32 = std::fs::read_to_string(&pidfile)
        .expect("pid")
        .trim()
        .parse()
        .expect("a pid");
    assert!(running(pid));
    // The devmaster dies; its trial process lives on, with a run the next devmaster replaces.
    master.abandon();
    std::fs::remove_file(&pidfile).expect("rm");
    let (master, client) = start(&tmp.path().join("state"), Duration::from_secs(5)).await;
    eventually("the old allocation is stopped", || async { !running(pid) }).await;
    eventually("a new allocation runs", || async { pidfile.is_file() }).await;
    let trials = client.list_trials(exp.experiment.id).await.expect("trials");
    assert_eq!(trials.trials[0].state, State::Active);
    master.shutdown();
}

#[tokio::test]
async fn large_configs_stay_out_of_the_snapshot_and_ended_trials_leave_no_session() {
    let tmp = tempfile::tempdir().expect("tmp");
    let (master, client) = start(tmp.path(), Duration::from_secs(3600)).await;
    // Under the 128 KiB a single environment string may hold (DET_EXPERIMENT_CONFIG).
    let big = "x".repeat(100_000);
    let mut ids = Vec::new();
    for _ in 0..2 {
        let yaml = format!("{}description: {big}\n", config("echo done", 0));
        let exp = client
            .create_experiment(&yaml, None, true)
            .await
            .expect("create");
        ids.push(exp.experiment.id);
    }
    for id in &ids {
        eventually("COMPLETED", || async {
            client
                .get_experiment(*id)
                .await
                .is_ok_and(|e| e.experiment.state == State::Completed)
        })
        .await;
    }
    let mut again = client.clone();
    again.login("determined", "").await.expect("login");
    let snapshot = std::fs::read(tmp.path().join("state.json")).expect("state.json");
    assert!(
        snapshot.len() < 64 << 10,
        "every change rewrites the snapshot: {} bytes",
        snapshot.len()
    );
    let snapshot: serde_json::Value = serde_json::from_slice(&snapshot).expect("json");
    assert_eq!(
        snapshot["session_scope"],
        json!({}),
        "the ended trials' tokens are gone"
    );
    master.shutdown();

    let (master, client) = start(tmp.path(), Duration::from_secs(3600)).await;
    for id in ids {
        let exp = client.get_experiment(id).await.expect("get");
        assert_eq!(exp.config["description"], json!(big), "the config survives");
    }
    master.shutdown();
}

/// What a trial's script wrote to `path`, trimmed.
fn read_trimmed(path: &std::path::Path) -> String {
    std::fs::read_to_string(path)
        .expect("written")
        .trim()
        .to_owned()
}

#[tokio::test]
async fn a_paused_allocation_can_publish_nothing_and_leaves_no_process_behind() {
    let tmp = tempfile::tempdir().expect("tempdir");
    let out = tmp.path().join("out");
    std::fs::create_dir_all(&out).expect("out");
    let (master, client) = start(&tmp.path().join("state"), Duration::from_secs(3600)).await;
    // A helper in the allocation's process group outlives the trial's own process.
    let script = format!(
        "cd {out:?}; echo $DET_SESSION_TOKEN > token; echo $DET_ALLOCATION_ID > alloc; \
         sleep 3600 & echo $! > helper.tmp && mv helper.tmp helper; exec sleep 3600"
    );
    let trial = create_trial(&client, &config(&script, 0)).await;
    eventually("the helper runs", || async { out.join("helper").is_file() }).await;
    let helper: u32 = read_trimmed(&out.join("helper")).parse().expect("pid");
    let token = read_trimmed(&out.join("token"));
    let alloc = read_trimmed(&out.join("alloc"));
    let task = trial.task_id.clone().expect("task");
    let own = hr_det::Client::new(client.master())
        .expect("client")
        .with_token(token);
    let publish = |step: i64| {
        let mut c = checkpoint(&task, 1, "", step, "2026-10-21T10:00:01Z");
        c.uuid = format!("bbbbbbbb-0000-4000-a000-{step:012}");
        c.allocation_id = Some(alloc.clone());
        let own = own.clone();
        async move { own.report_checkpoint(&c).await }
    };
    publish(1).await.expect("the running allocation publishes");
    client
        .experiment_action(trial.experiment_id, ExperimentAction::Pause)
        .await
        .expect("pause");
    eventually("the helper is killed with its allocation", || async {
        !running(helper)
    })
    .await;
    // The exit is recorded once the group is gone: from then on the token acts for nothing.
    // Waits on a read that changes nothing (a report tried before the exit is recorded would
    // still be kept: the allocation runs until then).
    eventually("the exit is recorded", || async {
        matches!(
            own.preemption(&alloc, 0).await,
            Err(hr_det::DetError::Forbidden(_))
        )
    })
    .await;
    assert!(
        matches!(publish(777).await, Err(hr_det::DetError::Forbidden(_))),
        "the token is refused"
    );
    client
        .experiment_action(trial.experiment_id, ExperimentAction::Activate)
        .await
        .expect("activate");
    let listed = client
        .list_checkpoints(
            trial.experiment_id,
            hr_det::wire::CheckpointSortBy::BatchNumber,
            false,
        )
        .await
        .expect("list");
    let steps: Vec<Option<i64>> = listed
        .checkpoints
        .iter()
        .map(Checkpoint::steps_completed)
        .collect();
    assert_eq!(
        steps,
        [Some(1)],
        "nothing the paused allocation sent was kept"
    );
    master.shutdown();
}

#[tokio::test]
async fn a_pause_activate_storm_never_fails_or_restarts_a_healthy_trial() {
    let tmp = tempfile::tempdir().expect("tempdir");
    let out = tmp.path().join("out");
    std::fs::create_dir_all(&out).expect("out");
    let (master, client) = start(&tmp.path().join("state"), Duration::from_secs(3600)).await;
    // `max_restarts: 0`: a single kill counted as a failure would end the trial in ERROR.
    let script = format!(
        "echo $$ > {out:?}/run.tmp && mv {out:?}/run.tmp {out:?}/run-$DET_TRIAL_RUN_ID; exec sleep 3600"
    );
    let trial = create_trial(&client, &config(&script, 0)).await;
    let id = trial.experiment_id;
    for run in 1..=5 {
        eventually("the allocation runs", || async {
            out.join(format!("run-{run}")).is_file()
        })
        .await;
        // A double click: the pause's kill races the activate, in either order.
        client
            .experiment_action(id, ExperimentAction::Pause)
            .await
            .expect("pause");
        client
            .experiment_action(id, ExperimentAction::Activate)
            .await
            .expect("activate");
    }
    eventually("the sixth allocation runs", || async {
        out.join("run-6").is_file()
    })
    .await;
    let trial = &client.list_trials(id).await.expect("trials").trials[0];
    assert_eq!((trial.state, trial.restarts), (State::Active, 0));
    // Four clients clicking at once, then a last activate: one allocation runs, none failed.
    let clicks = (0..4).map(|n| {
        let client = client.clone();
        tokio::spawn(async move {
            for i in 0..10 {
                let action = if (i + n) % 2 == 0 {
                    ExperimentAction::Pause
                } else {
                    ExperimentAction::Activate
                };
                client.experiment_action(id, action).await.expect("action");
            }
        })
    });
    for click in clicks.collect::<Vec<_>>() {
        click.await.expect("clicks");
    }
    client
        .experiment_action(id, ExperimentAction::Activate)
        .await
        .expect("activate");
    let pids = || -> Vec<u32> {
        std::fs::read_dir(&out)
            .expect("out")
            .flatten()
            .filter(|e| e.file_name().to_string_lossy().starts_with("run-"))
            .map(|e| read_trimmed(&e.path()).parse().expect("pid"))
            .filter(|pid| running(*pid))
            .collect()
    };
    eventually("an allocation runs after the storm", || async {
        !pids().is_empty()
    })
    .await;
    assert_eq!(pids().len(), 1, "one allocation at a time");
    let trial = &client.list_trials(id).await.expect("trials").trials[0];
    assert_eq!((trial.state, trial.restarts), (State::Active, 0));
    let exp = client.get_experiment(id).await.expect("get");
    assert_eq!(exp.experiment.state, State::Active);
    master.shutdown();
}

#[tokio::test]
async fn a_relative_state_folder_hands_trials_absolute_paths() {
    let tmp = tempfile::tempdir().expect("tempdir");
    // The state folder as a path relative to the test's working folder.
    let cwd = std::env::current_dir().expect("cwd");
    let up = "../".repeat(cwd.components().count() - 1);
    let relative = std::path::PathBuf::from(format!(
        "{up}{}",
        tmp.path()
            .join("state")
            .display()
            .to_string()
            .trim_start_matches('/')
    ));
    assert!(relative.is_relative());
    let marker = tmp.path().join("absolute");
    let (master, client) = crate::support::start_with(hr_devmaster::DevmasterConfig {
        preemption_timeout: Duration::from_secs(60),
        ..crate::support::default_config(&relative)
    })
    .await;
    // The trial runs in its own work folder: its paths must not be relative to another one.
    let script = format!(
        "case \"$DET_WORKDIR$HR_DET_INFO_DIR\" in /*/info) test -f \"$HR_DET_INFO_DIR/trial.json\" && touch {marker:?};; esac"
    );
    let exp = client
        .create_experiment(&config(&script, 0), None, true)
        .await
        .expect("create");
    eventually("COMPLETED", || async {
        client
            .get_experiment(exp.experiment.id)
            .await
            .is_ok_and(|e| e.experiment.state.is_terminal())
    })
    .await;
    assert!(marker.exists(), "the trial saw relative paths");
    master.shutdown();
}

#[tokio::test]
async fn live_trials_get_unique_ports_and_a_trial_that_left_frees_its_own() {
    let tmp = tempfile::tempdir().expect("tmp");
    let (master, client) = start(tmp.path(), Duration::from_secs(3600)).await;
    // Each trial records the ports it was handed, then waits.
    let script = "env | grep -E '^(DTRAIN_SSH|INTER_TRAIN_PROCESS_COMM|C10D)_PORT' | sort > p.tmp && mv p.tmp ports.txt; exec sleep 3600";
    let mut seen = Vec::new();
    let mut ids = Vec::new();
    for _ in 0..3 {
        let trial = create_trial(&client, &config(script, 0)).await;
        let task = trial.task_id.clone().expect("task id");
        let file = tmp.path().join("work").join(format!("{task}.1/ports.txt"));
        eventually("the trial wrote its ports", || async { file.exists() }).await;
        seen.push(std::fs::read_to_string(&file).expect("ports"));
        ids.push(trial.experiment_id);
        if ids.len() == 2 {
            // The first leaves: its ports are free for the next.
            client
                .experiment_action(ids[0], ExperimentAction::Kill)
                .await
                .expect("kill");
            eventually("the first trial ended", || async {
                client
                    .list_trials(ids[0])
                    .await
                    .is_ok_and(|t| t.trials[0].state.is_terminal())
            })
            .await;
        }
    }
    assert_eq!(
        seen[0],
        "C10D_PORT=29400\nDTRAIN_SSH_PORT=12350\nINTER_TRAIN_PROCESS_COMM_PORT_1=12360\n\
         INTER_TRAIN_PROCESS_COMM_PORT_2=12365\n"
    );
    assert_eq!(
        seen[1],
        "C10D_PORT=29401\nDTRAIN_SSH_PORT=12351\nINTER_TRAIN_PROCESS_COMM_PORT_1=12361\n\
         INTER_TRAIN_PROCESS_COMM_PORT_2=12366\n",
        "unique while the first runs"
    );
    assert_eq!(seen[2], seen[0], "the first's ports, freed");
    for id in &ids[1..] {
        client
            .experiment_action(*id, ExperimentAction::Kill)
            .await
            .expect("kill");
    }
    master.shutdown();
}
