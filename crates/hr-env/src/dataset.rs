//! The dataset backend: your own prompts from a JSON-lines file, scored by the plan's weighted
//! reward rules. Every row is checked when the file is read (a JSON object whose `prompt` is a
//! non-empty string or, as in TRL's conversational datasets, a list of chat messages ending
//! with the user's, and every column a reward reads), so a bad row is refused naming the file,
//! the line and the field before anything runs. An episode is one turn: the prompt, then the
//! completion scored by each rule; its reward is the weighted sum, and each rule's score
//! travels in the step's raw observation (`{"rewards": {name: score}}`) to be logged as
//! `rewards/<name>/mean` and `/std`. A chat row's messages travel in the reset observation's
//! raw value (`{"messages": [...]}`), which the rollout renders as the conversation.

use std::collections::BTreeMap;
use std::path::{Path, PathBuf};
use std::sync::{Arc, Mutex};

use hr_eval::{CallMatch, call_matches, number_matches};
use hr_plan::{Reward, RewardRule};
use serde_json::{Map, Value, json};

use crate::{EnvError, Environment, Observation, PythonReward, RewardBatch, StepOutcome, Task};

/// A row (or file) that cannot be used: the file, the row's 1-based line, the field and why.
#[derive(Debug, Clone, PartialEq)]
pub struct RowError {
    /// The file.
    pub path: PathBuf,
    /// The row's 1-based line; 0 for the file as a whole.
    pub line: usize,
    /// The field at fault (`prompt`, a reward's column, or `(row)`).
    pub field: String,
    /// What is wrong and how to fix it.
    pub message: String,
}

impl std::fmt::Display for RowError {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self.line {
            0 => write!(f, "{}: {}", self.path.display(), self.message),
            n => write!(
                f,
                "{} line {n}: `{}`: {}",
                self.path.display(),
                self.field,
                self.message
            ),
        }
    }
}

impl std::error::Error for RowError {}

/// The largest dataset file read (its rows are held in memory as JSON values).
pub(crate) const MAX_DATASET_BYTES: u64 = 1 << 30;
/// The largest row: far above any prompt a model's context holds (4 MiB is about a million
/// tokens of text).
pub(crate) const MAX_ROW_BYTES: usize = 4 << 20;

/// The rows of the JSON-lines file at `path` as tasks (`<file stem>-<line>`, the row as
/// payload), each checked for a `prompt` (a string, or chat messages when `chat`: the plan's
/// prompt format renders them) and the columns `rewards` read. Blank lines are skipped; an
/// empty file is refused.
pub fn dataset_tasks(path: &Path, rewards: &[Reward], chat: bool) -> Result<Vec<Task>, RowError> {
    let bad = |line: usize, field: &str, message: String| RowError {
        path: path.to_owned(),
        line,
        field: field.to_owned(),
        message,
    };
    let text = hr_files::read_to_string_bounded(path, MAX_DATASET_BYTES)
        .map_err(|e| bad(0, "(file)", format!("cannot be read: {e}")))?;
    let stem = path
        .file_stem()
        .map_or_else(|| "row".to_owned(), |s| s.to_string_lossy().into_owned());
    let mut tasks = Vec::new();
    for (i, line) in text.lines().enumerate() {
        let n = i + 1;
        if line.trim().is_empty() {
            continue;
        }
        if line.len() > MAX_ROW_BYTES {
            return Err(bad(
                n,
                "(row)",
                format!(
                    "is {} bytes, above the largest row read ({MAX_ROW_BYTES}); no prompt that \
                     long fits a model's context",
                    line.len()
                ),
            ));
        }
        let row: Map<String, Value> = serde_json::from_str(line)
            .map_err(|e| bad(n, "(row)", format!("not a JSON object: {e}")))?;
        prompt_problem(row.get("prompt"), chat).map_or(Ok(()), |m| Err(bad(n, "prompt", m)))?;
        for reward in rewards {
            let Some(column) = &reward.column else {
                continue;
            };
            let value = row.get(column).ok_or_else(|| {
                bad(
                    n,
                    column,
                    format!("is missing (reward {:?} reads it)", reward.name),
                )
            })?;
            let fits = match reward.rule {
                RewardRule::ExactMatch => value.is_string(),
                RewardRule::FinalNumber => expected_number(value).is_some(),
                RewardRule::ToolCall => {
                    value.get("name").is_some_and(Value::is_string)
                        && value.get("arguments").is_some()
                }
                _ => true,
            };
            if !fits {
                let want = match reward.rule {
                    RewardRule::ExactMatch => "a string",
                    RewardRule::FinalNumber => "a number (or a string holding one)",
                    _ => "a tool call {\"name\": ..., \"arguments\": {...}}",
                };
                return Err(bad(
                    n,
                    column,
                    format!("{value} is not {want} (reward {:?})", reward.name),
                ));
            }
        }
        tasks.push(Task {
            id: format!("{stem}-{n}"),
            payload: Value::Object(row),
        });
    }
    if tasks.is_empty() {
        return Err(bad(0, "(file)", "holds no rows".to_owned()));
    }
    Ok(tasks)
}

/// `count` of `rows` (all of them when there are no more), drawn without repetition, the same
/// for the same seed, in the file's order.
pub fn draw_rows(rows: Vec<Task>, count: usize, seed: u64) -> Vec<Task> {
    if count >= rows.len() {
        return rows;
    }
    let mut index: Vec<usize> = (0..rows.len()).collect();
    let mut state = seed;
    for i in 0..count {
        let j = i + (crate::fixture::mix(&mut state) % (rows.len() - i) as u64) as usize;
        index.swap(i, j);
    }
    let mut chosen = index[..count].to_vec();
    chosen.sort_unstable();
    let mut rows: Vec<Option<Task>> = rows.into_iter().map(Some).collect();
    chosen.into_iter().filter_map(|i| rows[i].take()).collect()
}

/// What is wrong with a row's `prompt`, if anything: a non-empty string, or (when `chat`) a
/// non-empty list of `{"role", "content"}` messages (roles `system`, `user`, `assistant`) whose
/// last is the user's.
fn prompt_problem(prompt: Option<&Value>, chat: bool) -> Option<String> {
    match prompt {
        Some(Value::String(p)) if !p.trim().is_empty() => None,
        Some(Value::String(_)) => Some("is empty".to_owned()),
        Some(Value::Array(_)) if !chat => Some(
            "is a list of chat messages, which needs grpo.prompt_format \"chat\" (the default); \
             give a string or change the plan"
                .to_owned(),
        ),
        Some(Value::Array(messages)) => {
            for (i, m) in messages.iter().enumerate() {
                let role = m.get("role").and_then(Value::as_str);
                if !matches!(role, Some("system" | "user" | "assistant")) {
                    return Some(format!(
                        "message {i}: `role` must be \"system\", \"user\" or \"assistant\", not {}",
                        m.get("role").unwrap_or(&Value::Null)
                    ));
                }
                if !m.get("content").is_some_and(Value::is_string) {
                    return Some(format!("message {i}: `content` must be a string"));
                }
            }
            match messages.last().and_then(|m| m.get("role")) {
                Some(role) if role == "user" => None,
                Some(_) => Some("the last message must be the user's".to_owned()),
                None => Some("holds no messages".to_owned()),
            }
        }
        Some(other) => Some(format!(
            "must be a string or a list of chat messages, not {other}"
        )),
        None => Some(
            "is missing: every row needs {\"prompt\": \"...\"} or {\"prompt\": [{\"role\": \"user\", \
             \"content\": \"...\"}]}"
                .to_owned(),
        ),
    }
}

fn expected_number(value: &Value) -> Option<f64> {
    match value {
        Value::Number(n) => n.as_f64(),
        Value::String(s) => s.trim().parse().ok(),
        _ => None,
    }
}

/// One built-in reward rule's score of `completion` for `row`; `None` for a `python` reward,
/// which its own process scores.
pub fn reward_score(reward: &Reward, row: &Value, completion: &str) -> Option<f64> {
    let column = reward.column.as_deref().and_then(|c| row.get(c));
    let hit = |b: bool| if b { 1.0 } else { 0.0 };
    Some(match reward.rule {
        RewardRule::ExactMatch => hit(column
            .and_then(Value::as_str)
            .is_some_and(|want| completion.trim() == want.trim())),
        RewardRule::FinalNumber => hit(column
            .and_then(expected_number)
            .is_some_and(|want| number_matches(completion, want))),
        RewardRule::Regex => hit(reward
            .pattern
            .as_deref()
            .and_then(|p| regex::Regex::new(p).ok())
            .is_some_and(|re| re.is_match(completion))),
        RewardRule::Tag => hit(reward.tag.as_deref().is_some_and(|tag| {
            let (open, close) = (format!("<{tag}>"), format!("</{tag}>"));
            completion.matches(&open).count() == 1
                && completion.matches(&close).count() == 1
                && completion.find(&open) < completion.find(&close)
        })),
        RewardRule::LengthPenalty => {
            let max = reward.max_chars.unwrap_or(1).max(1) as f64;
            let chars = completion.chars().count() as f64;
            -((chars - max).max(0.0) / max).min(1.0)
        }
        RewardRule::ToolCall => hit(column.is_some_and(|want| {
            let name = want.get("name").and_then(Value::as_str).unwrap_or_default();
            let arguments = want.get("arguments").cloned().unwrap_or(Value::Null);
            call_matches(completion, name, &arguments) == CallMatch::Correct
        })),
        RewardRule::Python => return None,
    })
}

/// The running Python reward functions of a plan, by reward name, shared by its episodes.
pub type PythonRewards = Arc<Mutex<BTreeMap<String, PythonReward>>>;

/// Starts every `python` reward of `rewards` (their stderr appended to `log`), each imported
/// before this returns.
pub fn start_python_rewards(rewards: &[Reward], log: &Path) -> Result<PythonRewards, EnvError> {
    let mut running = BTreeMap::new();
    for r in rewards.iter().filter(|r| r.rule == RewardRule::Python) {
        let (Some(file), Some(function)) = (&r.file, &r.function) else {
            continue;
        };
        let python = r.python.clone().unwrap_or_else(|| PathBuf::from("python3"));
        let timeout = r.timeout_s.map_or(
            crate::python_reward::DEFAULT_TIMEOUT,
            std::time::Duration::from_secs,
        );
        running.insert(
            r.name.clone(),
            PythonReward::start(&r.name, &python, (file, function), log, timeout)?,
        );
    }
    Ok(Arc::new(Mutex::new(running)))
}

/// The running functions, for one caller at a time.
fn lock(
    python: &PythonRewards,
) -> Result<std::sync::MutexGuard<'_, BTreeMap<String, PythonReward>>, EnvError> {
    python.lock().map_err(|_| EnvError::Malformed {
        service: "python rewards".to_owned(),
        message: "an earlier call panicked".to_owned(),
    })
}

/// A `python` reward's scores of a generation batch: its name, weight, and one score per
/// episode (`None`: not applicable).
pub type BatchScores = (String, f64, Vec<Option<f64>>);

/// Scores `batch` with every `python` reward of `rewards`, one call each, in the plan's order.
pub fn score_python_batch(
    rewards: &[Reward],
    python: &PythonRewards,
    batch: &RewardBatch<'_>,
) -> Result<Vec<BatchScores>, EnvError> {
    let mut running = lock(python)?;
    rewards
        .iter()
        .filter(|r| r.rule == RewardRule::Python)
        .map(|r| {
            let function = running
                .get_mut(&r.name)
                .ok_or_else(|| EnvError::Malformed {
                    service: format!("reward {}", r.name),
                    message: "its process was not started".to_owned(),
                })?;
            Ok((r.name.clone(), r.weight, function.score_batch(batch)?))
        })
        .collect()
}

/// What the `python` rewards passed to TRL's `log_metric` since the last take: each name's mean
/// over every value any function logged under it, as TRL averages its pending metrics.
pub fn take_python_metrics(python: &PythonRewards) -> Result<BTreeMap<String, f64>, EnvError> {
    let mut running = lock(python)?;
    let mut totals: BTreeMap<String, (f64, usize)> = BTreeMap::new();
    for function in running.values_mut() {
        for (name, (sum, count)) in function.take_metrics() {
            let total = totals.entry(name).or_default();
            total.0 += sum;
            total.1 += count;
        }
    }
    Ok(totals
        .into_iter()
        .filter(|(_, (_, count))| *count > 0)
        .map(|(name, (sum, count))| (name, sum / count as f64))
        .collect())
}

/// The dataset backend's environment: one turn per episode, scored by the plan's built-in
/// reward rules (its `python` rewards score the whole generation batch afterwards,
/// [`score_python_batch`]).
#[derive(Debug, Clone)]
pub struct DatasetEnvironment {
    rewards: Vec<Reward>,
    row: Option<Value>,
}

impl DatasetEnvironment {
    /// An environment scoring with the built-in rules among `rewards`.
    pub fn new(rewards: Vec<Reward>) -> Self {
        Self { rewards, row: None }
    }
}

impl Environment for DatasetEnvironment {
    fn reset(&mut self, task: &Task, _seed: u64) -> Result<Observation, EnvError> {
        let malformed = || EnvError::Malformed {
            service: "dataset".to_owned(),
            message: format!("task {} has no prompt string or messages", task.id),
        };
        let observation = match task.payload.get("prompt") {
            Some(Value::String(prompt)) => Observation {
                text: prompt.clone(),
                raw: Value::Null,
            },
            // The user's last message as the text; the whole conversation for the rollout.
            Some(Value::Array(messages)) => Observation {
                text: messages
                    .last()
                    .and_then(|m| m.get("content"))
                    .and_then(Value::as_str)
                    .ok_or_else(malformed)?
                    .to_owned(),
                raw: json!({ "messages": messages }),
            },
            _ => return Err(malformed()),
        };
        self.row = Some(task.payload.clone());
        Ok(observation)
    }

    fn step(&mut self, action: &str) -> Result<StepOutcome, EnvError> {
        let row = self.row.take().ok_or_else(|| EnvError::Malformed {
            service: "dataset".to_owned(),
            message: "step before reset".to_owned(),
        })?;
        // The built-in rules score here; `python` ones once per generation batch
        // ([`score_python_batch`]), as TRL calls its reward functions.
        let mut parts = Map::new();
        let mut reward = 0.0;
        for r in &self.rewards {
            if let Some(score) = reward_score(r, &row, action) {
                reward += r.weight * score;
                parts.insert(r.name.clone(), json!(score));
            }
        }
        Ok(StepOutcome {
            observation: Observation {
                text: String::new(),
                raw: json!({ "rewards": parts }),
            },
            reward,
            done: true,
        })
    }

    fn close(&mut self) -> Result<(), EnvError> {
        Ok(())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn reward(rule: RewardRule, setting: (&str, Value)) -> Reward {
        let mut r = json!({"name": "r", "rule": rule, "weight": 1.0});
        r[setting.0] = setting.1;
        serde_json::from_value(r).expect("reward")
    }

    #[test]
    fn a_row_above_the_bound_is_refused_naming_its_line_before_it_is_parsed() {
        let dir = tempfile::tempdir().expect("tmp");
        let file = dir.path().join("train.jsonl");
        let big = json!({"prompt": "x".repeat(MAX_ROW_BYTES)});
        std::fs::write(&file, format!("{{\"prompt\": \"ok\"}}\n{big}\n")).expect("write");
        let err = dataset_tasks(&file, &[], false).expect_err("a row above 4 MiB");
        assert_eq!((err.line, err.field.as_str()), (2, "(row)"), "{err}");
        assert!(err.message.contains("above the largest row"), "{err}");
    }

    #[test]
    fn each_rule_scores_as_documented() {
        let row = json!({"prompt": "p", "answer": 12, "word": "Paris",
            "call": {"name": "get_weather", "arguments": {"city": "Oslo"}}});
        let score = |r: &Reward, text: &str| reward_score(r, &row, text).expect("built-in");
        let exact = reward(RewardRule::ExactMatch, ("column", json!("word")));
        assert_eq!(
            (score(&exact, " Paris\n"), score(&exact, "paris")),
            (1.0, 0.0)
        );
        let number = reward(RewardRule::FinalNumber, ("column", json!("answer")));
        assert_eq!(
            (score(&number, "so 5 + 7 = 12"), score(&number, "12 or 13")),
            (1.0, 0.0)
        );
        let regex = reward(RewardRule::Regex, ("pattern", json!("^<answer>")));
        assert_eq!(
            (score(&regex, "<answer>1"), score(&regex, "x<answer>")),
            (1.0, 0.0)
        );
        let tag = reward(RewardRule::Tag, ("tag", json!("answer")));
        assert_eq!(score(&tag, "think <answer>12</answer>"), 1.0);
        assert_eq!(score(&tag, "<answer>1</answer><answer>2</answer>"), 0.0);
        assert_eq!(score(&tag, "</answer>12<answer>"), 0.0);
        let length = reward(RewardRule::LengthPenalty, ("max_chars", json!(4)));
        assert_eq!(
            (
                score(&length, "abcd"),
                score(&length, "abcdef"),
                score(&length, &"x".repeat(20))
            ),
            (0.0, -0.5, -1.0)
        );
        let call = reward(RewardRule::ToolCall, ("column", json!("call")));
        assert_eq!(
            score(
                &call,
                r#"{"name": "get_weather", "arguments": {"city": "Oslo"}}"#
            ),
            1.0
        );
        assert_eq!(
            score(
                &call,
                r#"{"name": "get_weather", "arguments": {"city": "Rome"}}"#
            ),
            0.0
        );
    }

    #[test]
    fn the_environment_reports_the_weighted_sum_and_each_part() -> Result<(), EnvError> {
        let mut rewards = vec![
            reward(RewardRule::FinalNumber, ("column", json!("answer"))),
            reward(RewardRule::LengthPenalty, ("max_chars", json!(2))),
        ];
        rewards[1].name = "short".into();
        rewards[1].weight = 0.5;
        let mut env = DatasetEnvironment::new(rewards);
        let task = Task {
            id: "t-1".into(),
            payload: json!({"prompt": "What is 5 + 7?", "answer": 12}),
        };
        assert_eq!(env.reset(&task, 0)?.text, "What is 5 + 7?");
        let out = env.step("1234")?;
        assert!(out.done);
        // 1 · 0 (wrong answer) + 0.5 · −1 (twice too long).
        assert_eq!(out.reward, -0.5);
        assert_eq!(
            out.observation.raw,
            json!({"rewards": {"r": 0.0, "short": -1.0}})
        );
        Ok(())
    }

    #[test]
    fn a_chat_row_opens_its_conversation_and_bad_messages_are_named() -> Result<(), EnvError> {
        let messages = json!([{"role": "system", "content": "Be brief."},
            {"role": "user", "content": "What is 5 + 7?"}]);
        assert_eq!(prompt_problem(Some(&messages), true), None);
        let problem = |prompt: Value, chat: bool| prompt_problem(Some(&prompt), chat);
        assert!(problem(messages.clone(), false).is_some_and(|m| m.contains("prompt_format")));
        assert!(problem(json!([]), true).is_some_and(|m| m.contains("no messages")));
        assert!(
            problem(
                json!([{"role": "user", "content": "q"}, {"role": "assistant", "content": "a"}]),
                true
            )
            .is_some_and(|m| m.contains("last message"))
        );
        assert!(
            problem(json!([{"role": "tool", "content": "q"}]), true)
                .is_some_and(|m| m.starts_with("message 0: `role`"))
        );
        assert!(
            problem(json!([{"role": "user", "content": 3}]), true)
                .is_some_and(|m| m.starts_with("message 0: `content`"))
        );
        assert!(prompt_problem(None, true).is_some_and(|m| m.starts_with("is missing")));

        let mut env = DatasetEnvironment::new(Vec::new());
        let task = Task {
            id: "t-1".into(),
            payload: json!({ "prompt": messages }),
        };
        let opened = env.reset(&task, 0)?;
        assert_eq!(opened.text, "What is 5 + 7?");
        assert_eq!(opened.raw, json!({ "messages": messages }));
        Ok(())
    }

    #[test]
    fn drawn_rows_are_distinct_seeded_and_in_file_order() {
        let rows: Vec<Task> = (0..10)
            .map(|i| Task {
                id: format!("t-{i}"),
                payload: Value::Null,
            })
            .collect();
        let ids = |seed| -> Vec<String> {
            draw_rows(rows.clone(), 4, seed)
                .into_iter()
                .map(|t| t.id)
                .collect()
        };
        let (a, b) = (ids(1), ids(1));
        assert_eq!(a, b);
        assert_eq!(a.len(), 4);
        let mut sorted = a.clone();
        sorted.sort_by_key(|id| id[2..].parse::<u32>().unwrap_or(0));
        sorted.dedup();
        assert_eq!(sorted, a, "distinct, in file order");
        assert_ne!(ids(1), ids(2));
        assert_eq!(draw_rows(rows.clone(), 99, 1).len(), 10);
    }
}
