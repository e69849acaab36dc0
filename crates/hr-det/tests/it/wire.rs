//! Wire types against JSON in the shapes the real `determined==0.35.0` client sends and expects
//! (`../shared/reference/determined-0.35.md` §1.4 and §2, captured live against a stand-in).

use hr_det::wire::*;
use serde_json::{Value, json};

fn round_trip<T: serde::Serialize + serde::de::DeserializeOwned + PartialEq + std::fmt::Debug>(
    v: Value,
) -> T {
    let parsed: T = serde_json::from_value(v).expect("parses");
    let again: T = serde_json::from_value(serde_json::to_value(&parsed).expect("serialises"))
        .expect("re-parses");
    assert_eq!(again, parsed);
    parsed
}

#[test]
fn checkpoint_report_body_is_a_v1_checkpoint_with_int64_strings() {
    let body = json!({
        "uuid": "2b1d6e5e-3b0b-4f35-9a53-6a1f0c1d2e3f", "taskId": "7.abc", "allocationId": "7.abc.1",
        "reportTime": "2026-10-21T10:00:00.000000Z", "state": "STATE_COMPLETED",
        "resources": {"state.json": "12", "sub/": "0", "metadata.json": "26"},
        "metadata": {"steps_completed": 3}, "training": {}, "storageId": 7
    });
    let c: Checkpoint = round_trip(body);
    assert_eq!(c.resources["state.json"], 12);
    assert_eq!(c.steps_completed(), Some(3));
    assert_eq!(c.state, CheckpointState::Completed);
    let out = serde_json::to_value(&c).expect("json");
    assert_eq!(
        out["resources"]["metadata.json"], "26",
        "sizes go out as strings"
    );
}

#[test]
fn metrics_report_matches_the_python_body() {
    let body = json!({"group": "training", "metrics": {"trialId": 3, "trialRunId": 2, "stepsCompleted": 4,
        "reportTime": null, "metrics": {"avgMetrics": {"loss": 0.5}, "batchMetrics": null}}});
    let r: ReportMetricsRequest = round_trip(body);
    assert_eq!((r.metrics.trial_run_id, r.metrics.steps_completed), (2, 4));
}

#[test]
fn searcher_operation_length_is_an_int64_string() {
    let r: SearcherOperationResponse = round_trip(
        json!({"completed": false, "op": {"validateAfter": {"requestId": "r1", "length": "8"}}}),
    );
    assert_eq!(r.op.expect("op").validate_after.length, 8);
    let done: SearcherOperationResponse = round_trip(json!({"completed": true}));
    assert!(done.completed && done.op.is_none());
}

#[test]
fn create_experiment_login_and_command_bodies() {
    let create: CreateExperimentRequest = round_trip(
        json!({"activate": false, "config": "name: x\n",
        "modelDefinition": null, "parentId": null, "projectId": 363, "template": null, "validateOnly": false}),
    );
    assert_eq!(create.project_id, Some(363));
    let login: LoginRequest =
        round_trip(json!({"username": "determined", "password": "", "isHashed": true}));
    assert!(login.is_hashed);
    let cmd: CreateCommandRequest = round_trip(
        json!({"config": {"entrypoint": ["echo", "hi"]}, "files": null,
        "template_name": null, "workspaceId": 2}),
    );
    assert_eq!(cmd.workspace_id, Some(2));
    let start: RunsStartRequest = round_trip(
        json!({"runId": 5, "checkpointStorage": {"type": "directory",
        "container_path": "/tmp/c"}}),
    );
    assert_eq!(start.run_id, 5);
    let done: CompleteOperationRequest =
        round_trip(json!({"op": {"length": 5}, "searcherMetric": 0.2}));
    assert_eq!(done.op["length"], 5);
}

#[test]
fn responses_carry_every_field_the_python_client_requires() {
    let exp: ExperimentResponse = round_trip(
        json!({"experiment": {"id": 1, "archived": false, "config": {},
        "jobId": "j", "name": "n", "numTrials": 1, "originalConfig": "name: n", "projectId": 363,
        "projectOwnerId": 1, "searcherType": "single", "startTime": "2026-10-21T10:00:00Z",
        "state": "STATE_PAUSED", "username": "determined"}, "config": {}}),
    );
    assert_eq!(exp.experiment.state, State::Paused);
    let trials: TrialsResponse = round_trip(
        json!({"trials": [{"id": 2, "experimentId": 1, "hparams": {},
        "restarts": 0, "startTime": "t", "state": "STATE_ACTIVE", "totalBatchesProcessed": 3}],
        "pagination": {"offset": 0, "limit": 0, "startIndex": 0, "endIndex": 1, "total": 1}}),
    );
    assert_eq!(trials.trials[0].total_batches_processed, 3);
    let cmd: CommandResponse = round_trip(
        json!({"command": {"id": "c1", "description": "d", "jobId": "j",
        "resourcePool": "42_Compute", "startTime": "t", "state": "STATE_TERMINATED", "username": "u",
        "workspaceId": 1, "exitStatus": "0"}, "config": {}}),
    );
    assert_eq!(cmd.command.state, TaskState::Terminated);
    let info: MasterInfo = round_trip(
        json!({"version": "0.35.0", "clusterId": "c", "masterId": "m", "clusterName": ""}),
    );
    assert_eq!(info.version, "0.35.0");
    let p: PreemptionResponse = round_trip(json!({"preempt": true}));
    assert!(p.preempt);
    let env: ErrorEnvelope = round_trip(
        json!({"error": {"code": 5, "reason": "NotFound", "error": "experiment 9 not found"}}),
    );
    assert_eq!(env.error.reason, "NotFound");
}

#[test]
fn every_state_name_round_trips() {
    for s in [
        "STATE_ACTIVE",
        "STATE_PAUSED",
        "STATE_STOPPING_KILLED",
        "STATE_CANCELED",
        "STATE_COMPLETED",
        "STATE_RUNNING",
    ] {
        let state: State = serde_json::from_value(json!(s)).expect("state");
        assert_eq!(state.as_str(), s);
    }
    assert!(
        serde_json::from_value::<State>(json!("STATE_KILLED")).is_err(),
        "kill ends as CANCELED, there is no KILLED"
    );
}

#[test]
fn the_login_token_never_shows_in_debug_output() {
    let r = LoginResponse {
        token: "secret-token".into(),
        user: User {
            id: 1,
            username: "u".into(),
            admin: false,
            active: true,
            display_name: String::new(),
        },
    };
    assert!(!format!("{r:?}").contains("secret-token"));
    let client = hr_det::Client::new("http://127.0.0.1:1")
        .expect("client")
        .with_token("secret-token".into());
    assert!(!format!("{client:?}").contains("secret-token"));
}

#[test]
fn password_hashing_matches_the_python_client() {
    assert_eq!(hr_det::hash_password(""), "");
    let h = hr_det::hash_password("pw");
    assert_eq!(h.len(), 128);
    assert!(h.chars().all(|c| c.is_ascii_hexdigit()));
}
