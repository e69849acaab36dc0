//! The NeMo Gym resources-server client. The trainer plays the agent: it seeds a session, turns
//! the model's output into `function_call` / `message` items, calls the tools, and asks
//! `/verify` for the reward with a `NeMoGymResponse` holding the whole trajectory. One cookie jar
//! per rollout (legacy servers key their state on the session cookie); `/close_session` answering
//! 404 (0.4 servers) is a no-op. Errors: 422 `{"detail":[...]}` and 500 with a bare JSON string.

use std::{collections::BTreeMap, sync::Arc, time::Duration};

use serde_json::{Value, json};
use tokio::runtime::Runtime;

use hr_env::{EnvError, Environment, Observation, StepOutcome, Task};

/// A client of one resources server.
#[derive(Debug, Clone)]
pub struct NemoGymClient {
    name: String,
    base: String,
    http: reqwest::Client,
    runtime: Arc<Runtime>,
}

/// `/verify`'s verdict.
#[derive(Debug, Clone, PartialEq)]
pub struct Verdict {
    /// The reward.
    pub reward: f64,
    /// Whether to mask the sample out of training.
    pub mask_sample: bool,
    /// Failure kind, if the server gave one.
    pub failure_kind: Option<String>,
    /// The whole reply (extra numbers such as reward components).
    pub raw: Value,
}

/// One rollout: its own cookie jar and session.
#[derive(Debug)]
pub struct Rollout {
    client: NemoGymClient,
    cookies: BTreeMap<String, String>,
    session: Option<(String, Value)>,
}

impl NemoGymClient {
    /// A client of the resources server at `base_url`.
    pub fn new(name: &str, base_url: &str) -> Result<Self, EnvError> {
        let runtime = crate::http::runtime(name)?;
        let http = reqwest::Client::builder()
            .connect_timeout(Duration::from_secs(2))
            .build()
            .map_err(|e| EnvError::Transport {
                service: name.to_owned(),
                message: e.to_string(),
            })?;
        Ok(Self {
            name: name.to_owned(),
            base: base_url.trim_end_matches('/').to_owned(),
            http,
            runtime,
        })
    }

    /// A new rollout with an empty cookie jar.
    pub fn rollout(&self) -> Rollout {
        Rollout {
            client: self.clone(),
            cookies: BTreeMap::new(),
            session: None,
        }
    }
}

impl Rollout {
    fn post(
        &mut self,
        path: &str,
        body: &Value,
        timeout: Duration,
    ) -> Result<(u16, Value), EnvError> {
        let c = &self.client;
        let cookie = self
            .cookies
            .iter()
            .map(|(k, v)| format!("{k}={v}"))
            .collect::<Vec<_>>()
            .join("; ");
        let url = format!("{}/{}", c.base, path.trim_start_matches('/'));
        let name = c.name.clone();
        let (status, set_cookies, bytes) = c.runtime.block_on(async {
            let mut req = c.http.post(&url).json(body).timeout(timeout);
            if !cookie.is_empty() {
                req = req.header(reqwest::header::COOKIE, cookie);
            }
            let resp = req.send().await.map_err(|e| EnvError::Transport {
                service: name.clone(),
                message: format!("POST {path}: {e}"),
            })?;
            let status = resp.status().as_u16();
            let set: Vec<String> = resp
                .headers()
                .get_all(reqwest::header::SET_COOKIE)
                .iter()
                .filter_map(|v| v.to_str().ok().map(str::to_owned))
                .collect();
            let bytes = resp.bytes().await.map_err(|e| EnvError::Transport {
                service: name.clone(),
                message: format!("POST {path}: {e}"),
            })?;
            Ok::<_, EnvError>((status, set, bytes))
        })?;
        for header in set_cookies {
            if let Some((k, v)) = header.split(';').next().and_then(|kv| kv.split_once('=')) {
                self.cookies
                    .insert(k.trim().to_owned(), v.trim().to_owned());
            }
        }
        let text = String::from_utf8_lossy(&bytes)
            .chars()
            .take(500)
            .collect::<String>();
        match serde_json::from_slice::<Value>(&bytes) {
            Ok(value) => Ok((status, value)),
            // An error status keeps its (non-JSON) text; a success must be JSON.
            Err(_) if !(200..300).contains(&status) => Ok((status, Value::String(text))),
            Err(e) => Err(EnvError::Malformed {
                service: c.name.clone(),
                message: format!("POST {path} answered {status} with non-JSON ({e}): {text}"),
            }),
        }
    }

    fn ok(&mut self, path: &str, body: &Value, timeout: Duration) -> Result<Value, EnvError> {
        let (status, value) = self.post(path, body, timeout)?;
        match status {
            200..=299 => Ok(value),
            _ => Err(EnvError::Service {
                service: self.client.name.clone(),
                code: status.to_string(),
                message: match &value {
                    Value::String(s) => s.clone(),
                    other => other
                        .get("detail")
                        .map_or_else(|| other.to_string(), Value::to_string),
                },
            }),
        }
    }

    /// Seeds the session with a dataset row (the legacy body every version accepts).
    pub fn seed(&mut self, row: &Value) -> Result<Value, EnvError> {
        self.ok("seed_session", row, Duration::from_secs(60))
    }

    /// Seeds with the 0.7 body and remembers the session for `/close_session`.
    pub fn seed_session(
        &mut self,
        session_id: &str,
        rollout_id: &str,
        taskset: &str,
        task_id: &str,
        task_data: &Value,
    ) -> Result<Value, EnvError> {
        let episode = json!({"rollout_id": rollout_id, "attempt": 0});
        let body = json!({"resources_session_id": session_id, "episode_id": episode,
            "task_id": {"taskset": taskset, "task_id": task_id}, "task_data": task_data});
        let out = self.ok("seed_session", &body, Duration::from_secs(60))?;
        self.session = Some((session_id.to_owned(), episode));
        Ok(out)
    }

    /// Calls a tool with its JSON arguments.
    pub fn call_tool(&mut self, name: &str, arguments: &Value) -> Result<Value, EnvError> {
        self.ok(name, arguments, Duration::from_secs(60))
    }

    /// Verifies a trajectory: `row` plus a `NeMoGymResponse` whose output holds every item.
    pub fn verify(&mut self, row: &Value, output: &[Value]) -> Result<Verdict, EnvError> {
        let mut body = match row {
            Value::Object(m) => Value::Object(m.clone()),
            _ => json!({}),
        };
        body["response"] = response(output);
        let value = self.ok("verify", &body, Duration::from_secs(300))?;
        let reward =
            value
                .get("reward")
                .and_then(Value::as_f64)
                .ok_or_else(|| EnvError::Malformed {
                    service: self.client.name.clone(),
                    message: format!(
                        "/verify answered without a numeric reward: {}",
                        value.to_string().chars().take(200).collect::<String>()
                    ),
                })?;
        Ok(Verdict {
            reward,
            mask_sample: value
                .get("mask_sample")
                .and_then(Value::as_bool)
                .unwrap_or(false),
            failure_kind: value
                .get("failure_kind")
                .and_then(Value::as_str)
                .map(str::to_owned),
            raw: value,
        })
    }

    /// Closes the 0.7 session (404 from an older server is a no-op).
    pub fn close(&mut self) -> Result<(), EnvError> {
        let Some((id, episode)) = self.session.take() else {
            return Ok(());
        };
        let (status, value) = self.post(
            "close_session",
            &json!({"resources_session_id": id, "episode_id": episode}),
            Duration::from_secs(60),
        )?;
        match status {
            200..=299 | 404 => Ok(()),
            _ => Err(EnvError::Service {
                service: self.client.name.clone(),
                code: status.to_string(),
                message: value.to_string(),
            }),
        }
    }
}

/// A minimal `NeMoGymResponse` holding `output`.
pub fn response(output: &[Value]) -> Value {
    json!({"id": "resp_hr", "created_at": 0, "model": "policy", "object": "response", "output": output,
        "parallel_tool_calls": true, "tool_choice": "auto", "tools": []})
}

/// The model's text as a response item: a `<tool_call>{"name","arguments"}</tool_call>` (or a
/// bare JSON call) becomes a `function_call`; anything else a `message`.
pub fn output_item(text: &str, call_index: usize) -> Value {
    let body = match (text.find("<tool_call>"), text.rfind("</tool_call>")) {
        (Some(a), Some(b)) if b > a => text[a + "<tool_call>".len()..b].trim(),
        _ => text.trim(),
    };
    if let Ok(call) = serde_json::from_str::<Value>(body)
        && let Some(name) = call.get("name").and_then(Value::as_str)
    {
        let arguments = call.get("arguments").cloned().unwrap_or_else(|| json!({}));
        return json!({"type": "function_call", "id": format!("fc_{call_index}"), "call_id": format!("call_{call_index}"),
                "name": name, "arguments": arguments.to_string(), "status": "completed"});
    }
    json!({"type": "message", "id": format!("msg_{call_index}"), "role": "assistant", "status": "completed",
        "content": [{"type": "output_text", "text": text, "annotations": []}]})
}

/// [`Environment`] over a resources server: each task's payload is a dataset row
/// (`responses_create_params`, ...); tool calls are executed and their results observed; a
/// message ends the episode and `/verify` gives the reward.
#[derive(Debug)]
pub struct NemoGymEnvironment {
    client: NemoGymClient,
    rollout: Option<(Rollout, Value, Vec<Value>)>,
}

impl NemoGymEnvironment {
    /// An environment on `client`.
    pub fn new(client: NemoGymClient) -> Self {
        Self {
            client,
            rollout: None,
        }
    }
}

impl Environment for NemoGymEnvironment {
    fn reset(&mut self, task: &Task, _seed: u64) -> Result<Observation, EnvError> {
        self.close()?;
        let mut rollout = self.client.rollout();
        rollout.seed(&task.payload)?;
        let prompt = task
            .payload
            .pointer("/responses_create_params/input")
            .cloned()
            .unwrap_or_default();
        let text = match &prompt {
            Value::String(s) => s.clone(),
            Value::Array(items) => items
                .iter()
                .filter_map(|i| i.get("content").and_then(Value::as_str))
                .collect::<Vec<_>>()
                .join("\n"),
            other => other.to_string(),
        };
        self.rollout = Some((rollout, task.payload.clone(), Vec::new()));
        Ok(Observation { text, raw: prompt })
    }

    fn step(&mut self, action: &str) -> Result<StepOutcome, EnvError> {
        let (rollout, row, output) = self.rollout.as_mut().ok_or_else(|| EnvError::Transport {
            service: self.client.name.clone(),
            message: "step before reset".into(),
        })?;
        let item = output_item(action, output.len());
        output.push(item.clone());
        if item["type"] == "function_call" {
            let name = item["name"].as_str().unwrap_or_default().to_owned();
            let args: Value = serde_json::from_str(item["arguments"].as_str().unwrap_or("{}"))
                .unwrap_or_default();
            let result = rollout.call_tool(&name, &args)?;
            output.push(json!({"type": "function_call_output", "call_id": item["call_id"], "output": result.to_string()}));
            return Ok(StepOutcome {
                observation: Observation {
                    text: result.to_string(),
                    raw: result,
                },
                reward: 0.0,
                done: false,
            });
        }
        let verdict = rollout.verify(row, output)?;
        Ok(StepOutcome {
            observation: Observation {
                text: String::new(),
                raw: verdict.raw,
            },
            reward: verdict.reward,
            done: true,
        })
    }

    fn close(&mut self) -> Result<(), EnvError> {
        match self.rollout.take() {
            Some((mut r, _, _)) => r.close(),
            None => Ok(()),
        }
    }
}
