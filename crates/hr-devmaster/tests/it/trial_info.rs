//! Where trials find `/run/determined/info`: each its own (a private mount namespace), so trials
//! running at once never read one another's identity and the host's folder is never written;
//! or, with one shared folder, one trial at a time, the folder cleared after each.

use std::{path::Path, time::Duration};

use hr_det::{
    Client,
    wire::{State, Trial},
};
use hr_devmaster::{Devmaster, DevmasterConfig, TrialInfo};
use serde_json::Value;

async fn start(dir: &Path, trial_info: TrialInfo) -> (Devmaster, Client) {
    crate::support::start_with(DevmasterConfig {
        trial_info,
        ..crate::support::default_config(&dir.join("state"))
    })
    .await
}

/// Creates three experiments whose trials run `script`; returns their trials.
async fn three_trials(client: &Client, script: &str) -> Vec<Trial> {
    let mut trials = Vec::new();
    for _ in 0..3 {
        let yaml = crate::support::config(script, 0);
        trials.push(crate::support::create_trial(client, &yaml).await);
    }
    trials
}

/// The trial id in the `trial.json` copy a trial left in its work folder, if it did.
fn copied_identity(state: &Path, trial: &Trial) -> Option<i64> {
    let own = state
        .join("work")
        .join(format!("{}.1", trial.task_id.as_deref()?))
        .join("own.json");
    let text = std::fs::read(own).ok()?;
    serde_json::from_slice::<Value>(&text).ok()?["trial_id"].as_i64()
}

async fn wait_completed(client: &Client, trials: &[Trial]) {
    for trial in trials {
        crate::support::eventually("the trial completes", || async {
            client
                .list_trials(trial.experiment_id)
                .await
                .is_ok_and(|t| t.trials[0].state == State::Completed)
        })
        .await;
    }
}

#[tokio::test]
async fn trials_running_at_once_each_read_their_own_info_and_the_host_folder_stays_untouched() {
    let tmp = tempfile::tempdir().expect("tmp");
    let gate = tmp.path().join("go");
    let (master, client) = start(tmp.path(), TrialInfo::Private).await;
    assert!(
        master.trial_info().contains("each sees its own"),
        "this machine must allow a private mount namespace: {}",
        master.trial_info()
    );
    // Each trial copies the identity it sees, then waits until all three have: they overlap.
    let script = format!(
        "cp /run/determined/info/trial.json own.json && while [ ! -e {} ]; do sleep 0.05; done",
        gate.display()
    );
    let trials = three_trials(&client, &script).await;
    let state = tmp.path().join("state");
    for trial in &trials {
        crate::support::eventually("the trial copied its info", || async {
            copied_identity(&state, trial).is_some()
        })
        .await;
    }
    for trial in &trials {
        assert_eq!(
            copied_identity(&state, trial),
            Some(i64::from(trial.id)),
            "trial {} read another trial's identity",
            trial.id
        );
    }
    std::fs::write(&gate, b"").expect("gate");
    wait_completed(&client, &trials).await;
    let url = master.url().to_owned();
    master.shutdown();
    let host =
        std::fs::read_to_string(Path::new("/run/determined/info/cluster.json")).unwrap_or_default();
    assert!(
        !host.contains(&url),
        "the host's info folder names this master"
    );
}

#[tokio::test]
async fn with_one_shared_folder_trials_take_turns_and_it_is_left_empty() {
    let tmp = tempfile::tempdir().expect("tmp");
    let shared = tmp.path().join("info");
    let (master, client) = start(tmp.path(), TrialInfo::Shared(shared.clone())).await;
    assert!(master.trial_info().contains("one at a time"));
    // A trial notes an overlap if another holds the lock, copies the shared identity, and
    // waits for its own go-ahead from the test.
    let lock = tmp.path().join("lock");
    let overlap = tmp.path().join("overlap");
    let script = format!(
        "[ -e {lock} ] && touch {overlap}; touch {lock}; cp {info}/trial.json own.json; \
         while [ ! -e {gate}-$DET_TRIAL_ID ]; do sleep 0.05; done; rm {lock}",
        lock = lock.display(),
        overlap = overlap.display(),
        info = shared.display(),
        gate = tmp.path().join("go").display(),
    );
    let trials = three_trials(&client, &script).await;
    let state = tmp.path().join("state");
    let mut waiting = trials.clone();
    while !waiting.is_empty() {
        // One trial runs at a time: find it by the copy it made, check it, let it finish.
        let mut running = None;
        for _ in 0..2400 {
            running = waiting
                .iter()
                .position(|t| copied_identity(&state, t).is_some());
            if running.is_some() {
                break;
            }
            tokio::time::sleep(Duration::from_millis(50)).await;
        }
        let trial = waiting.remove(running.expect("a trial takes its turn"));
        assert_eq!(
            copied_identity(&state, &trial),
            Some(i64::from(trial.id)),
            "trial {} read another trial's identity",
            trial.id
        );
        std::fs::write(tmp.path().join(format!("go-{}", trial.id)), b"").expect("gate");
    }
    wait_completed(&client, &trials).await;
    assert!(
        !overlap.exists(),
        "two trials ran at once on the shared folder"
    );
    master.shutdown();
    let left: Vec<_> = std::fs::read_dir(&shared)
        .expect("shared folder")
        .map(|e| e.expect("entry").file_name())
        .collect();
    assert!(left.is_empty(), "left behind: {left:?}");
}
