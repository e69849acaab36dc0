//! The OpenEnv client: `/health` and `/schema` over HTTP, and one WebSocket session (`/ws`) per
//! episode (`reset`, `step`, `state`, `close`), since OpenEnv's HTTP `/reset` and `/step` are
//! stateless. Errors come back as `{"type":"error","data":{"message","code"}}` and become
//! [`EnvError::Service`] (`CAPACITY_REACHED`, `VALIDATION_ERROR`, ...). Unknown fields are
//! tolerated (0.10 repeats `metadata` at the top level).

use std::{sync::Arc, time::Duration};

use futures_util::{SinkExt, StreamExt};
use serde_json::{Value, json};
use tokio::{net::TcpStream, runtime::Runtime};
use tokio_tungstenite::{MaybeTlsStream, WebSocketStream, tungstenite::Message};

use hr_env::{EnvError, Environment, Observation, StepOutcome, Task};

/// Per-message timeout, as the official `EnvClient` uses.
const MESSAGE_TIMEOUT: Duration = Duration::from_secs(60);

/// What a reset or step returns.
#[derive(Debug, Clone, PartialEq)]
pub struct EnvReply {
    /// The observation object.
    pub observation: Value,
    /// The reward, when the environment gives one.
    pub reward: Option<f64>,
    /// Whether the episode is over.
    pub done: bool,
}

/// A client of one OpenEnv server.
#[derive(Debug, Clone)]
pub struct OpenEnvClient {
    name: String,
    base: String,
    runtime: Arc<Runtime>,
}

fn malformed(service: &str, message: impl Into<String>) -> EnvError {
    EnvError::Malformed {
        service: service.to_owned(),
        message: message.into(),
    }
}

impl OpenEnvClient {
    /// A client of the server at `base_url` (`http://127.0.0.1:PORT`); `name` names it in errors.
    pub fn new(name: &str, base_url: &str) -> Result<Self, EnvError> {
        let runtime = crate::http::runtime(name)?;
        Ok(Self {
            name: name.to_owned(),
            base: base_url.trim_end_matches('/').to_owned(),
            runtime,
        })
    }

    /// `GET /health` must say `{"status":"healthy"}`.
    pub fn health(&self) -> Result<(), EnvError> {
        let (status, body) = crate::http::get_json(
            &self.runtime,
            &format!("{}/health", self.base),
            Duration::from_secs(10),
        )
        .map_err(|message| EnvError::Transport {
            service: self.name.clone(),
            message,
        })?;
        if status == 200 && body.get("status").and_then(Value::as_str) == Some("healthy") {
            Ok(())
        } else {
            Err(malformed(
                &self.name,
                format!("/health answered {status}: {body}"),
            ))
        }
    }

    /// `GET /schema`: the action, observation and state JSON schemas.
    pub fn schema(&self) -> Result<Value, EnvError> {
        let (status, body) = crate::http::get_json(
            &self.runtime,
            &format!("{}/schema", self.base),
            Duration::from_secs(10),
        )
        .map_err(|message| EnvError::Transport {
            service: self.name.clone(),
            message,
        })?;
        if status != 200 || body.get("action").is_none() {
            return Err(malformed(
                &self.name,
                format!("/schema answered {status}: {body}"),
            ));
        }
        Ok(body)
    }

    /// Opens a WebSocket session (one environment instance).
    pub fn session(&self) -> Result<OpenEnvSession, EnvError> {
        let url = format!("{}/ws", self.base.replacen("http", "ws", 1));
        let ws = self
            .runtime
            .block_on(async {
                tokio::time::timeout(MESSAGE_TIMEOUT, tokio_tungstenite::connect_async(&url)).await
            })
            .map_err(|_| EnvError::Transport {
                service: self.name.clone(),
                message: "WebSocket connect timed out".into(),
            })?
            .map_err(|e| EnvError::Transport {
                service: self.name.clone(),
                message: format!("WebSocket connect: {e}"),
            })?
            .0;
        Ok(OpenEnvSession {
            name: self.name.clone(),
            runtime: self.runtime.clone(),
            ws: Some(ws),
        })
    }
}

/// One OpenEnv episode session.
#[derive(Debug)]
pub struct OpenEnvSession {
    name: String,
    runtime: Arc<Runtime>,
    ws: Option<WebSocketStream<MaybeTlsStream<TcpStream>>>,
}

impl OpenEnvSession {
    fn exchange(&mut self, message: &Value) -> Result<Value, EnvError> {
        let name = self.name.clone();
        let transport = |m: String| EnvError::Transport {
            service: name.clone(),
            message: m,
        };
        let ws = self
            .ws
            .as_mut()
            .ok_or_else(|| transport("the session is closed".into()))?;
        let reply = self.runtime.block_on(async {
            ws.send(Message::text(message.to_string()))
                .await
                .map_err(|e| transport(format!("send: {e}")))?;
            loop {
                let next = tokio::time::timeout(MESSAGE_TIMEOUT, ws.next())
                    .await
                    .map_err(|_| transport("no reply within 60 s".into()))?;
                match next {
                    Some(Ok(Message::Text(t))) => return Ok(t.to_string()),
                    Some(Ok(Message::Close(frame))) => {
                        return Err(transport(format!(
                            "the server closed the session ({frame:?})"
                        )));
                    }
                    Some(Ok(_)) => continue,
                    Some(Err(e)) => return Err(transport(format!("receive: {e}"))),
                    None => return Err(transport("the server closed the connection".into())),
                }
            }
        })?;
        let value: Value = serde_json::from_str(&reply)
            .map_err(|e| malformed(&self.name, format!("{e}: {reply}")))?;
        match value.get("type").and_then(Value::as_str) {
            Some("error") => {
                let data = value.get("data").cloned().unwrap_or_default();
                Err(EnvError::Service {
                    service: self.name.clone(),
                    code: data
                        .get("code")
                        .and_then(Value::as_str)
                        .unwrap_or("UNKNOWN")
                        .to_owned(),
                    message: data
                        .get("message")
                        .and_then(Value::as_str)
                        .unwrap_or("")
                        .to_owned(),
                })
            }
            Some(_) => Ok(value),
            None => Err(malformed(&self.name, format!("no message type: {reply}"))),
        }
    }

    fn reply(&self, value: &Value) -> Result<EnvReply, EnvError> {
        if value.get("type").and_then(Value::as_str) != Some("observation") {
            return Err(malformed(
                &self.name,
                format!("expected an observation, got {value}"),
            ));
        }
        let data = value
            .get("data")
            .ok_or_else(|| malformed(&self.name, "observation without data"))?;
        Ok(EnvReply {
            observation: data
                .get("observation")
                .cloned()
                .ok_or_else(|| malformed(&self.name, format!("no observation in {data}")))?,
            reward: data.get("reward").and_then(Value::as_f64),
            done: data
                .get("done")
                .and_then(Value::as_bool)
                .ok_or_else(|| malformed(&self.name, format!("no done flag in {data}")))?,
        })
    }

    /// Starts the episode (`data` holds `seed`, `episode_id` and the env's own kwargs).
    pub fn reset(&mut self, data: &Value) -> Result<EnvReply, EnvError> {
        let v = self.exchange(&json!({"type": "reset", "data": data}))?;
        self.reply(&v)
    }

    /// One action.
    pub fn step(&mut self, action: &Value) -> Result<EnvReply, EnvError> {
        let v = self.exchange(&json!({"type": "step", "data": action}))?;
        self.reply(&v)
    }

    /// The environment's state (`episode_id`, `step_count`, ...).
    pub fn state(&mut self) -> Result<Value, EnvError> {
        let v = self.exchange(&json!({"type": "state"}))?;
        if v.get("type").and_then(Value::as_str) != Some("state") {
            return Err(malformed(&self.name, format!("expected a state, got {v}")));
        }
        Ok(v.get("data").cloned().unwrap_or_default())
    }

    /// Closes the session (the server frees the environment).
    pub fn close(&mut self) -> Result<(), EnvError> {
        let Some(mut ws) = self.ws.take() else {
            return Ok(());
        };
        let name = self.name.clone();
        self.runtime.block_on(async move {
            let _ = ws
                .send(Message::text(json!({"type": "close"}).to_string()))
                .await;
            let _ = tokio::time::timeout(Duration::from_secs(5), ws.close(None)).await;
            Ok::<_, EnvError>(())
        })?;
        let _ = name;
        Ok(())
    }
}

impl Drop for OpenEnvSession {
    fn drop(&mut self) {
        let _ = self.close();
    }
}

/// [`Environment`] over OpenEnv: the policy's text goes into the action field `action_field`
/// (the echo env's `message`); the reset data is the task payload plus the seed.
#[derive(Debug)]
pub struct OpenEnvEnvironment {
    client: OpenEnvClient,
    action_field: String,
    session: Option<OpenEnvSession>,
}

impl OpenEnvEnvironment {
    /// An environment on `client` whose actions are `{action_field: text}`.
    pub fn new(client: OpenEnvClient, action_field: &str) -> Self {
        Self {
            client,
            action_field: action_field.to_owned(),
            session: None,
        }
    }
}

fn observation(reply: &EnvReply) -> Observation {
    Observation {
        text: reply.observation.to_string(),
        raw: reply.observation.clone(),
    }
}

impl Environment for OpenEnvEnvironment {
    fn reset(&mut self, task: &Task, seed: u64) -> Result<Observation, EnvError> {
        self.close()?;
        let mut session = self.client.session()?;
        let mut data = match &task.payload {
            Value::Object(m) => Value::Object(m.clone()),
            _ => json!({}),
        };
        data["seed"] = json!(seed);
        data["episode_id"] = json!(task.id);
        let reply = session.reset(&data)?;
        self.session = Some(session);
        Ok(observation(&reply))
    }

    fn step(&mut self, action: &str) -> Result<StepOutcome, EnvError> {
        let session = self.session.as_mut().ok_or_else(|| EnvError::Transport {
            service: self.client.name.clone(),
            message: "step before reset".into(),
        })?;
        let reply = session.step(&json!({ self.action_field.clone(): action }))?;
        Ok(StepOutcome {
            observation: observation(&reply),
            reward: reply.reward.unwrap_or(0.0),
            done: reply.done,
        })
    }

    fn close(&mut self) -> Result<(), EnvError> {
        match self.session.take() {
            Some(mut s) => s.close(),
            None => Ok(()),
        }
    }
}
