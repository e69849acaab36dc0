//! The built-in fixture environment: verifiable tasks that need no service, so training runs
//! anywhere. Rewards come from exact checks:
//! - `arithmetic` (single turn): 1 when the answer's final number (read by `hr_eval`'s one
//!   scoring rule, as evaluation reads it) is the result, else 0;
//! - `tool_call` (single turn): 1 for a first `<tool_call>{"name": ..., "arguments": {...}}`
//!   `</tool_call>` with the right name and equal arguments, 0.1 for a well-formed call that is
//!   wrong, else 0;
//! - `calculator` (multi-turn): the policy may call `add` first and gets the sum back as a
//!   `<tool_response>`; its final answer is then scored as in `arithmetic`;
//! - `digits` (single turn, a dense format reward): the share of the answer's characters that
//!   are ASCII digits, so even a tiny random model gets a signal to learn from.

use hr_eval::{CallMatch, call_matches, number_matches, parse_tool_call};
use serde_json::{Value, json};

use crate::{BridgeError, Environment, Observation, StepOutcome, Task};

/// Which fixture tasks to draw.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum FixtureKind {
    /// `a + b` with small operands, answered directly.
    Arithmetic,
    /// A weather request to answer with one tool call.
    ToolCall,
    /// `a + b` with an `add` tool available (two turns).
    Calculator,
    /// "Answer with digits only": rewarded by the share of digit characters.
    Digits,
}

const CITIES: [&str; 8] = [
    "Paris", "Tokyo", "Lima", "Oslo", "Cairo", "Quito", "Seoul", "Perth",
];

/// SplitMix64, so the task list depends only on the seed.
fn mix(state: &mut u64) -> u64 {
    *state = state.wrapping_add(0x9E37_79B9_7F4A_7C15);
    let mut z = *state;
    z = (z ^ (z >> 30)).wrapping_mul(0xBF58_476D_1CE4_E5B9);
    z = (z ^ (z >> 27)).wrapping_mul(0x94D0_49BB_1331_11EB);
    z ^ (z >> 31)
}

/// `count` tasks of `kind`, the same for the same seed, with ids `<kind>-<n>`.
pub fn fixture_tasks(kind: FixtureKind, count: usize, seed: u64) -> Vec<Task> {
    let mut state = seed;
    (0..count)
        .map(|n| {
            let (a, b) = ((mix(&mut state) % 10) as i64, (mix(&mut state) % 10) as i64);
            match kind {
                FixtureKind::Arithmetic => Task {
                    id: format!("arithmetic-{n}"),
                    payload: json!({"kind": "arithmetic", "question": format!("What is {a} + {b}?"), "answer": a + b}),
                },
                FixtureKind::Calculator => Task {
                    id: format!("calculator-{n}"),
                    payload: json!({"kind": "calculator", "question": format!(
                        "What is {a} + {b}? You may call the tool `add` with arguments a and b."), "a": a, "b": b}),
                },
                FixtureKind::Digits => Task {
                    id: format!("digits-{n}"),
                    payload: json!({"kind": "digits", "question": format!("Answer with digits only: {a}{b}?")}),
                },
                FixtureKind::ToolCall => {
                    let city = CITIES[(mix(&mut state) % CITIES.len() as u64) as usize];
                    Task {
                        id: format!("tool_call-{n}"),
                        payload: json!({"kind": "tool_call",
                            "question": format!("Call get_weather for {city}."),
                            "name": "get_weather", "arguments": {"city": city}}),
                    }
                }
            }
        })
        .collect()
}

fn field<'a>(task: &'a Task, name: &str) -> Result<&'a Value, BridgeError> {
    task.payload
        .get(name)
        .ok_or_else(|| BridgeError::Malformed {
            service: "fixture".to_owned(),
            message: format!("task {}: payload has no `{name}`", task.id),
        })
}

/// The fixture environment (one episode at a time).
#[derive(Debug, Default)]
pub struct FixtureEnvironment {
    episode: Option<(Task, usize)>,
}

impl FixtureEnvironment {
    /// A fresh environment.
    pub fn new() -> Self {
        Self::default()
    }
}

fn outcome(reward: f64, done: bool, text: String) -> StepOutcome {
    StepOutcome {
        observation: Observation {
            raw: json!({"text": text}),
            text,
        },
        reward,
        done,
    }
}

impl Environment for FixtureEnvironment {
    fn reset(&mut self, task: &Task, _seed: u64) -> Result<Observation, BridgeError> {
        let question = field(task, "question")?
            .as_str()
            .unwrap_or_default()
            .to_owned();
        self.episode = Some((task.clone(), 0));
        Ok(Observation {
            raw: task.payload.clone(),
            text: question,
        })
    }

    fn step(&mut self, action: &str) -> Result<StepOutcome, BridgeError> {
        let Some((task, turns)) = self.episode.as_mut() else {
            return Err(BridgeError::Malformed {
                service: "fixture".to_owned(),
                message: "step before reset".to_owned(),
            });
        };
        *turns += 1;
        let kind = field(task, "kind")?.as_str().unwrap_or_default().to_owned();
        Ok(match kind.as_str() {
            "arithmetic" => {
                let answer = field(task, "answer")?.as_f64();
                let right = answer.is_some_and(|a| number_matches(action, a));
                outcome(if right { 1.0 } else { 0.0 }, true, String::new())
            }
            "digits" => {
                let chars = action.chars().count();
                let digits = action.chars().filter(char::is_ascii_digit).count();
                outcome(
                    if chars == 0 {
                        0.0
                    } else {
                        digits as f64 / chars as f64
                    },
                    true,
                    String::new(),
                )
            }
            "tool_call" => {
                let name = field(task, "name")?.as_str().unwrap_or_default();
                let reward = match call_matches(action, name, field(task, "arguments")?) {
                    CallMatch::Correct => 1.0,
                    CallMatch::Wrong => 0.1,
                    CallMatch::Absent => 0.0,
                };
                outcome(reward, true, String::new())
            }
            "calculator" => {
                let (a, b) = (
                    field(task, "a")?.as_i64().unwrap_or(0),
                    field(task, "b")?.as_i64().unwrap_or(0),
                );
                match parse_tool_call(action) {
                    Some((name, arguments)) if *turns == 1 && name == "add" => {
                        let arg = |k: &str| arguments.get(k).and_then(Value::as_i64);
                        let text = match (arg("a"), arg("b")) {
                            (Some(x), Some(y)) => format!("<tool_response>{}</tool_response>", x + y),
                            _ => "<tool_response>error: add needs integer arguments a and b</tool_response>".to_owned(),
                        };
                        outcome(0.0, false, text)
                    }
                    _ => outcome(
                        if number_matches(action, (a + b) as f64) {
                            1.0
                        } else {
                            0.0
                        },
                        true,
                        String::new(),
                    ),
                }
            }
            other => {
                return Err(BridgeError::Malformed {
                    service: "fixture".to_owned(),
                    message: format!(
                        "task {}: unknown kind `{other}` (arithmetic, tool_call, calculator, digits)",
                        task.id
                    ),
                });
            }
        })
    }

    fn close(&mut self) -> Result<(), BridgeError> {
        self.episode = None;
        Ok(())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn tasks_depend_only_on_the_seed() {
        assert_eq!(
            fixture_tasks(FixtureKind::ToolCall, 5, 3),
            fixture_tasks(FixtureKind::ToolCall, 5, 3)
        );
        assert_ne!(
            fixture_tasks(FixtureKind::Arithmetic, 5, 3),
            fixture_tasks(FixtureKind::Arithmetic, 5, 4)
        );
    }

    #[test]
    fn rewards_come_from_exact_checks() -> Result<(), BridgeError> {
        let mut env = FixtureEnvironment::new();
        let task = Task {
            id: "t".into(),
            payload: json!({"kind": "arithmetic", "question": "What is 2 + 3?", "answer": 5}),
        };
        assert_eq!(env.reset(&task, 0)?.text, "What is 2 + 3?");
        assert_eq!(env.step("2 + 3 = 5")?.reward, 1.0);
        env.reset(&task, 0)?;
        assert_eq!(env.step("it is 50")?.reward, 0.0);

        let call = Task {
            id: "c".into(),
            payload: json!({"kind": "tool_call", "question": "q", "name": "get_weather", "arguments": {"city": "Oslo"}}),
        };
        env.reset(&call, 0)?;
        assert_eq!(
            env.step(
                r#"<tool_call>{"name": "get_weather", "arguments": {"city": "Oslo"}}</tool_call>"#
            )?
            .reward,
            1.0
        );
        env.reset(&call, 0)?;
        assert_eq!(
            env.step(
                r#"<tool_call>{"name": "get_weather", "arguments": {"city": "Rome"}}</tool_call>"#
            )?
            .reward,
            0.1
        );
        env.reset(&call, 0)?;
        assert_eq!(env.step("Oslo weather")?.reward, 0.0);

        let calc = Task {
            id: "k".into(),
            payload: json!({"kind": "calculator", "question": "q", "a": 4, "b": 9}),
        };
        env.reset(&calc, 0)?;
        let first =
            env.step(r#"<tool_call>{"name": "add", "arguments": {"a": 4, "b": 9}}</tool_call>"#)?;
        assert_eq!(
            (first.done, first.observation.text.as_str()),
            (false, "<tool_response>13</tool_response>")
        );
        let last = env.step("The answer is 13.")?;
        assert_eq!((last.done, last.reward), (true, 1.0));
        let digits = Task {
            id: "d".into(),
            payload: json!({"kind": "digits", "question": "q"}),
        };
        env.reset(&digits, 0)?;
        assert_eq!(env.step("12ab")?.reward, 0.5);
        env.close()?;
        assert!(env.step("x").is_err(), "no episode after close");
        Ok(())
    }
}
