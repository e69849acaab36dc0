//! The NeMo Gym client against the Rust `example_single_tool_call` fixture.

use hr_bridge::{NemoGymClient, NemoGymEnvironment, output_item};
use hr_env::{EnvError, Environment, Task};

use crate::servers::nemo_gym_single_tool_call;
use serde_json::{Value, json};

fn row() -> Value {
    json!({"responses_create_params": {"input": [{"role": "user", "content": "weather in sf?"}],
        "tools": [{"type": "function", "name": "get_weather", "strict": true,
            "parameters": {"type": "object", "properties": {"city": {"type": "string"}}, "required": ["city"]}}]}})
}

#[test]
fn a_correct_tool_call_verifies_to_one_and_plain_text_to_zero() {
    let server = nemo_gym_single_tool_call().expect("fixture");
    let mut env =
        NemoGymEnvironment::new(NemoGymClient::new("nemo-gym", server.url()).expect("client"));
    let task = Task {
        id: "t1".into(),
        payload: row(),
    };
    let first = env.reset(&task, 0).expect("reset");
    assert_eq!(first.text, "weather in sf?");
    let tool = env
        .step(r#"<tool_call>{"name": "get_weather", "arguments": {"city": "SF"}}</tool_call>"#)
        .expect("tool");
    assert!(!tool.done && tool.observation.text.contains("The weather in SF is cold."));
    let end = env.step("It is cold in SF.").expect("answer");
    assert!(end.done);
    assert_eq!(end.reward, 1.0);
    assert_eq!(
        end.observation.raw["tool_calls_in_session"], 1,
        "the rollout kept its cookie"
    );

    env.reset(
        &Task {
            id: "t2".into(),
            payload: row(),
        },
        1,
    )
    .expect("reset");
    let plain = env.step("I cannot look that up.").expect("answer");
    assert!(plain.done);
    assert_eq!(plain.reward, 0.0);
    assert_eq!(
        plain.observation.raw["tool_calls_in_session"], 0,
        "a new rollout has a new cookie jar"
    );
    env.close().expect("close");
}

#[test]
fn each_rollout_has_its_own_cookie_jar() {
    let server = nemo_gym_single_tool_call().expect("fixture");
    let client = NemoGymClient::new("nemo-gym", server.url()).expect("client");
    let (mut a, mut b) = (client.rollout(), client.rollout());
    a.seed(&row()).expect("seed a");
    b.seed(&row()).expect("seed b");
    for _ in 0..2 {
        a.call_tool("get_weather", &json!({"city": "Oslo"}))
            .expect("tool");
    }
    b.call_tool("get_weather", &json!({"city": "Rome"}))
        .expect("tool");
    let call = output_item(
        r#"{"name": "get_weather", "arguments": {"city": "Oslo"}}"#,
        0,
    );
    assert_eq!(
        a.verify(&row(), std::slice::from_ref(&call))
            .expect("verify")
            .raw["tool_calls_in_session"],
        2
    );
    assert_eq!(
        b.verify(&row(), &[call]).expect("verify").raw["tool_calls_in_session"],
        1
    );
}

#[test]
fn errors_are_typed_422_detail_and_500_bare_string() {
    let server = nemo_gym_single_tool_call().expect("fixture");
    let client = NemoGymClient::new("nemo-gym", server.url()).expect("client");
    let mut r = client.rollout();
    let err = r
        .call_tool("get_weather", &json!({"town": "x"}))
        .expect_err("422");
    assert!(
        matches!(err, EnvError::Service { ref code, ref message, .. } if code == "422" && message.contains("city")),
        "{err}"
    );
    r.seed_session("rs-1", "ro-1", "weather", "task-1", &json!({}))
        .expect("seed 0.7");
    r.close().expect("close");
    r.close().expect("closing twice is a no-op");
    let err = r
        .seed_session("rs-1", "ro-1", "weather", "task-1", &json!({}))
        .expect_err("seed after close");
    assert!(
        matches!(err, EnvError::Service { ref code, ref message, .. } if code == "500" && message.contains("already closed")),
        "{err}"
    );
    let unknown = r.call_tool("no_such_tool", &json!({}));
    assert!(
        matches!(unknown, Err(EnvError::Service { ref code, .. }) if code == "404"),
        "{unknown:?}"
    );
}

#[test]
fn model_output_becomes_response_items() {
    let call = output_item(
        "<tool_call>\n{\"name\": \"f\", \"arguments\": {\"a\": 1}}\n</tool_call>",
        3,
    );
    assert_eq!(
        (
            call["type"].as_str(),
            call["name"].as_str(),
            call["call_id"].as_str()
        ),
        (Some("function_call"), Some("f"), Some("call_3"))
    );
    assert_eq!(
        call["arguments"], "{\"a\":1}",
        "arguments travel as a JSON string"
    );
    let msg = output_item("just text", 0);
    assert_eq!(msg["type"], "message");
    assert_eq!(msg["content"][0]["text"], "just text");
}
