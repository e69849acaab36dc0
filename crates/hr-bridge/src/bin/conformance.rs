//! Conformance of the bridge with the real servers (run by `cargo xtask conformance envs`).
//! `openenv`: starts the `openenv init echo_env` template under uvicorn as an owned service, runs
//! episodes over WebSocket sessions through `OpenEnvEnvironment`, checks the rewards against what
//! the echo env computes (0.1 per character), that closed sessions free their slot, that a second
//! concurrent session is refused with CAPACITY_REACHED, and that shutdown leaves no process of the
//! service's group. `nemo`: starts NeMo Gym's `example_single_tool_call` resources server directly
//! (no Ray, no head server) and checks that a correct `get_weather` call verifies to 1.0, a
//! plain-text answer to 0.0, sessions seed and close, bad arguments are a typed 422, and shutdown
//! leaves nothing behind. Prints `<suite>-conformance: N passed, M failed`. Not a user tool.
#![allow(clippy::print_stdout)]

use std::{
    path::{Path, PathBuf},
    process::ExitCode,
    time::Duration,
};

use hr_bridge::{
    NemoGymClient, NemoGymEnvironment, OpenEnvClient, OpenEnvEnvironment, OwnedService, presets,
};
use hr_env::{EnvError, Environment, Task};
use serde_json::json;

fn arg(args: &[String], name: &str) -> Option<String> {
    args.iter()
        .position(|a| a == name)
        .and_then(|i| args.get(i + 1))
        .cloned()
}

struct Checks(Vec<(String, bool)>);

impl Checks {
    /// Records whether `result` is `Ok`, and yields its value.
    fn ok<T, E: std::fmt::Display>(&mut self, name: &str, result: Result<T, E>) -> Option<T> {
        match result {
            Ok(v) => {
                self.check(name, true, "");
                Some(v)
            }
            Err(e) => {
                self.check(name, false, &e.to_string());
                None
            }
        }
    }

    fn check(&mut self, name: &str, ok: bool, detail: &str) {
        println!(
            "{} {name}{}",
            if ok { "ok  " } else { "FAIL" },
            if ok || detail.is_empty() {
                String::new()
            } else {
                format!("\n     {detail}")
            }
        );
        self.0.push((name.to_owned(), ok));
    }
}

fn group_alive(pid: u32) -> bool {
    // Any process whose process group is `pid` (field 5 of /proc/PID/stat) and is not a zombie.
    std::fs::read_dir("/proc")
        .into_iter()
        .flatten()
        .filter_map(Result::ok)
        .any(|e| {
            std::fs::read_to_string(e.path().join("stat"))
                .ok()
                .is_some_and(|stat| {
                    let rest = stat.rsplit(')').next().unwrap_or("");
                    let fields: Vec<&str> = rest.split_whitespace().collect();
                    fields.first().is_some_and(|s| *s != "Z")
                        && fields.get(2).and_then(|g| g.parse::<u32>().ok()) == Some(pid)
                })
        })
}

fn main() -> ExitCode {
    let args: Vec<String> = std::env::args().collect();
    let (Some(python), Some(dir), Some(log_dir)) = (
        arg(&args, "--python"),
        arg(&args, "--dir"),
        arg(&args, "--log-dir"),
    ) else {
        println!(
            "usage: hr-bridge-conformance openenv|nemo --python PY --dir ENV_OR_SERVER_DIR --log-dir DIR"
        );
        return ExitCode::from(2);
    };
    let (suite, checks) = match args.get(1).map(String::as_str) {
        Some("openenv") => ("openenv", openenv(&python, &dir, &log_dir)),
        Some("nemo") => ("nemo", nemo(&python, &dir, &log_dir)),
        _ => {
            println!(
                "usage: hr-bridge-conformance openenv|nemo --python PY --dir DIR --log-dir DIR"
            );
            return ExitCode::from(2);
        }
    };
    let passed = checks.0.iter().filter(|(_, ok)| *ok).count();
    let failed = checks.0.len() - passed;
    println!("{suite}-conformance: {passed} passed, {failed} failed");
    if failed == 0 && passed > 0 {
        ExitCode::SUCCESS
    } else {
        ExitCode::from(1)
    }
}

fn openenv(python: &str, env_root: &str, log_dir: &str) -> Checks {
    let mut c = Checks(Vec::new());
    let spec = presets::openenv(
        Path::new(python),
        Path::new(env_root),
        presets::OPENENV_ECHO_APP,
        &PathBuf::from(log_dir).join("openenv.log"),
    );
    let Some(service) = c.ok(
        "the real OpenEnv echo server starts and answers /health",
        OwnedService::start(&spec),
    ) else {
        return c;
    };
    let pid = service.pid().unwrap_or(0);
    let Some(client) = c.ok(
        "the client connects",
        OpenEnvClient::new("openenv", &service.base_url()),
    ) else {
        return c;
    };
    c.check("health says healthy", client.health().is_ok(), "");
    let schema = client.schema();
    c.check(
        "schema has the action and observation",
        schema
            .as_ref()
            .is_ok_and(|s| s.get("observation").is_some()),
        &format!("{schema:?}"),
    );

    let mut env = OpenEnvEnvironment::new(client.clone(), "message");
    for (episode, messages) in [
        ["hello", "there"],
        ["a", "much longer message"],
        ["ünïcödé", ""],
    ]
    .iter()
    .enumerate()
    {
        let task = Task {
            id: format!("episode-{episode}"),
            payload: json!({}),
        };
        let reset = env.reset(&task, episode as u64);
        c.check(
            &format!("episode {episode}: reset"),
            reset.is_ok(),
            &format!("{reset:?}"),
        );
        for message in messages {
            match env.step(message) {
                Ok(out) => {
                    let expected = 0.1 * message.chars().count() as f64;
                    let echoed = out
                        .observation
                        .raw
                        .get("echoed_message")
                        .and_then(|v| v.as_str())
                        == Some(message);
                    c.check(
                        &format!("episode {episode}: {message:?} echoed with reward {expected:.1}"),
                        echoed && (out.reward - expected).abs() < 1e-9 && !out.done,
                        &format!("{out:?}"),
                    );
                }
                Err(e) => c.check(
                    &format!("episode {episode}: step {message:?}"),
                    false,
                    &e.to_string(),
                ),
            }
        }
    }
    c.check("closing the last session works", env.close().is_ok(), "");

    // The template allows one session: a second concurrent one is refused, and a closed one
    // frees its slot.
    match client.session() {
        Ok(mut first) => {
            let _ = first.reset(&json!({}));
            let second = client.session().and_then(|mut s| s.reset(&json!({})));
            c.check(
                "a second concurrent session gets CAPACITY_REACHED",
                matches!(second, Err(EnvError::Service { ref code, .. }) if code == "CAPACITY_REACHED"),
                &format!("{second:?}"),
            );
            let state = first.state();
            c.check(
                "state counts the session's steps",
                state.as_ref().is_ok_and(|s| s.get("step_count").is_some()),
                &format!("{state:?}"),
            );
            c.check("the first session closes", first.close().is_ok(), "");
        }
        Err(e) => c.check("a session opens", false, &e.to_string()),
    }
    std::thread::sleep(Duration::from_millis(300));
    let reopened = client
        .session()
        .and_then(|mut s| s.reset(&json!({})).map(|_| s.close()));
    c.check(
        "a closed session frees its slot",
        reopened.is_ok(),
        &format!("{reopened:?}"),
    );

    let stopped = service.shutdown();
    c.check(
        "shutdown is clean (TERM; 143 counts as clean)",
        stopped.is_ok(),
        &format!("{stopped:?}"),
    );
    std::thread::sleep(Duration::from_millis(300));
    c.check(
        "no process of the service's group is left",
        pid != 0 && !group_alive(pid),
        "",
    );

    c
}

fn nemo(python: &str, server_dir: &str, log_dir: &str) -> Checks {
    let mut c = Checks(Vec::new());
    let spec = presets::nemo_resources_server(
        Path::new(python),
        Path::new(server_dir),
        &serde_json::Map::new(),
        &PathBuf::from(log_dir).join("nemo-gym.log"),
    );
    let Some(service) = c.ok(
        "the real NeMo Gym example_single_tool_call server starts and answers /",
        OwnedService::start(&spec),
    ) else {
        return c;
    };
    let pid = service.pid().unwrap_or(0);
    let Some(client) = c.ok(
        "the client connects",
        NemoGymClient::new("nemo-gym", &service.base_url()),
    ) else {
        return c;
    };
    let row = json!({"responses_create_params": {"input": [{"role": "user", "content": "weather in sf?"}],
        "tools": [{"type": "function", "name": "get_weather", "strict": true,
            "parameters": {"type": "object", "properties": {"city": {"type": "string"}}, "required": ["city"], "additionalProperties": false}}]}});
    let mut env = NemoGymEnvironment::new(client.clone());
    let reset = env.reset(
        &Task {
            id: "weather-1".into(),
            payload: row.clone(),
        },
        0,
    );
    c.check(
        "seed_session with the dataset row",
        reset.is_ok(),
        &format!("{reset:?}"),
    );
    let tool =
        env.step(r#"<tool_call>{"name": "get_weather", "arguments": {"city": "SF"}}</tool_call>"#);
    c.check(
        "the get_weather tool answers through the rollout's cookie jar",
        tool.as_ref()
            .is_ok_and(|t| !t.done && t.observation.text.contains("SF")),
        &format!("{tool:?}"),
    );
    let end = env.step("It is cold in San Francisco.");
    c.check(
        "a correct get_weather call verifies to reward 1.0",
        end.as_ref().is_ok_and(|e| e.done && e.reward == 1.0),
        &format!("{end:?}"),
    );
    let _ = env.reset(
        &Task {
            id: "weather-2".into(),
            payload: row.clone(),
        },
        1,
    );
    let plain = env.step("I do not know the weather.");
    c.check(
        "a plain-text answer verifies to reward 0.0",
        plain.as_ref().is_ok_and(|e| e.done && e.reward == 0.0),
        &format!("{plain:?}"),
    );
    c.check("the environment closes", env.close().is_ok(), "");
    let mut r = client.rollout();
    let seeded = r.seed_session(
        "rs-conformance",
        "rollout-1",
        "weather",
        "task-1",
        &json!({}),
    );
    c.check(
        "a 0.7 seed_session body is accepted",
        seeded.is_ok(),
        &format!("{seeded:?}"),
    );
    c.check("close_session succeeds", r.close().is_ok(), "");
    let bad = r.call_tool("get_weather", &json!({"town": "x"}));
    c.check(
        "bad tool arguments are a typed 422",
        matches!(bad, Err(EnvError::Service { ref code, .. }) if code == "422"),
        &format!("{bad:?}"),
    );
    let stopped = service.shutdown();
    c.check(
        "shutdown is clean",
        stopped.is_ok(),
        &format!("{stopped:?}"),
    );
    std::thread::sleep(Duration::from_millis(300));
    c.check(
        "no process of the service's group is left",
        pid != 0 && !group_alive(pid),
        "",
    );
    server_config(&mut c, python, server_dir, log_dir);
    c
}

/// A resources server whose config class requires a field of its own (the example server with
/// `judge_model: str` added) refuses to start without it and starts with the plan's
/// `server_config`.
fn server_config(c: &mut Checks, python: &str, server_dir: &str, log_dir: &str) {
    let judged = PathBuf::from(log_dir).join("judged_tool_call");
    let app = std::fs::read_to_string(Path::new(server_dir).join("app.py"))
        .unwrap_or_default()
        .replace(
            "class SimpleWeatherResourcesServerConfig(BaseResourcesServerConfig):\n    pass",
            "class SimpleWeatherResourcesServerConfig(BaseResourcesServerConfig):\n    judge_model: str",
        );
    let written =
        std::fs::create_dir_all(&judged).and_then(|()| std::fs::write(judged.join("app.py"), &app));
    c.check(
        "a copy of the example server requires `judge_model` in its config",
        written.is_ok() && app.contains("judge_model: str"),
        &format!("{written:?}"),
    );
    let log = PathBuf::from(log_dir).join("judged.log");
    let mut without =
        presets::nemo_resources_server(Path::new(python), &judged, &serde_json::Map::new(), &log);
    without.attempts = 1;
    let refused = OwnedService::start(&without);
    c.check(
        "without server_config it does not start",
        matches!(refused, Err(EnvError::EarlyExit { .. })),
        &format!("{:?}", refused.as_ref().err()),
    );
    let mut fields = serde_json::Map::new();
    fields.insert("judge_model".to_owned(), json!("a-judge"));
    let with = presets::nemo_resources_server(Path::new(python), &judged, &fields, &log);
    if let Some(service) = c.ok(
        "with server_config {judge_model} it starts and answers /",
        OwnedService::start(&with),
    ) {
        let stopped = service.shutdown();
        c.check("it stops cleanly", stopped.is_ok(), &format!("{stopped:?}"));
    }
}
