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
pub enum FixtureMode {
    /// As the real echo env.
    Faithful,
    /// Steps are answered with text that is not JSON.
    MalformedReplies,
}

/// A fixture server running on its own thread; stopped on drop.
#[derive(Debug)]
pub struct FixtureServer {
    url: String,
    shutdown: Option<tokio::sync::oneshot::Sender<()>>,
    thread: Option<std::thread::JoinHandle<()>>,
}

impl FixtureServer {
    /// `http://127.0.0.1:PORT`.
    pub fn url(&self) -> &str {
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
pub fn openenv_echo(mode: FixtureMode, max_sessions: usize) -> std::io::Result<FixtureServer> {
    let listener = std::net::TcpListener::bind("127.0.0.1:0")?;
    listener.set_nonblocking(true)?;
    let url = format!("http://{}", listener.local_addr()?);
    let (tx, rx) = tokio::sync::oneshot::channel::<()>();
    let state = Arc::new(Echo {
        mode,
        max_sessions,
        active: AtomicUsize::new(0),
    });
    let thread = std::thread::spawn(move || {
        let rt = tokio::runtime::Builder::new_current_thread()
            .enable_all()
            .build()
            .expect("fixture runtime");
        rt.block_on(async move {
            let listener = tokio::net::TcpListener::from_std(listener).expect("listener");
            let app = Router::new()
                .route(
                    "/health",
                    get(|| async { Json(json!({"status": "healthy"})) }),
                )
                .route("/schema", get(|| async { Json(schema()) }))
                .route("/ws", get(ws))
                .with_state(state);
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
