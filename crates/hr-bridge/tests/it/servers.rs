//! Rust fixture servers faithful to the service contracts, for fast tests without Python: an
//! OpenEnv echo environment (the `openenv init echo_env` template's behaviour: reward =
//! 0.1 × message length, `/ws` sessions, `max_concurrent_envs`, the error codes).

use std::sync::{
    Arc,
    atomic::{AtomicUsize, Ordering},
};

use axum::{
    Json, Router,
    extract::{
        State, WebSocketUpgrade,
        ws::{Message, WebSocket},
    },
    routing::get,
};
use serde_json::{Value, json};

/// How the fixture behaves.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum FixtureMode {
    /// As the real echo env.
    Faithful,
    /// Steps are answered with text that is not JSON.
    MalformedReplies,
}

/// A fixture server running on its own thread; stopped on drop.
#[derive(Debug)]
pub(crate) struct FixtureServer {
    url: String,
    shutdown: Option<tokio::sync::oneshot::Sender<()>>,
    thread: Option<std::thread::JoinHandle<()>>,
}

impl FixtureServer {
    /// `http://127.0.0.1:PORT`.
    pub(crate) fn url(&self) -> &str {
        &self.url
    }
}

impl Drop for FixtureServer {
    fn drop(&mut self) {
        if let Some(tx) = self.shutdown.take() {
            let _ = tx.send(());
        }
        if let Some(t) = self.thread.take() {
            let _ = t.join();
        }
    }
}

struct Echo {
    mode: FixtureMode,
    max_sessions: usize,
    active: AtomicUsize,
}

/// Starts an OpenEnv echo-env fixture allowing `max_sessions` concurrent sessions.
pub(crate) fn openenv_echo(
    mode: FixtureMode,
    max_sessions: usize,
) -> std::io::Result<FixtureServer> {
    let state = Arc::new(Echo {
        mode,
        max_sessions,
        active: AtomicUsize::new(0),
    });
    serve(
        Router::new()
            .route(
                "/health",
                get(|| async { Json(json!({"status": "healthy"})) }),
            )
            .route("/schema", get(|| async { Json(schema()) }))
            .route("/ws", get(ws))
            .with_state(state),
    )
}

/// Serves `app` on a free loopback port from a thread with its own runtime.
fn serve(app: Router) -> std::io::Result<FixtureServer> {
    let listener = std::net::TcpListener::bind("127.0.0.1:0")?;
    listener.set_nonblocking(true)?;
    let url = format!("http://{}", listener.local_addr()?);
    let (tx, rx) = tokio::sync::oneshot::channel::<()>();
    let thread = std::thread::spawn(move || {
        let rt = tokio::runtime::Builder::new_current_thread()
            .enable_all()
            .build()
            .expect("fixture runtime");
        rt.block_on(async move {
            let listener = tokio::net::TcpListener::from_std(listener).expect("listener");
            let _ = axum::serve(listener, app)
                .with_graceful_shutdown(async {
                    let _ = rx.await;
                })
                .await;
        });
    });
    Ok(FixtureServer {
        url,
        shutdown: Some(tx),
        thread: Some(thread),
    })
}

fn schema() -> Value {
    json!({
        "action": {"type": "object", "properties": {"message": {"type": "string"}}, "required": ["message"], "additionalProperties": false},
        "observation": {"type": "object", "properties": {"echoed_message": {"type": "string"}, "message_length": {"type": "integer"}}},
        "state": {"type": "object", "properties": {"episode_id": {"type": "string"}, "step_count": {"type": "integer"}}},
    })
}

async fn ws(State(echo): State<Arc<Echo>>, upgrade: WebSocketUpgrade) -> axum::response::Response {
    upgrade.on_upgrade(move |socket| session(echo, socket))
}

fn error(code: &str, message: &str) -> Message {
    Message::text(json!({"type": "error", "data": {"message": message, "code": code}}).to_string())
}

fn observation(message: &str, reward: f64) -> Message {
    let len = message.chars().count();
    Message::text(
        json!({"type": "observation", "data": {"observation": {"echoed_message": message, "message_length": len},
            "reward": reward, "done": false, "metadata": {}}})
        .to_string(),
    )
}

async fn session(echo: Arc<Echo>, mut socket: WebSocket) {
    let active = echo.active.fetch_add(1, Ordering::SeqCst) + 1;
    if active > echo.max_sessions {
        let msg = format!(
            "Server at capacity: {}/{} sessions active.",
            active - 1,
            echo.max_sessions
        );
        let _ = socket
            .send(Message::text(
                json!({"type": "error", "data": {"message": msg, "code": "CAPACITY_REACHED",
                    "active_sessions": active - 1, "max_sessions": echo.max_sessions}})
                .to_string(),
            ))
            .await;
        let _ = socket.send(Message::Close(None)).await;
        echo.active.fetch_sub(1, Ordering::SeqCst);
        return;
    }
    let episode = format!("ep-{active}");
    let mut steps = 0u64;
    while let Some(Ok(msg)) = socket.recv().await {
        let Message::Text(text) = msg else { continue };
        let Ok(v) = serde_json::from_str::<Value>(&text) else {
            let _ = socket.send(error("INVALID_JSON", "Invalid JSON")).await;
            continue;
        };
        let reply = match v.get("type").and_then(Value::as_str) {
            Some("reset") => {
                steps = 0;
                observation("Echo Env environment ready!", 0.0)
            }
            Some("step") if echo.mode == FixtureMode::MalformedReplies => {
                Message::text("<html>oops</html>")
            }
            Some("step") => match v.get("data").and_then(Value::as_object) {
                Some(d) if d.len() == 1 && d.get("message").is_some_and(Value::is_string) => {
                    steps += 1;
                    let m = d["message"].as_str().unwrap_or_default();
                    observation(m, 0.1 * m.chars().count() as f64)
                }
                _ => error("VALIDATION_ERROR", "Invalid message"),
            },
            Some("state") => Message::text(
                json!({"type": "state", "data": {"episode_id": episode, "step_count": steps}})
                    .to_string(),
            ),
            Some("close") => break,
            Some(other) => error("UNKNOWN_TYPE", &format!("Unknown message type: {other}")),
            None => error("INVALID_JSON", "Missing message type"),
        };
        if socket.send(reply).await.is_err() {
            break;
        }
    }
    let _ = socket.send(Message::Close(None)).await;
    echo.active.fetch_sub(1, Ordering::SeqCst);
}

/// A NeMo Gym resources server faithful to `example_single_tool_call` (0.7 routes, 0.4-compatible
/// legacy seeding): `GET /`, `/health`; `POST /seed_session`, `/get_weather`, `/verify`,
/// `/close_session`; a session cookie set on every response that came without one. Reward 1.0
/// when the output calls `get_weather`, else 0.0. The echo of `/verify` also carries
/// `tool_calls_in_session` (an extra key, which clients must ignore) so tests can see that a
/// rollout kept its own cookie.
pub(crate) fn nemo_gym_single_tool_call() -> std::io::Result<FixtureServer> {
    use axum::{
        body::Bytes,
        http::{HeaderMap, StatusCode, header},
        response::IntoResponse,
        routing::post,
    };
    use std::{collections::HashMap, sync::Mutex};

    const COOKIE: &str = "SimpleWeatherResourcesServer___example_single_tool_call";
    #[derive(Default)]
    struct Gym {
        next: AtomicUsize,
        calls: Mutex<HashMap<String, usize>>,
        closed: Mutex<Vec<String>>,
    }
    fn cookie_of(headers: &HeaderMap) -> Option<String> {
        let raw = headers.get(header::COOKIE)?.to_str().ok()?;
        raw.split(';').find_map(|kv| {
            kv.trim()
                .strip_prefix(&format!("{COOKIE}="))
                .map(str::to_owned)
        })
    }
    fn reply(
        gym: &Gym,
        headers: &HeaderMap,
        status: StatusCode,
        body: Value,
    ) -> axum::response::Response {
        let mut resp = (status, Json(body)).into_response();
        if cookie_of(headers).is_none() {
            let id = format!("s{}", gym.next.fetch_add(1, Ordering::SeqCst));
            let value = format!("{COOKIE}={id}; path=/; Max-Age=1209600; httponly; samesite=lax");
            if let Ok(v) = value.parse() {
                resp.headers_mut().insert(header::SET_COOKIE, v);
            }
        }
        resp
    }
    fn unprocessable(loc: &[&str]) -> Value {
        json!({"detail": [{"type": "missing", "loc": loc, "msg": "Field required", "input": {}}]})
    }

    let gym = Arc::new(Gym::default());
    let health = |State(g): State<Arc<Gym>>, h: HeaderMap| async move {
        reply(&g, &h, StatusCode::OK, json!({"status": "ok"}))
    };
    let app = Router::new()
        .route("/", get(health))
        .route("/health", get(health))
        .route(
            "/seed_session",
            post(|State(g): State<Arc<Gym>>, h: HeaderMap, body: Bytes| async move {
                let Ok(v) = serde_json::from_slice::<Value>(&body) else {
                    return reply(&g, &h, StatusCode::UNPROCESSABLE_ENTITY, unprocessable(&["body"]));
                };
                let keys = ["resources_session_id", "episode_id", "task_id", "task_data"];
                let new_style = v.as_object().is_some_and(|o| o.len() == 4 && keys.iter().all(|k| o.contains_key(*k)));
                if !new_style {
                    return reply(&g, &h, StatusCode::OK, json!({}));
                }
                let id = v["resources_session_id"].as_str().unwrap_or_default().to_owned();
                if g.closed.lock().expect("lock").contains(&id) {
                    return reply(&g, &h, StatusCode::INTERNAL_SERVER_ERROR, json!(format!("ValueError('Resources session is already closed: {id}')")));
                }
                reply(&g, &h, StatusCode::OK, json!({"resources_session_id": id, "resources_tools": null, "sandbox_access": null}))
            }),
        )
        .route(
            "/get_weather",
            post(|State(g): State<Arc<Gym>>, h: HeaderMap, body: Bytes| async move {
                let city = serde_json::from_slice::<Value>(&body).ok().and_then(|v| v.get("city").and_then(Value::as_str).map(str::to_owned));
                let Some(city) = city else {
                    return reply(&g, &h, StatusCode::UNPROCESSABLE_ENTITY, unprocessable(&["body", "city"]));
                };
                if let Some(c) = cookie_of(&h) {
                    *g.calls.lock().expect("lock").entry(c).or_default() += 1;
                }
                reply(&g, &h, StatusCode::OK, json!({"city": city, "weather_description": format!("The weather in {city} is cold.")}))
            }),
        )
        .route(
            "/verify",
            post(|State(g): State<Arc<Gym>>, h: HeaderMap, body: Bytes| async move {
                let Ok(mut v) = serde_json::from_slice::<Value>(&body) else {
                    return reply(&g, &h, StatusCode::UNPROCESSABLE_ENTITY, unprocessable(&["body"]));
                };
                for key in ["responses_create_params", "response"] {
                    if v.get(key).is_none() {
                        return reply(&g, &h, StatusCode::UNPROCESSABLE_ENTITY, unprocessable(&["body", key]));
                    }
                }
                let called = v["response"]["output"].as_array().is_some_and(|items| {
                    items.iter().any(|i| i["type"] == "function_call" && i["name"] == "get_weather")
                });
                let calls = cookie_of(&h).and_then(|c| g.calls.lock().expect("lock").get(&c).copied()).unwrap_or(0);
                v["reward"] = json!(if called { 1.0 } else { 0.0 });
                v["mask_sample"] = json!(false);
                v["failure_kind"] = Value::Null;
                v["failure_reason"] = Value::Null;
                v["tool_calls_in_session"] = json!(calls);
                reply(&g, &h, StatusCode::OK, v)
            }),
        )
        .route(
            "/close_session",
            post(|State(g): State<Arc<Gym>>, h: HeaderMap, body: Bytes| async move {
                let v: Value = serde_json::from_slice(&body).unwrap_or_default();
                let id = v["resources_session_id"].as_str().unwrap_or_default().to_owned();
                g.closed.lock().expect("lock").push(id.clone());
                reply(&g, &h, StatusCode::OK, json!({"resources_session_id": id}))
            }),
        )
        .fallback(|| async { (StatusCode::NOT_FOUND, Json(json!({"detail": "Not Found"}))) })
        .with_state(gym);
    serve(app)
}
