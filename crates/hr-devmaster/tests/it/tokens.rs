//! Tokens act only for whom they were given: a logout revokes its token alone; a trial's token
//! acts for its own allocation only, a stale allocation's for nothing; another address needs
//! the configured password.

use std::time::Duration;

use hr_det::{
    Client, DetError, ExperimentAction,
    wire::{Checkpoint, CheckpointState, CheckpointTraining},
};
use serde_json::json;

use crate::support::{config, raw_response, start};

#[tokio::test]
async fn logout_revokes_the_token_and_only_that_one() {
    let tmp = tempfile::tempdir().expect("tmp");
    let (master, other) = start(tmp.path(), Duration::from_secs(3600)).await;
    let mut login = Client::new(master.url()).expect("client");
    login.login("determined", "").await.expect("login");
    // The token as a user would copy it into DET_USER_TOKEN.
    let addr = master.url().trim_start_matches("http://").to_owned();
    let body = r#"{"username":"determined","password":"","isHashed":false}"#;
    let head = format!(
        "POST /api/v1/auth/login HTTP/1.1\r\nHost: {addr}\r\nContent-Type: application/json"
    );
    let response = raw_response(&addr, &head, body).await;
    let json_start = response.find("{\"token\"").expect("a login response");
    let v: serde_json::Value = serde_json::from_str(&response[json_start..]).expect("json");
    let token = v["token"].as_str().expect("token").to_owned();
    let mut holder = Client::new(master.url())
        .expect("client")
        .with_token(token.clone());
    let copy = Client::new(master.url()).expect("client").with_token(token);
    copy.me().await.expect("the token works");
    holder.logout().await.expect("logout");
    assert!(
        matches!(copy.me().await, Err(DetError::Unauthenticated(_))),
        "a logged-out token is refused"
    );
    assert!(!holder.has_token(), "the client forgets its token");
    other.me().await.expect("other sessions live on");
    login.me().await.expect("other sessions live on");
    master.shutdown();
}

#[tokio::test]
async fn a_trials_token_acts_only_for_its_own_allocation() {
    let tmp = tempfile::tempdir().expect("tmp");
    let (master, client) = start(tmp.path(), Duration::from_secs(3600)).await;
    // Each trial writes its session token where the test can read it, then waits.
    let script =
        "printf %s \"$DET_SESSION_TOKEN\" > token.tmp && mv token.tmp token; exec sleep 3600";
    let mut trials = Vec::new();
    for _ in 0..2 {
        let trial = crate::support::create_trial(&client, &config(script, 0)).await;
        let allocation = format!("{}.1", trial.task_id.expect("task id"));
        let file = tmp.path().join("work").join(&allocation).join("token");
        crate::support::eventually("the trial wrote its token", || async { file.exists() }).await;
        let token = std::fs::read_to_string(&file).expect("token");
        trials.push((trial.id, trial.experiment_id, allocation, token));
    }
    let (own_trial, own_experiment, own_allocation, token) = &trials[0];
    let (other_trial, other_experiment, other_allocation, _) = &trials[1];
    let as_trial = Client::new(master.url())
        .expect("client")
        .with_token(token.clone());
    let forbidden = |r: Result<(), DetError>| match r {
        Err(DetError::Forbidden(_)) => {}
        other => panic!("expected 403 PermissionDenied, got {other:?}"),
    };
    forbidden(
        as_trial
            .report_metrics(*other_trial, 1, "training", 1, json!({"loss": 1.0}), None)
            .await,
    );
    forbidden(as_trial.report_progress(*other_trial, 0.5).await);
    forbidden(as_trial.ack_preemption(other_allocation).await);
    // Its own trial and allocation are fine, and a user's login may act for any.
    as_trial
        .report_metrics(*own_trial, 1, "training", 1, json!({"loss": 1.0}), None)
        .await
        .expect("own trial");
    as_trial
        .ack_preemption(own_allocation)
        .await
        .expect("own allocation");
    client
        .report_progress(*other_trial, 0.5)
        .await
        .expect("a user's login");
    // A trial's token changes nothing else: no experiments or commands (which run processes),
    // no pausing or killing, its own experiment's included.
    match as_trial
        .create_experiment(&config("true", 0), None, true)
        .await
    {
        Err(DetError::Forbidden(_)) => {}
        other => panic!("a trial's token created an experiment: {other:?}"),
    }
    match as_trial
        .create_command(json!({"entrypoint": ["true"]}), None)
        .await
    {
        Err(DetError::Forbidden(_)) => {}
        other => panic!("a trial's token created a command: {other:?}"),
    }
    for experiment in [own_experiment, other_experiment] {
        for action in [ExperimentAction::Pause, ExperimentAction::Kill] {
            forbidden(as_trial.experiment_action(*experiment, action).await);
        }
    }
    master.shutdown();
}

#[tokio::test]
async fn a_stale_allocations_token_acts_for_nothing() {
    let tmp = tempfile::tempdir().expect("tmp");
    let (master, client) = start(tmp.path(), Duration::from_secs(3600)).await;
    // The first allocation writes its token and fails; the restart writes its own and waits.
    let script = "printf %s \"$DET_SESSION_TOKEN\" > token.tmp && mv token.tmp token; \
                  [ \"$DET_TRIAL_RUN_ID\" = 1 ] && exit 1; exec sleep 3600";
    let trial = crate::support::create_trial(&client, &config(script, 1)).await;
    let task = trial.task_id.expect("task id");
    let token_of = |run: u32| {
        let file = tmp
            .path()
            .join("work")
            .join(format!("{task}.{run}"))
            .join("token");
        async move {
            crate::support::eventually("the allocation wrote its token", || async {
                file.exists()
            })
            .await;
            std::fs::read_to_string(&file).expect("token")
        }
    };
    let stale = Client::new(master.url())
        .expect("client")
        .with_token(token_of(1).await);
    let current = Client::new(master.url())
        .expect("client")
        .with_token(token_of(2).await);
    match stale
        .report_metrics(trial.id, 1, "training", 1, json!({"loss": 1.0}), None)
        .await
    {
        Err(DetError::Forbidden(m)) => assert!(m.contains("stale"), "{m}"),
        other => panic!("the stale token reported metrics: {other:?}"),
    }
    // A checkpoint report that names no allocation is the token's allocation's: refused too.
    let checkpoint = Checkpoint {
        uuid: "99999999-9999-4999-8999-999999999999".into(),
        task_id: Some(task.clone()),
        allocation_id: None,
        report_time: None,
        state: CheckpointState::Completed,
        resources: [("state.json".to_owned(), 3)].into(),
        metadata: json!({"steps_completed": 999}),
        training: CheckpointTraining::default(),
        storage_id: Some(1),
    };
    match stale.report_checkpoint(&checkpoint).await {
        Err(DetError::Forbidden(m)) => assert!(m.contains("stale"), "{m}"),
        other => panic!("the stale token published a checkpoint: {other:?}"),
    }
    current
        .report_metrics(trial.id, 2, "training", 1, json!({"loss": 1.0}), None)
        .await
        .expect("the current allocation's token");
    master.shutdown();
}

#[tokio::test]
async fn another_address_needs_a_password_and_then_every_login_needs_it() {
    let tmp = tempfile::tempdir().expect("tmp");
    let config = |listen: &str, password: Option<&str>| hr_devmaster::DevmasterConfig {
        listen: listen.parse().expect("addr"),
        state_dir: tmp.path().join("state"),
        trial_info: hr_devmaster::TrialInfo::Private,
        preemption_timeout: Duration::from_secs(60),
        record_requests: None,
        password: password.map(str::to_owned),
        tls: None,
        slots: 0,
    };
    let refused = hr_devmaster::Devmaster::start(config("0.0.0.0:0", None))
        .await
        .err()
        .expect("no password, not loopback");
    assert!(refused.to_string().contains("--password-file"), "{refused}");
    let wide = hr_devmaster::Devmaster::start(config("0.0.0.0:0", Some("s3cret")))
        .await
        .expect("with a password any address may serve");
    wide.shutdown();
    let master = hr_devmaster::Devmaster::start(config("127.0.0.1:0", Some("s3cret")))
        .await
        .expect("start");
    let mut client = Client::new(master.url()).expect("client");
    let empty = client.login("determined", "").await;
    assert!(
        matches!(empty, Err(DetError::Unauthenticated(_))),
        "{empty:?}"
    );
    client
        .login("admin", "s3cret")
        .await
        .expect("the configured password");
    master.shutdown();
}
