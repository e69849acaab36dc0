//! Checkpoint garbage collection at the experiment's end, with 0.35's retention rules.

use std::time::Duration;

use hr_det::ExperimentAction;
use hr_det::wire::{Checkpoint, CheckpointSortBy, CheckpointState, CheckpointTraining, State};
use serde_json::json;

use crate::support::{eventually, start};

/// A completed checkpoint of `task`'s first allocation at `step`.
fn checkpoint(task: &str, uuid: String, step: u64) -> Checkpoint {
    Checkpoint {
        uuid,
        task_id: Some(task.to_owned()),
        allocation_id: Some(format!("{task}.1")),
        report_time: None,
        state: CheckpointState::Completed,
        resources: [("state.json".to_owned(), 2)].into(),
        metadata: json!({"steps_completed": step}),
        training: CheckpointTraining::default(),
        storage_id: Some(1),
    }
}

/// Kills experiment `id`, waits until it ends (its GC ran) and lists its checkpoints by step.
async fn end_and_list(client: &hr_det::Client, id: i32) -> hr_det::wire::CheckpointsResponse {
    client
        .experiment_action(id, ExperimentAction::Kill)
        .await
        .expect("kill");
    eventually("the experiment ends", || async {
        client
            .get_experiment(id)
            .await
            .is_ok_and(|e| e.experiment.state == State::Canceled)
    })
    .await;
    client
        .list_checkpoints(id, CheckpointSortBy::BatchNumber, false)
        .await
        .expect("list")
}

async fn gc_run(retention: &str) -> (Vec<(u64, bool, CheckpointState)>, tempfile::TempDir) {
    let dir = tempfile::tempdir().expect("tempdir");
    let storage = dir.path().join("ckpts");
    let (master, client) = start(&dir.path().join("state"), Duration::from_secs(5)).await;
    let config = format!(
        "name: gc\nentrypoint: \"exec sleep 3600\"\nsearcher: {{name: single, metric: loss, max_length: {{batches: 6}}}}\n\
         resources: {{slots_per_trial: 0}}\nmax_restarts: 0\n\
         checkpoint_storage: {{type: directory, container_path: {:?}{retention}}}\n",
        storage.display().to_string()
    );
    let trial = crate::support::create_trial(&client, &config).await;
    let task = trial.task_id.clone().expect("task id");
    for step in 1..=6u64 {
        let uuid = format!("00000000-0000-4000-a000-00000000000{step}");
        std::fs::create_dir_all(storage.join(&uuid)).expect("folder");
        std::fs::write(storage.join(&uuid).join("state.json"), "{}").expect("file");
        client
            .report_checkpoint(&checkpoint(&task, uuid, step))
            .await
            .expect("report");
    }
    let listed = end_and_list(&client, trial.experiment_id).await;
    let out = listed
        .checkpoints
        .iter()
        .map(|c| {
            let step = c
                .steps_completed()
                .and_then(|s| u64::try_from(s).ok())
                .unwrap_or(0);
            (step, storage.join(&c.uuid).is_dir(), c.state)
        })
        .collect();
    master.shutdown();
    (out, dir)
}

#[tokio::test]
async fn upstream_defaults_keep_only_the_latest_checkpoint() {
    let (listed, _dir) = gc_run("").await;
    for (step, present, state) in listed {
        let kept = step == 6;
        assert_eq!(present, kept, "step {step} files");
        let expected = if kept {
            CheckpointState::Completed
        } else {
            CheckpointState::Deleted
        };
        assert_eq!(state, expected, "step {step}");
    }
}

#[tokio::test]
async fn explicit_retention_keeps_every_checkpoint_it_names() {
    let (listed, _dir) =
        gc_run(", save_experiment_best: 0, save_trial_best: 0, save_trial_latest: 6").await;
    assert_eq!(listed.len(), 6);
    assert!(
        listed
            .iter()
            .all(|(_, present, state)| *present && *state == CheckpointState::Completed)
    );
}

#[tokio::test]
async fn a_checkpoint_uuid_must_be_a_uuid_so_gc_deletes_nothing_outside_the_storage() {
    let dir = tempfile::tempdir().expect("tempdir");
    let storage = dir.path().join("ckpts");
    // What a uuid of "", "..", "../victim" or an absolute path would have named.
    let victim = dir.path().join("victim");
    std::fs::create_dir_all(&victim).expect("victim");
    std::fs::create_dir_all(storage.join("other-experiment")).expect("neighbour");
    let (master, client) = start(&dir.path().join("state"), Duration::from_secs(5)).await;
    let config = format!(
        "name: gc\nentrypoint: \"exec sleep 3600\"\nsearcher: {{name: single, metric: loss, max_length: {{batches: 6}}}}\n\
         resources: {{slots_per_trial: 0}}\nmax_restarts: 0\n\
         checkpoint_storage: {{type: directory, container_path: {:?}, save_trial_latest: 1, save_trial_best: 0}}\n",
        storage.display().to_string()
    );
    let trial = crate::support::create_trial(&client, &config).await;
    let task = trial.task_id.clone().expect("task id");
    let report = |uuid: String, step: u64| {
        let c = checkpoint(&task, uuid, step);
        let client = client.clone();
        async move { client.report_checkpoint(&c).await }
    };
    let absolute = victim.display().to_string();
    for bad in ["", ".", "..", "../victim", absolute.as_str(), "not-a-uuid"] {
        match report(bad.to_owned(), 1).await {
            Err(hr_det::DetError::InvalidRequest(why)) => {
                assert!(why.contains("is not a UUID"), "{bad:?}: {why}");
            }
            other => panic!("{bad:?}: {other:?}"),
        }
    }
    // A report naming another task than its allocation's is refused.
    let mut other = checkpoint(&task, "cccccccc-0000-4000-a000-000000000001".to_owned(), 1);
    other.task_id = Some("9.another-task".to_owned());
    let foreign = client.report_checkpoint(&other).await;
    assert!(
        matches!(&foreign, Err(hr_det::DetError::InvalidRequest(m)) if m.contains("is not an allocation of task")),
        "{foreign:?}"
    );
    // Other spellings of a UUID would name another folder than the one GC and restore use.
    for other in [
        "AAAAAAAA-0000-4000-A000-000000000001",
        "aaaaaaaa00004000a000000000000001",
    ] {
        let refused = report(other.to_owned(), 1).await;
        assert!(
            matches!(&refused, Err(hr_det::DetError::InvalidRequest(m)) if m.contains("canonical form")),
            "{other}: {refused:?}"
        );
    }
    for step in [1, 2] {
        report(format!("aaaaaaaa-0000-4000-a000-00000000000{step}"), step)
            .await
            .expect("a canonical uuid");
    }
    for step in [1, 2] {
        let folder = storage.join(format!("aaaaaaaa-0000-4000-a000-00000000000{step}"));
        std::fs::create_dir_all(&folder).expect("folder");
    }
    let listed = end_and_list(&client, trial.experiment_id).await;
    let uuids: Vec<(&str, CheckpointState)> = listed
        .checkpoints
        .iter()
        .map(|c| (c.uuid.as_str(), c.state))
        .collect();
    assert_eq!(
        uuids,
        [
            (
                "aaaaaaaa-0000-4000-a000-000000000001",
                CheckpointState::Deleted
            ),
            (
                "aaaaaaaa-0000-4000-a000-000000000002",
                CheckpointState::Completed
            )
        ]
    );
    assert!(
        !storage
            .join("aaaaaaaa-0000-4000-a000-000000000001")
            .exists()
    );
    assert!(
        storage
            .join("aaaaaaaa-0000-4000-a000-000000000002")
            .is_dir()
    );
    assert!(victim.is_dir() && storage.join("other-experiment").is_dir());
    master.shutdown();
}
