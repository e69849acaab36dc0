//! A model definition sent with the experiment (`det experiment create CONFIG DIR`) is what the
//! trial's entrypoint finds in its work folder; `DELETE /api/v1/experiments/{id}` removes an
//! ended experiment for good (a restart does not bring it back) and refuses a running one.

use std::time::Duration;

use base64::Engine;
use hr_det::wire::State;
use serde_json::{Value, json};

use crate::support::{eventually, login_token, raw_response, start};

/// Sends `method path` with `body` as the user; returns the status line and the body.
async fn call(addr: &str, token: &str, method: &str, path: &str, body: &str) -> (String, String) {
    let head = format!("{method} {path} HTTP/1.1\r\nHost: {addr}\r\nAuthorization: Bearer {token}");
    let response = raw_response(addr, &head, body).await;
    let (head, body) = response.split_once("\r\n\r\n").unwrap_or((&response, ""));
    (
        head.lines().next().unwrap_or_default().to_owned(),
        body.to_owned(),
    )
}

/// Creates an experiment from a raw request `body` (a config and a model definition).
async fn create(addr: &str, token: &str, body: &Value) -> (String, String) {
    call(
        addr,
        token,
        "POST",
        "/api/v1/experiments",
        &body.to_string(),
    )
    .await
}

fn file(path: &str, kind: u8, content: &str) -> Value {
    json!({"path": path, "type": kind, "mode": 0o644, "mtime": "0", "uid": 0, "gid": 0,
        "content": base64::engine::general_purpose::STANDARD.encode(content)})
}

#[tokio::test]
async fn the_model_definition_is_in_the_work_folder_and_delete_removes_the_experiment_for_good() {
    let tmp = tempfile::tempdir().expect("tmp");
    let state_dir = tmp.path().join("state");
    let (master, client) = start(&state_dir, Duration::from_secs(60)).await;
    let addr = master.url().trim_start_matches("http://").to_owned();
    let token = login_token(&addr).await;
    let config = crate::support::config("sh run.sh", 0);
    let body = json!({"config": config, "activate": true, "modelDefinition": [
        file("run.sh", b'0', "cat data/hello.txt\n"),
        file("data", b'5', ""),
        file("data/hello.txt", b'0', "hello from the model definition"),
    ]});
    let (status, answer) = create(&addr, &token, &body).await;
    assert!(status.contains("200"), "{status} {answer}");
    let id = serde_json::from_str::<Value>(&answer).expect("json")["experiment"]["id"]
        .as_i64()
        .and_then(|i| i32::try_from(i).ok())
        .expect("id");
    eventually("the experiment completes", || async {
        client
            .get_experiment(id)
            .await
            .is_ok_and(|e| e.experiment.state == State::Completed)
    })
    .await;
    let logs: String = std::fs::read_dir(state_dir.join("logs"))
        .expect("logs")
        .map(|e| std::fs::read_to_string(e.expect("entry").path()).unwrap_or_default())
        .collect();
    assert!(logs.contains("hello from the model definition"), "{logs}");

    // A running experiment cannot be deleted; an ended one can, with its files.
    let busy =
        crate::support::create_trial(&client, &crate::support::config("exec sleep 3600", 0)).await;
    let (status, answer) = call(
        &addr,
        &token,
        "DELETE",
        &format!("/api/v1/experiments/{}", busy.experiment_id),
        "",
    )
    .await;
    assert!(
        status.contains("400") && answer.contains("cannot delete experiment in STATE_ACTIVE state"),
        "{status} {answer}"
    );
    let (status, answer) = call(
        &addr,
        &token,
        "DELETE",
        &format!("/api/v1/experiments/{id}"),
        "",
    )
    .await;
    assert!(status.contains("200"), "{status} {answer}");
    assert!(client.get_experiment(id).await.is_err());
    assert!(!state_dir.join("context").join(id.to_string()).exists());
    master.shutdown();
    let (master, client) = start(&state_dir, Duration::from_secs(60)).await;
    assert!(
        client.get_experiment(id).await.is_err(),
        "a restart brought the deleted experiment back"
    );
    assert!(client.get_experiment(busy.experiment_id).await.is_ok());
    master.shutdown();
}

#[tokio::test]
async fn a_model_definition_path_leaving_the_folder_is_refused_by_name() {
    let tmp = tempfile::tempdir().expect("tmp");
    let (master, _client) = start(&tmp.path().join("state"), Duration::from_secs(60)).await;
    let addr = master.url().trim_start_matches("http://").to_owned();
    let token = login_token(&addr).await;
    let body = json!({"config": crate::support::config("true", 0), "activate": true,
        "modelDefinition": [file("../outside.sh", b'0', "echo escaped")]});
    let (status, answer) = create(&addr, &token, &body).await;
    assert!(
        status.contains("400") && answer.contains("modelDefinition[0].path"),
        "{status} {answer}"
    );
    assert!(!tmp.path().join("state/outside.sh").exists());
    assert!(!tmp.path().join("outside.sh").exists());
    master.shutdown();
}

#[tokio::test]
async fn a_model_definition_that_cannot_be_written_whole_is_a_400_naming_the_entry() {
    let tmp = tempfile::tempdir().expect("tmp");
    let (master, _client) = start(&tmp.path().join("state"), Duration::from_secs(60)).await;
    let addr = master.url().trim_start_matches("http://").to_owned();
    let token = login_token(&addr).await;
    for (files, says) in [
        (vec![file(".", b'0', "x")], "names the folder itself"),
        (
            vec![file("a.sh", b'0', "x"), file("./a.sh", b'0', "y")],
            "is listed twice",
        ),
        (
            vec![file("lib", b'0', "x"), file("lib/m.py", b'0', "y")],
            "which is listed as a file",
        ),
    ] {
        let body = json!({"config": crate::support::config("true", 0), "activate": true,
            "modelDefinition": files});
        let (status, answer) = create(&addr, &token, &body).await;
        assert!(
            status.contains("400") && answer.contains(says),
            "{says}: {status} {answer}"
        );
    }
    master.shutdown();
}
