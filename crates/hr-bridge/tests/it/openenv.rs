//! The OpenEnv client against the Rust echo-env fixture.

use hr_bridge::{OpenEnvClient, OpenEnvEnvironment};
use hr_env::{EnvError, Environment, Task};

use crate::servers::{FixtureMode, openenv_echo};
use serde_json::json;

#[test]
fn an_episode_over_a_websocket_session_gets_the_echo_rewards() {
    let server = openenv_echo(FixtureMode::Faithful, 1).expect("fixture");
    let client = OpenEnvClient::new("openenv", server.url()).expect("client");
    client.health().expect("healthy");
    assert!(client.schema().expect("schema")["action"]["properties"]["message"].is_object());
    let mut session = client.session().expect("session");
    let first = session.reset(&json!({"seed": 1})).expect("reset");
    assert_eq!((first.reward, first.done), (Some(0.0), false));
    for (message, reward) in [("hi", 0.2), ("there", 0.5)] {
        let r = session.step(&json!({"message": message})).expect("step");
        assert_eq!(r.observation["echoed_message"], message);
        assert!((r.reward.expect("reward") - reward).abs() < 1e-12);
    }
    assert_eq!(
        session.state().expect("state")["step_count"],
        2,
        "the session keeps its environment"
    );
    let err = session.step(&json!({"bad": 1})).expect_err("validation");
    assert!(
        matches!(err, EnvError::Service { ref code, .. } if code == "VALIDATION_ERROR"),
        "{err}"
    );
    session.close().expect("close");
    // The slot is free again once the session is closed.
    let mut again = client.session().expect("second session after close");
    again.reset(&json!({})).expect("reset");
}

#[test]
fn a_second_session_over_capacity_is_a_typed_error() {
    let server = openenv_echo(FixtureMode::Faithful, 1).expect("fixture");
    let client = OpenEnvClient::new("openenv", server.url()).expect("client");
    let mut first = client.session().expect("first");
    first.reset(&json!({})).expect("reset");
    let mut second = client.session().expect("connects");
    let err = second.reset(&json!({})).expect_err("over capacity");
    assert!(
        matches!(err, EnvError::Service { ref code, ref service, .. } if code == "CAPACITY_REACHED" && service == "openenv"),
        "{err}"
    );
}

#[test]
fn a_malformed_reply_is_a_typed_error_not_a_panic() {
    let server = openenv_echo(FixtureMode::MalformedReplies, 1).expect("fixture");
    let client = OpenEnvClient::new("openenv", server.url()).expect("client");
    let mut session = client.session().expect("session");
    session.reset(&json!({})).expect("reset");
    let err = session
        .step(&json!({"message": "x"}))
        .expect_err("malformed");
    assert!(matches!(err, EnvError::Malformed { .. }), "{err}");
}

#[test]
fn the_environment_trait_runs_episodes_and_closes_sessions() {
    let server = openenv_echo(FixtureMode::Faithful, 1).expect("fixture");
    let mut env = OpenEnvEnvironment::new(
        OpenEnvClient::new("openenv", server.url()).expect("client"),
        "message",
    );
    for episode in 0..3 {
        let task = Task {
            id: format!("t{episode}"),
            payload: json!({}),
        };
        let first = env.reset(&task, episode).expect("reset");
        assert!(first.text.contains("environment ready"));
        let out = env.step("four").expect("step");
        assert!((out.reward - 0.4).abs() < 1e-12 && !out.done);
        // With one slot, the next reset only works if this session was released.
    }
    env.close().expect("close");
    assert!(
        matches!(env.step("late"), Err(EnvError::Transport { .. })),
        "no step after close"
    );
}

#[test]
fn a_dead_server_mid_episode_is_a_transport_error() {
    let server = openenv_echo(FixtureMode::Faithful, 1).expect("fixture");
    let client = OpenEnvClient::new("openenv", server.url()).expect("client");
    let mut session = client.session().expect("session");
    session.reset(&json!({})).expect("reset");
    drop(server);
    let err = session
        .step(&json!({"message": "x"}))
        .expect_err("server gone");
    assert!(
        matches!(err, EnvError::Transport { ref service, .. } if service == "openenv"),
        "{err}"
    );
}
