//! Each bad input gets the upstream status and envelope: requests before any trial runs, then
//! a running trial's reports and a terminal experiment's activation.

use std::time::Duration;

use hr_det::{
    Client, DetError, ExperimentAction,
    wire::{Checkpoint, CheckpointState, CheckpointTraining},
};
use serde_json::json;

use crate::support::{config, login_token, raw_response, start};

#[tokio::test]
async fn bad_inputs_get_the_upstream_status_and_envelope() {
    let tmp = tempfile::tempdir().expect("tmp");
    let (master, client) = start(tmp.path(), Duration::from_secs(3600)).await;

    // Malformed YAML: 400 InvalidArgument naming line and column.
    let err = client
        .create_experiment("name: [unclosed\n", None, false)
        .await
        .expect_err("bad yaml");
    assert!(
        matches!(err, DetError::InvalidRequest(ref m) if m.contains("line") && m.contains("column")),
        "{err}"
    );
    // A config Determined's schema rejects.
    let err = client
        .create_experiment("name: x\nmax_restarts: -1\n", None, false)
        .await
        .expect_err("schema");
    assert!(
        matches!(err, DetError::InvalidRequest(ref m) if m.contains("max_restarts")),
        "{err}"
    );

    // Storage that keeps no folder on this machine, or a storage_path outside host_path: its
    // trials could not run here, so creation refuses it naming the field.
    for (storage, field) in [
        ("{type: s3, bucket: b}", "checkpoint_storage.type"),
        (
            "{type: shared_fs, host_path: /mnt/share, storage_path: ../elsewhere}",
            "storage_path",
        ),
    ] {
        let err = client
            .create_experiment(
                &format!("{}checkpoint_storage: {storage}\n", config("true", 0)),
                None,
                false,
            )
            .await
            .expect_err(storage);
        assert!(
            matches!(err, DetError::InvalidRequest(ref m) if m.contains(field)),
            "{storage}: {err}"
        );
    }

    // Unknown id: 404 NotFound.
    assert!(matches!(
        client.get_experiment(999).await,
        Err(DetError::NotFound(_))
    ));
    assert!(matches!(
        client.experiment_action(999, ExperimentAction::Pause).await,
        Err(DetError::NotFound(_))
    ));

    // Missing or invalid token: 401.
    let anonymous = Client::new(master.url())
        .expect("client")
        .with_token("not-a-session".into());
    assert!(matches!(
        anonymous.get_experiment(1).await,
        Err(DetError::Unauthenticated(_))
    ));
    let raw = reqwest_free_get(master.url(), "/api/v1/me").await;
    assert!(raw.starts_with("HTTP/1.1 401"), "{raw}");
    assert!(raw.contains(r#""reason":"Unauthenticated""#), "{raw}");

    // A route it does not serve, or a method it does not serve on a route: Determined's envelope
    // naming it, never an empty answer.
    let raw = reqwest_free_get(master.url(), "/api/v1/no/such/route").await;
    assert!(raw.starts_with("HTTP/1.1 404"), "{raw}");
    assert!(
        raw.contains(r#""reason":"NotFound""#)
            && raw.contains("GET /api/v1/no/such/route is not served by the devmaster"),
        "{raw}"
    );
    let raw = reqwest_free_get(master.url(), "/api/v1/auth/login").await;
    assert!(
        raw.starts_with("HTTP/1.1 404") && raw.contains("GET /api/v1/auth/login is not served"),
        "{raw}"
    );
    master.shutdown();
}

#[tokio::test]
async fn a_running_trials_bad_reports_and_a_terminal_activate_get_the_upstream_status() {
    let tmp = tempfile::tempdir().expect("tmp");
    let (master, client) = start(tmp.path(), Duration::from_secs(3600)).await;

    // A running trial: wrong trialRunId is 400; a duplicate UUID is 500 Unknown.
    let exp = client
        .create_experiment(&config("exec sleep 3600", 0), None, true)
        .await
        .expect("create");
    let trials = client.list_trials(exp.experiment.id).await.expect("trials");
    let trial = &trials.trials[0];
    let err = client
        .report_metrics(trial.id, 7, "training", 1, json!({"loss": 1.0}), None)
        .await
        .expect_err("stale run");
    assert!(
        matches!(err, DetError::InvalidRequest(ref m) if m.contains("invalid run id")),
        "{err}"
    );
    client
        .report_metrics(trial.id, 1, "training", 1, json!({"loss": 1.0}), None)
        .await
        .expect("current run");
    // Both storages a 0.35 master accepts on a shared filesystem start a run; any other storage
    // is a 400 the client does not retry (never a 5xx it would retry forever).
    for storage in [
        json!({"type": "directory", "container_path": "/tmp/x"}),
        json!({"type": "shared_fs", "host_path": "/tmp", "storage_path": "x"}),
    ] {
        client
            .runs_start(trial.id, storage)
            .await
            .expect("runs/start");
    }
    let err = client
        .runs_start(trial.id, json!({"type": "s3", "bucket": "b"}))
        .await
        .expect_err("s3");
    assert!(
        matches!(err, DetError::InvalidRequest(ref m) if m.contains("not supported by the devmaster")),
        "{err}"
    );
    let task = trial.task_id.clone().expect("task id");
    let ckpt = Checkpoint {
        uuid: "11111111-2222-4333-a444-555555555555".into(),
        task_id: Some(task.clone()),
        allocation_id: Some(format!("{task}.1")),
        report_time: None,
        state: CheckpointState::Completed,
        resources: [("state.json".to_owned(), 3)].into(),
        metadata: json!({"steps_completed": 1}),
        training: CheckpointTraining::default(),
        storage_id: Some(1),
    };
    client.report_checkpoint(&ckpt).await.expect("first report");
    let err = client
        .report_checkpoint(&ckpt)
        .await
        .expect_err("duplicate");
    assert!(
        matches!(err, DetError::Api { status: 500, ref message } if message.contains("duplicate key")),
        "{err}"
    );
    // Fencing: another allocation of the trial (a stale one) cannot publish.
    let stale = Checkpoint {
        uuid: "11111111-2222-4333-a444-666666666666".into(),
        allocation_id: Some(format!("{task}.0")),
        ..ckpt.clone()
    };
    let err = client.report_checkpoint(&stale).await.expect_err("stale");
    assert!(
        matches!(err, DetError::InvalidRequest(ref m) if m.contains("not the trial's current allocation")),
        "{err}"
    );
    // A replayed metrics report is recognised and not counted twice.
    client
        .report_metrics(trial.id, 1, "training", 1, json!({"loss": 1.0}), None)
        .await
        .expect("replayed report");
    let metrics = client
        .trial_metrics(trial.id, "training")
        .await
        .expect("metrics read");
    assert_eq!(metrics.len(), 1);
    assert_eq!(metrics[0].trial_run_id, 1);

    // Activating a terminal experiment is a failed precondition (400).
    client
        .experiment_action(exp.experiment.id, ExperimentAction::Kill)
        .await
        .expect("kill");
    crate::support::eventually("kill ends as CANCELED", || async {
        client
            .get_experiment(exp.experiment.id)
            .await
            .is_ok_and(|e| e.experiment.state == hr_det::wire::State::Canceled)
    })
    .await;
    let err = client
        .experiment_action(exp.experiment.id, ExperimentAction::Activate)
        .await
        .expect_err("terminal");
    assert!(
        matches!(err, DetError::InvalidRequest(ref m) if m.contains("incompatible")),
        "{err}"
    );
    master.shutdown();
}

/// A bare HTTP/1.1 GET without any client library, returning the raw response.
async fn reqwest_free_get(base: &str, path: &str) -> String {
    use tokio::io::{AsyncReadExt, AsyncWriteExt};
    let addr = base.trim_start_matches("http://");
    let mut stream = tokio::net::TcpStream::connect(addr).await.expect("connect");
    stream
        .write_all(
            format!("GET {path} HTTP/1.1\r\nHost: {addr}\r\nConnection: close\r\n\r\n").as_bytes(),
        )
        .await
        .expect("write");
    let mut out = String::new();
    stream.read_to_string(&mut out).await.expect("read");
    out
}

#[tokio::test]
async fn session_tokens_are_never_written_to_the_state_folder() {
    use tokio::io::{AsyncReadExt, AsyncWriteExt};
    let tmp = tempfile::tempdir().expect("tmp");
    let (master, _client) = start(tmp.path(), Duration::from_secs(3600)).await;
    let addr = master.url().trim_start_matches("http://").to_owned();
    // `isHashed` is optional, as for the master (an empty password hashes to itself).
    let body = r#"{"username":"determined","password":""}"#;
    let mut stream = tokio::net::TcpStream::connect(&addr)
        .await
        .expect("connect");
    let request = format!(
        "POST /api/v1/auth/login HTTP/1.1\r\nHost: {addr}\r\nContent-Type: application/json\r\nContent-Length: {}\r\nConnection: close\r\n\r\n{body}",
        body.len()
    );
    stream.write_all(request.as_bytes()).await.expect("write");
    let mut response = String::new();
    stream.read_to_string(&mut response).await.expect("read");
    let json_start = response.find("{\"token\"").expect("a login response");
    let v: serde_json::Value = serde_json::from_str(&response[json_start..]).expect("json");
    let token = v["token"].as_str().expect("token");
    assert!(token.len() >= 32);
    let state = std::fs::read_to_string(tmp.path().join("state.json")).expect("state.json");
    assert!(
        !state.contains(token),
        "the token itself must not be persisted"
    );
    master.shutdown();
}

/// Sends one raw HTTP/1.1 request and returns the status code.
async fn raw_status(addr: &str, head: &str, body: &str) -> u16 {
    raw_response(addr, head, body)
        .await
        .split_whitespace()
        .nth(1)
        .and_then(|c| c.parse().ok())
        .expect("a status line")
}

#[tokio::test]
async fn foreign_hosts_and_bodies_declared_as_non_json_are_refused() {
    let tmp = tempfile::tempdir().expect("tmp");
    let (master, _client) = start(tmp.path(), Duration::from_secs(3600)).await;
    let addr = master.url().trim_start_matches("http://").to_owned();
    let body = r#"{"username":"determined","password":"","isHashed":true}"#;
    let login = |host: &str, content_type: &str| {
        format!("POST /api/v1/auth/login HTTP/1.1\r\nHost: {host}{content_type}")
    };
    let json = "\r\nContent-Type: application/json";
    assert_eq!(raw_status(&addr, &login(&addr, json), body).await, 200);
    // A DNS-rebinding page reaches the port under its own name.
    assert_eq!(
        raw_status(&addr, &login("evil.example:80", json), body).await,
        421
    );
    // A browser's simple request (no preflight) declares text/plain.
    let plain = "\r\nContent-Type: text/plain";
    assert_eq!(raw_status(&addr, &login(&addr, plain), body).await, 415);
    let form = "\r\nContent-Type: application/x-www-form-urlencoded";
    assert_eq!(raw_status(&addr, &login(&addr, form), body).await, 415);
    // `det user login` sends its JSON body without declaring it.
    assert_eq!(raw_status(&addr, &login(&addr, ""), body).await, 200);
}

#[tokio::test]
async fn a_master_that_cannot_persist_its_state_answers_503_to_everything() {
    let tmp = tempfile::tempdir().expect("tmp");
    let state = tmp.path().join("state");
    let (master, client) = start(&state, Duration::from_secs(3600)).await;
    let addr = master.url().trim_start_matches("http://").to_owned();
    let client = client.with_retry(hr_det::RetryPolicy {
        attempts: 1,
        base_delay: Duration::from_millis(1),
        max_delay: Duration::from_millis(1),
    });
    // The state folder disappears (a full or lost disk): the next change cannot be persisted.
    std::fs::remove_dir_all(&state).expect("remove the state folder");
    std::fs::write(&state, b"not a folder").expect("block it");
    let created = client
        .create_experiment(
            "name: x\nentrypoint: [\"true\"]\nsearcher: {name: single, metric: loss, max_length: {batches: 1}}\n",
            None,
            false,
        )
        .await;
    assert!(
        created.is_err(),
        "the change was not persisted, so it is not reported as done"
    );
    assert!(master.failure().is_some());
    let get = format!("GET /api/v1/master HTTP/1.1\r\nHost: {addr}");
    assert_eq!(
        raw_status(&addr, &get, "").await,
        503,
        "every later request is refused"
    );
}

#[tokio::test]
async fn recorded_requests_hold_no_password_and_only_their_owner_reads_them() {
    use std::os::unix::fs::PermissionsExt;
    let tmp = tempfile::tempdir().expect("tmp");
    let recording = tmp.path().join("requests.jsonl");
    let master = hr_devmaster::Devmaster::start(hr_devmaster::DevmasterConfig {
        listen: "127.0.0.1:0".parse().expect("addr"),
        state_dir: tmp.path().join("state"),
        trial_info: hr_devmaster::TrialInfo::Private,
        preemption_timeout: Duration::from_secs(60),
        record_requests: Some(recording.clone()),
        password: Some("s3cret-pw".to_owned()),
        tls: None,
        slots: 0,
    })
    .await
    .expect("start");
    let mut client = Client::new(master.url()).expect("client");
    client.login("admin", "s3cret-pw").await.expect("login");
    master.shutdown();
    let text = std::fs::read_to_string(&recording).expect("recording");
    assert!(text.contains("/api/v1/auth/login"), "{text}");
    assert!(!text.contains("s3cret-pw"), "{text}");
    assert!(text.contains("\"password\":\"<redacted>\""), "{text}");
    let mode = std::fs::metadata(&recording)
        .expect("meta")
        .permissions()
        .mode();
    assert_eq!(mode & 0o077, 0, "mode {mode:o}");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn requests_recorded_at_once_stay_one_whole_line_each() {
    let tmp = tempfile::tempdir().expect("tmp");
    let recording = tmp.path().join("requests.jsonl");
    let master = hr_devmaster::Devmaster::start(hr_devmaster::DevmasterConfig {
        listen: "127.0.0.1:0".parse().expect("addr"),
        state_dir: tmp.path().join("state"),
        trial_info: hr_devmaster::TrialInfo::Private,
        preemption_timeout: Duration::from_secs(60),
        record_requests: Some(recording.clone()),
        password: None,
        tls: None,
        slots: 0,
    })
    .await
    .expect("start");
    // Many logins at once, each with a body of many JSON tokens (valid ones: a failed login
    // waits out its delay).
    let addr = master.url().trim_start_matches("http://").to_owned();
    let logins = (0..64).map(|i| {
        let addr = addr.clone();
        tokio::spawn(async move {
            let body = json!({"username": "determined", "password": "",
                "padding": vec![format!("x-{i}"); 2000]});
            let head = format!("POST /api/v1/auth/login HTTP/1.1\r\nHost: {addr}");
            raw_response(&addr, &head, &body.to_string()).await;
        })
    });
    for login in logins.collect::<Vec<_>>() {
        login.await.expect("join");
    }
    master.shutdown();
    let text = std::fs::read_to_string(&recording).expect("recording");
    let lines: Vec<&str> = text.lines().collect();
    assert_eq!(lines.len(), 64);
    for line in lines {
        let v: serde_json::Value = serde_json::from_str(line).expect("a whole JSON line");
        assert_eq!(v["path"], "/api/v1/auth/login");
    }
}

/// Sends `head` (with its own Content-Length) and the first `sent` bytes of the body, keeps the
/// connection open, and returns the response's status line and envelope.
async fn partial_request(addr: &str, head: &str, sent: &str) -> String {
    use tokio::io::{AsyncReadExt, AsyncWriteExt};
    let mut stream = tokio::net::TcpStream::connect(addr).await.expect("connect");
    stream
        .write_all(format!("{head}\r\n\r\n{sent}").as_bytes())
        .await
        .expect("write");
    let mut response = vec![0; 4096];
    let n = stream.read(&mut response).await.expect("read");
    String::from_utf8_lossy(&response[..n]).into_owned()
}

#[tokio::test]
async fn a_body_is_read_only_from_a_signed_in_caller_and_never_waited_for_beyond_its_timeout() {
    let tmp = tempfile::tempdir().expect("tmp");
    let (master, client) = start(tmp.path(), Duration::from_secs(3600)).await;
    let addr = master.url().trim_start_matches("http://").to_owned();
    // 128 MiB announced, none sent, no token: refused at once, nothing read.
    let head = |token: &str, length: usize| {
        format!(
            "POST /api/v1/experiments HTTP/1.1\r\nHost: {addr}{token}\r\nContent-Length: {length}"
        )
    };
    let answer = tokio::time::timeout(
        Duration::from_secs(120),
        partial_request(&addr, &head("", 128 << 20), ""),
    )
    .await
    .expect("answered without the body");
    assert!(answer.starts_with("HTTP/1.1 401"), "{answer}");
    assert!(answer.contains(r#""code":16"#), "the envelope: {answer}");
    // A body above its route's limit: 413 in the envelope, whoever sends it.
    let _ = client;
    let token = login_token(&addr).await;
    let bearer = format!("\r\nAuthorization: Bearer {token}");
    let metrics = format!(
        "POST /api/v1/trials/1/metrics HTTP/1.1\r\nHost: {addr}{bearer}\r\nContent-Length: {}",
        3 << 20
    );
    let answer = partial_request(&addr, &metrics, "{").await;
    assert!(answer.starts_with("HTTP/1.1 413"), "{answer}");
    assert!(answer.contains(r#""code":8"#), "the envelope: {answer}");
    master.shutdown();
}

#[tokio::test(start_paused = true)]
async fn a_trickled_body_is_cut_off_after_the_body_timeout() {
    let tmp = tempfile::tempdir().expect("tmp");
    let (master, _client) = start(tmp.path(), Duration::from_secs(3600)).await;
    let addr = master.url().trim_start_matches("http://").to_owned();
    // A login (read without a session) that never finishes its body: with the clock paused,
    // tokio advances it to the body timeout as soon as nothing else can run.
    let head = format!("POST /api/v1/auth/login HTTP/1.1\r\nHost: {addr}\r\nContent-Length: 100");
    let answer = partial_request(&addr, &head, r#"{"username": "#).await;
    assert!(answer.starts_with("HTTP/1.1 408"), "{answer}");
    assert!(answer.contains("did not arrive within 60 s"), "{answer}");
    master.shutdown();
}

#[tokio::test(start_paused = true)]
async fn failed_logins_are_answered_one_at_a_time_after_a_delay() {
    let tmp = tempfile::tempdir().expect("tmp");
    let (master, _client) = start(tmp.path(), Duration::from_secs(3600)).await;
    let started = tokio::time::Instant::now();
    let tries = (0..3).map(|_| {
        let url = master.url().to_owned();
        tokio::spawn(async move {
            let mut client = Client::new(&url).expect("client");
            client.login("determined", "wrong").await
        })
    });
    for t in tries.collect::<Vec<_>>() {
        let answer = t.await.expect("join");
        assert!(
            matches!(answer, Err(DetError::Unauthenticated(_))),
            "{answer:?}"
        );
    }
    // The clock is tokio's paused one: it moves only by the delays the master waits.
    assert!(
        started.elapsed() >= Duration::from_secs(3),
        "{:?}",
        started.elapsed()
    );
    master.shutdown();
}

#[tokio::test]
async fn what_axum_would_refuse_in_plain_text_comes_in_the_envelope() {
    let tmp = tempfile::tempdir().expect("tmp");
    let (master, _client) = start(tmp.path(), Duration::from_secs(3600)).await;
    let addr = master.url().trim_start_matches("http://").to_owned();
    let token = login_token(&addr).await;
    let answer = raw_response(
        &addr,
        &format!(
            "GET /api/v1/experiments/not-a-number HTTP/1.1\r\nHost: {addr}\r\nAuthorization: Bearer {token}"
        ),
        "",
    )
    .await;
    assert!(answer.starts_with("HTTP/1.1 400"), "{answer}");
    let body = &answer[answer.find("\r\n\r\n").expect("a body") + 4..];
    let envelope: serde_json::Value = serde_json::from_str(body).expect("the envelope");
    assert_eq!(envelope["error"]["code"], 3, "{envelope}");
    master.shutdown();
}
