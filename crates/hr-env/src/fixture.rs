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
//!   are ASCII digits, so even a tiny random model gets a signal to learn from;
//! - `word_problem` and `tool_use` (single turn): the authored families of `authored.rs`
//!   (each line labelled with its split), scored as `arithmetic` and `tool_call`.

use hr_eval::{CallMatch, call_matches, number_matches, parse_tool_call};
use serde_json::{Value, json};

use hr_plan::FixtureKind;

use crate::authored;
use crate::{EnvError, Environment, Observation, StepOutcome, Task};

const CITIES: [&str; 20] = [
    "Paris", "Tokyo", "Lima", "Oslo", "Cairo", "Quito", "Seoul", "Perth", "Accra", "Dakar",
    "Hanoi", "Kyiv", "Riga", "Sofia", "Tunis", "Baku", "Bern", "Doha", "Male", "Suva",
];

/// Which part of a family's question space tasks come from. Every question of a family belongs
/// to exactly one split: training draws only from `Train`, checkpoint selection only from `Dev`,
/// the final assessment only from `HeldOut`.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Split {
    /// About 70% of the questions.
    Train,
    /// About 15%.
    Dev,
    /// The rest, about 15%.
    HeldOut,
}

impl Split {
    /// `train`, `dev` or `held_out`.
    pub fn name(self) -> &'static str {
        match self {
            Self::Train => "train",
            Self::Dev => "dev",
            Self::HeldOut => "held_out",
        }
    }
}

/// SplitMix64, so the task list depends only on the seed.
pub(crate) fn mix(state: &mut u64) -> u64 {
    *state = state.wrapping_add(0x9E37_79B9_7F4A_7C15);
    let mut z = *state;
    z = (z ^ (z >> 30)).wrapping_mul(0xBF58_476D_1CE4_E5B9);
    z = (z ^ (z >> 27)).wrapping_mul(0x94D0_49BB_1331_11EB);
    z ^ (z >> 31)
}

/// The family's question space: operand pairs `(a, b)` in 0..10 for the arithmetic kinds, city
/// indexes for tool calls, line indexes for the authored families.
fn space(kind: FixtureKind) -> Vec<(i64, i64)> {
    if let Some(n) = authored::len(kind) {
        return (0..n as i64).map(|i| (i, 0)).collect();
    }
    match kind {
        FixtureKind::ToolCall => (0..CITIES.len() as i64).map(|c| (c, 0)).collect(),
        _ => (0..10).flat_map(|a| (0..10).map(move |b| (a, b))).collect(),
    }
}

/// The questions of `split`: an authored family's lines labelled with it (as `(index, 0)`), or
/// a generated family's space in a fixed pseudo-random order (independent of any plan seed),
/// cut at 70% and 85%.
fn split_space(kind: FixtureKind, split: Split) -> Vec<(i64, i64)> {
    if let Some(indexes) = authored::split_indexes(kind, split.name()) {
        return indexes.into_iter().map(|i| (i as i64, 0)).collect();
    }
    let mut items: Vec<(u64, (i64, i64))> = space(kind)
        .into_iter()
        .enumerate()
        .map(|(i, item)| (mix(&mut (0x5EED_5EED ^ i as u64)), item))
        .collect();
    items.sort_unstable();
    let n = items.len();
    let (dev, held_out) = (n * 70 / 100, n * 85 / 100);
    let range = match split {
        Split::Train => 0..dev,
        Split::Dev => dev..held_out,
        Split::HeldOut => held_out..n,
    };
    items[range].iter().map(|(_, item)| *item).collect()
}

fn task(kind: FixtureKind, id: String, (a, b): (i64, i64)) -> Task {
    let payload = match kind {
        FixtureKind::Arithmetic => {
            json!({"kind": "arithmetic", "question": format!("What is {a} + {b}?"), "answer": a + b})
        }
        FixtureKind::Calculator => json!({"kind": "calculator", "question": format!(
            "What is {a} + {b}? You may call the tool `add` with arguments a and b."), "a": a, "b": b}),
        FixtureKind::Digits => {
            json!({"kind": "digits", "question": format!("Answer with digits only: {a}{b}?")})
        }
        FixtureKind::WordProblem | FixtureKind::ToolUse => {
            authored::payload(kind, a as usize).unwrap_or(Value::Null)
        }
        FixtureKind::ToolCall => {
            let city = CITIES[a as usize];
            json!({"kind": "tool_call", "question": format!("Call get_weather for {city}."),
                "name": "get_weather", "arguments": {"city": city}})
        }
    };
    Task { id, payload }
}

/// `count` training tasks of `kind`, the same for the same seed, with ids `<kind>-<n>`; drawn
/// (with repetition) from the family's [`Split::Train`] questions only.
pub fn fixture_tasks(kind: FixtureKind, count: usize, seed: u64) -> Vec<Task> {
    fixture_split_tasks(kind, Split::Train, count, seed)
}

/// `count` tasks of `kind` from `split`, the same for the same seed; ids are `<kind>-<n>` for
/// training and `<kind>-<split>-<n>` otherwise.
pub fn fixture_split_tasks(kind: FixtureKind, split: Split, count: usize, seed: u64) -> Vec<Task> {
    let pool = split_space(kind, split);
    let mut state = seed;
    (0..count)
        .map(|n| {
            let id = match split {
                Split::Train => format!("{}-{n}", kind.name()),
                other => format!("{}-{}-{n}", kind.name(), other.name()),
            };
            let pick = (mix(&mut state) % pool.len() as u64) as usize;
            task(kind, id, pool[pick])
        })
        .collect()
}

fn field<'a>(task: &'a Task, name: &str) -> Result<&'a Value, EnvError> {
    task.payload.get(name).ok_or_else(|| EnvError::Malformed {
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
    fn reset(&mut self, task: &Task, _seed: u64) -> Result<Observation, EnvError> {
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

    fn step(&mut self, action: &str) -> Result<StepOutcome, EnvError> {
        let Some((task, turns)) = self.episode.as_mut() else {
            return Err(EnvError::Malformed {
                service: "fixture".to_owned(),
                message: "step before reset".to_owned(),
            });
        };
        *turns += 1;
        let kind = field(task, "kind")?.as_str().unwrap_or_default().to_owned();
        Ok(match kind.as_str() {
            "arithmetic" | "word_problem" => {
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
            "tool_call" | "tool_use" => {
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
                return Err(EnvError::Malformed {
                    service: "fixture".to_owned(),
                    message: format!(
                        "task {}: unknown kind `{other}` (arithmetic, tool_call, calculator, \
                         digits, word_problem, tool_use)",
                        task.id
                    ),
                });
            }
        })
    }

    fn close(&mut self) -> Result<(), EnvError> {
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
    fn every_question_belongs_to_one_split_and_each_split_has_some() {
        use std::collections::BTreeSet;
        for kind in FixtureKind::ALL {
            let questions = |split| -> BTreeSet<String> {
                fixture_split_tasks(kind, split, 3000, 9)
                    .iter()
                    .map(|t| t.payload["question"].as_str().unwrap_or("").to_owned())
                    .collect()
            };
            let (train, dev, held_out) = (
                questions(Split::Train),
                questions(Split::Dev),
                questions(Split::HeldOut),
            );
            assert!(!dev.is_empty() && !held_out.is_empty(), "{kind:?}");
            assert!(train.is_disjoint(&dev), "{kind:?}: train and dev share");
            assert!(
                train.is_disjoint(&held_out),
                "{kind:?}: train and held-out share"
            );
            assert!(
                dev.is_disjoint(&held_out),
                "{kind:?}: dev and held-out share"
            );
            assert_eq!(
                train.len() + dev.len() + held_out.len(),
                space(kind).len(),
                "{kind:?}: 3000 draws reach every question"
            );
        }
    }

    #[test]
    fn authored_tasks_carry_their_split_in_the_id_and_their_source_line() {
        for (kind, name) in [
            (FixtureKind::WordProblem, "word_problem"),
            (FixtureKind::ToolUse, "tool_use"),
        ] {
            let task = &fixture_split_tasks(kind, Split::HeldOut, 1, 0)[0];
            assert_eq!(task.payload["kind"], name);
            assert!(
                task.id.starts_with(&format!("{name}-held_out-")),
                "{}",
                task.id
            );
            assert!(task.payload["source"].is_string(), "{}", task.payload);
        }
        let call = &fixture_tasks(FixtureKind::ToolUse, 1, 0)[0];
        let question = call.payload["question"].as_str().unwrap_or_default();
        assert!(question.starts_with(authored::TOOLS_PROMPT) && question.contains("\nRequest: "));
    }

    #[test]
    fn rewards_come_from_exact_checks() -> Result<(), EnvError> {
        let mut env = FixtureEnvironment::new();
        let task = Task {
            id: "t".into(),
            payload: json!({"kind": "arithmetic", "question": "What is 2 + 3?", "answer": 5}),
        };
        assert_eq!(env.reset(&task, 0)?.text, "What is 2 + 3?");
        assert_eq!(env.step("2 + 3 = 5")?.reward, 1.0);
        env.reset(&task, 0)?;
        assert_eq!(env.step("it is 50")?.reward, 0.0);
        let word = Task {
            id: "w".into(),
            payload: json!({"kind": "word_problem", "question": "q", "answer": 1800}),
        };
        env.reset(&word, 0)?;
        assert_eq!(env.step("15 × 120 = 1,800 seats.")?.reward, 1.0);
        let tool = Task {
            id: "u".into(),
            payload: json!({"kind": "tool_use", "question": "q", "name": "set_timer",
                            "arguments": {"minutes": 7}}),
        };
        env.reset(&tool, 0)?;
        let call = r#"<tool_call>{"name": "set_timer", "arguments": {"minutes": 7.0}}</tool_call>"#;
        assert_eq!(env.step(call)?.reward, 1.0);
        env.reset(&tool, 0)?;
        let wrong =
            r#"<tool_call>{"name": "set_alarm", "arguments": {"time": "07:00"}}</tool_call>"#;
        assert_eq!(env.step(wrong)?.reward, 0.1);

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
