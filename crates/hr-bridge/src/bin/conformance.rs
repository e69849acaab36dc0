//! Conformance of the bridge with the real OpenEnv server (run by `cargo xtask conformance
//! envs`): starts the `openenv init echo_env` template under uvicorn as an owned service, runs
//! episodes over WebSocket sessions through [`OpenEnvEnvironment`], checks the rewards against
//! what the echo env computes (0.1 per character), that closed sessions free their slot, that a
//! second concurrent session is refused with CAPACITY_REACHED, and that shutdown leaves no
//! process of the service's group. Prints `openenv-conformance: N passed, M failed`. Not a user
//! tool.
#![allow(clippy::print_stdout)]

use std::{path::PathBuf, process::ExitCode, time::Duration};

use hr_bridge::{
    BridgeError, Environment, OpenEnvClient, OpenEnvEnvironment, OwnedService, ServiceSpec, Task,
};
use serde_json::json;

fn arg(args: &[String], name: &str) -> Option<String> {
    args.iter()
        .position(|a| a == name)
        .and_then(|i| args.get(i + 1))
        .cloned()
}

struct Checks(Vec<(String, bool)>);

impl Checks {
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
    let (Some(python), Some(env_root), Some(log_dir)) = (
        arg(&args, "--python"),
        arg(&args, "--env-root"),
        arg(&args, "--log-dir"),
    ) else {
        println!("usage: hr-bridge-conformance --python PY --env-root DIR --log-dir DIR");
        return ExitCode::from(2);
    };
    let mut c = Checks(Vec::new());
    let spec = ServiceSpec {
        name: "openenv".into(),
        program: PathBuf::from(python),
        args: [
            "-m",
            "uvicorn",
            "echo_env.server.app:app",
            "--host",
            "127.0.0.1",
            "--port",
            "{port}",
        ]
        .map(String::from)
        .to_vec(),
        cwd: PathBuf::from(env_root),
        env: vec![("PYTHONUNBUFFERED".into(), "1".into())],
        log_path: PathBuf::from(log_dir).join("openenv.log"),
        ready_path: "/health".into(),
        ready_timeout: Duration::from_secs(180),
        grace: Duration::from_secs(10),
        attempts: 3,
        first_port: None,
    };
    let service = match OwnedService::start(&spec) {
        Ok(s) => s,
        Err(e) => {
            c.check("the real OpenEnv echo server starts", false, &e.to_string());
            println!("openenv-conformance: 0 passed, 1 failed");
            return ExitCode::from(1);
        }
    };
    c.check(
        "the real OpenEnv echo server starts and answers /health",
        true,
        "",
    );
    let pid = service.pid().unwrap_or(0);
    let client = match OpenEnvClient::new("openenv", &service.base_url()) {
        Ok(client) => client,
        Err(e) => {
            c.check("client", false, &e.to_string());
            return ExitCode::from(1);
        }
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
                matches!(second, Err(BridgeError::Service { ref code, .. }) if code == "CAPACITY_REACHED"),
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

    let passed = c.0.iter().filter(|(_, ok)| *ok).count();
    let failed = c.0.len() - passed;
    println!("openenv-conformance: {passed} passed, {failed} failed");
    if failed == 0 {
        ExitCode::SUCCESS
    } else {
        ExitCode::from(1)
    }
}
