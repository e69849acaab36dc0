//! Mutated request bodies (the real `determined` 0.35 client's captured bodies, bytes flipped,
//! inserted, removed or cut, drawn by proptest) are answered with a typed status, never a crash:
//! every answer is 2xx or 4xx (or upstream's 500 for a duplicate checkpoint UUID), and the
//! master still serves afterwards. Experiment and command creation are left out: their bodies
//! are expconf YAML (fuzzed in hr-config), and a mutation could start a process.

use std::time::Duration;

use hr_tests::mutate::mutate_text;
use proptest::{
    prelude::*,
    strategy::{Strategy, ValueTree},
    test_runner::TestRunner,
};
use serde_json::Value;

use crate::support::{config, create_trial, eventually, raw_response, start};

const CAPTURED: &str = include_str!("../../../hr-det/test_data/captured-determined-0.35.0.jsonl");
const CASES: usize = 1500;

#[tokio::test]
async fn mutated_request_bodies_get_typed_answers_and_the_master_keeps_serving() {
    let tmp = tempfile::tempdir().expect("tmp");
    let (master, client) = start(tmp.path(), Duration::from_secs(3600)).await;
    // A live trial (id 1, allocation `<task>.1`), so valid-looking bodies reach the handlers.
    let trial = create_trial(&client, &config("exec sleep 3600", 0)).await;
    let allocation = format!("{}.1", trial.task_id.clone().expect("task"));
    eventually("the trial's work folder", || async {
        tmp.path().join("work").join(&allocation).exists()
    })
    .await;
    let addr = master.url().trim_start_matches("http://").to_owned();
    let login = raw_response(
        &addr,
        &format!("POST /api/v1/auth/login HTTP/1.1\r\nHost: {addr}"),
        r#"{"username":"determined","password":"","isHashed":false}"#,
    )
    .await;
    let answer: Value = serde_json::from_str(login.split("\r\n\r\n").nth(1).unwrap_or(""))
        .unwrap_or_else(|e| panic!("login answer {login:?}: {e}"));
    let token = answer["token"]
        .as_str()
        .unwrap_or_else(|| panic!("no token in {login:?}"))
        .to_owned();
    let seeds: Vec<(String, String)> = CAPTURED
        .lines()
        .filter_map(|l| serde_json::from_str::<Value>(l).ok())
        .filter(|r| r["method"] == "POST")
        .filter_map(|r| {
            let path = r["path"].as_str()?.to_owned();
            let skip = path.ends_with("/experiments") || path.ends_with("/commands");
            let path = match path.split('/').nth(4) {
                Some(_) if path.starts_with("/api/v1/allocations/") => {
                    format!("/api/v1/allocations/{allocation}/signals/ack_preemption")
                }
                _ => path.replace("/trials/1/", &format!("/trials/{}/", trial.id)),
            };
            (!skip).then(|| (path, r["body"].to_string()))
        })
        .collect();
    assert!(seeds.len() >= 7, "captured POST bodies: {seeds:?}");
    let mut runner = TestRunner::deterministic();
    let edits = prop::collection::vec((any::<u8>(), any::<usize>(), any::<u8>()), 1..6);
    let mut statuses = std::collections::BTreeMap::new();
    for case in 0..CASES {
        let (path, body) = &seeds[case % seeds.len()];
        let drawn = edits.new_tree(&mut runner).expect("edits").current();
        let body = mutate_text(body, &drawn);
        let head = format!("POST {path} HTTP/1.1\r\nHost: {addr}\r\nAuthorization: Bearer {token}");
        let response = raw_response(&addr, &head, &body).await;
        let status: u16 = response
            .split_whitespace()
            .nth(1)
            .and_then(|c| c.parse().ok())
            .unwrap_or_else(|| panic!("no status line for {path} {body:?}: {response:?}"));
        let typed = (200..500).contains(&status)
            || (status == 500 && response.contains("checkpoints_v2_uuid_key"));
        assert!(typed, "{path} {body:?} -> {response}");
        *statuses.entry(status).or_insert(0) += 1;
    }
    // Both paths ran: some mutations still parse and succeed, most are refused.
    assert!(
        statuses.contains_key(&200) && statuses.contains_key(&400),
        "{statuses:?}"
    );
    client.info().await.expect("still serving");
    master.shutdown();
}
