//! Scoring: how an answer is read and judged. The rules are the usual ones of the field: GSM8K's
//! `#### N` marker (else the last number), MGSM's last number, and Hermes/Qwen-style
//! `<tool_call>{"name": ..., "arguments": {...}}</tool_call>` with arguments compared as JSON.

use std::sync::LazyLock;

use regex::Regex;
use serde_json::Value;

use crate::{Expected, SuiteKind, Task};

/// The judgement of one answer.
#[derive(Debug, Clone, PartialEq)]
pub struct Verdict {
    /// Whether the answer is correct.
    pub correct: bool,
    /// What was read from the answer (a number, a call as JSON), or `None` if nothing could be.
    pub extracted: Option<String>,
}

static NUMBER: LazyLock<Regex> =
    LazyLock::new(|| Regex::new(r"-?\d[\d,]*(?:\.\d+)?").expect("valid regex"));
static MARKER: LazyLock<Regex> =
    LazyLock::new(|| Regex::new(r"####\s*(-?\d[\d,]*(?:\.\d+)?)").expect("valid regex"));
static TOOL_CALL: LazyLock<Regex> =
    LazyLock::new(|| Regex::new(r"(?s)<tool_call>(.*?)</tool_call>").expect("valid regex"));

fn parse_number(text: &str) -> Option<f64> {
    text.replace(',', "").parse().ok()
}

/// The last number in `text` (thousands separators allowed), as MGSM scores answers.
pub fn last_number(text: &str) -> Option<f64> {
    NUMBER
        .find_iter(text)
        .last()
        .and_then(|m| parse_number(m.as_str()))
}

/// The GSM8K-style final answer: the number after `####`, else the last number.
pub fn final_number(text: &str) -> Option<f64> {
    match MARKER.captures_iter(text).last() {
        Some(c) => parse_number(&c[1]),
        None => last_number(text),
    }
}

/// The function call in an answer: the body of the last `<tool_call>` block, or the whole answer
/// when it is a bare JSON object. Returns `(name, arguments)`.
pub fn parse_tool_call(text: &str) -> Option<(String, Value)> {
    let body = match TOOL_CALL.captures_iter(text).last() {
        Some(c) => c.get(1).map_or("", |m| m.as_str()).trim().to_owned(),
        None if text.trim_start().starts_with('{') => text.trim().to_owned(),
        None => return None,
    };
    let call: Value = serde_json::from_str(&body).ok()?;
    let name = call.get("name")?.as_str()?.to_owned();
    let arguments = call
        .get("arguments")
        .cloned()
        .unwrap_or(Value::Object(Default::default()));
    Some((name, arguments))
}

fn numbers_equal(a: f64, b: f64) -> bool {
    (a - b).abs() <= 1e-9 * a.abs().max(b.abs()).max(1.0)
}

/// JSON equality where numbers compare by value (`100` equals `100.0`).
fn json_equal(a: &Value, b: &Value) -> bool {
    match (a, b) {
        (Value::Number(x), Value::Number(y)) => x
            .as_f64()
            .zip(y.as_f64())
            .is_some_and(|(x, y)| numbers_equal(x, y)),
        (Value::Array(x), Value::Array(y)) => {
            x.len() == y.len() && x.iter().zip(y).all(|(a, b)| json_equal(a, b))
        }
        (Value::Object(x), Value::Object(y)) => {
            x.len() == y.len()
                && x.iter()
                    .all(|(k, v)| y.get(k).is_some_and(|w| json_equal(v, w)))
        }
        _ => a == b,
    }
}

/// Judges `answer` to `task`, read the way suites of `kind` are read.
pub fn score(kind: SuiteKind, task: &Task, answer: &str) -> Verdict {
    match (&task.expected, kind) {
        (Expected::Number(want), SuiteKind::Arithmetic | SuiteKind::Mgsm) => {
            let got = if kind == SuiteKind::Arithmetic {
                final_number(answer)
            } else {
                last_number(answer)
            };
            Verdict {
                correct: got.is_some_and(|g| numbers_equal(g, *want)),
                extracted: got.map(|g| g.to_string()),
            }
        }
        (Expected::ToolCall { name, arguments }, SuiteKind::ToolCall) => {
            match parse_tool_call(answer) {
                Some((got_name, got_args)) => Verdict {
                    correct: &got_name == name && json_equal(&got_args, arguments),
                    extracted: Some(
                        serde_json::json!({"name": got_name, "arguments": got_args}).to_string(),
                    ),
                },
                None => Verdict {
                    correct: false,
                    extracted: None,
                },
            }
        }
        _ => Verdict {
            correct: false,
            extracted: None,
        },
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn numbers_are_read_like_gsm8k_and_mgsm() {
        assert_eq!(final_number("so 3 + 4\n#### 7"), Some(7.0));
        assert_eq!(final_number("#### 1,234.5 and 9 later"), Some(1234.5));
        assert_eq!(final_number("no marker, last is 12."), Some(12.0));
        assert_eq!(last_number("Die Antwort ist -15."), Some(-15.0));
        assert_eq!(last_number("keine Zahl"), None);
        assert_eq!(last_number("120 ÷ 15 = 8，所以需要 8 天。"), Some(8.0));
    }

    #[test]
    fn tool_calls_are_parsed_from_tags_or_bare_json() {
        let tagged = "<tool_call>\n{\"name\": \"f\", \"arguments\": {\"a\": 1}}\n</tool_call>";
        assert_eq!(
            parse_tool_call(tagged),
            Some(("f".to_owned(), serde_json::json!({"a": 1})))
        );
        assert_eq!(
            parse_tool_call("{\"name\": \"g\"}"),
            Some(("g".to_owned(), serde_json::json!({})))
        );
        assert_eq!(parse_tool_call("<tool_call>{\"name\": </tool_call>"), None);
        assert_eq!(parse_tool_call("plain text"), None);
    }
}
