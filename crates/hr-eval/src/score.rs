//! Scoring: how an answer is read and judged, one rule for training rewards and evaluation.
//!
//! - **Numbers**: the number after the last GSM8K `####` marker, else the last number in the
//!   text. A number is an optional sign, digits with optional thousands separators in groups of
//!   three (`1,234,567`), and an optional decimal part (`12.5`; a trailing `12.` is 12). A `-` is
//!   a sign only when no letter or digit stands right before it (`3-5` reads 3 and 5). Numbers
//!   compare by value (`7` equals `7.0`).
//! - **Tool calls**: the *first* `<tool_call>...</tool_call>` block (the call an agent runtime
//!   would execute first), else the whole answer when it is a bare JSON object;
//!   `{"name": ..., "arguments": {...}}` with arguments compared as JSON, numbers by value.

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

const NUMBER_PATTERN: &str = r"-?(?:\d{1,3}(?:,\d{3})+|\d+)(?:\.\d+)?";

static NUMBER: LazyLock<Regex> = LazyLock::new(|| Regex::new(NUMBER_PATTERN).expect("valid regex"));
static MARKER: LazyLock<Regex> =
    LazyLock::new(|| Regex::new(&format!(r"####\s*({NUMBER_PATTERN})")).expect("valid regex"));
static TOOL_CALL: LazyLock<Regex> =
    LazyLock::new(|| Regex::new(r"(?s)<tool_call>(.*?)</tool_call>").expect("valid regex"));

/// The value of a number match starting at byte `start` of `text`.
fn number_at(text: &str, start: usize, matched: &str) -> Option<f64> {
    let glued = text[..start]
        .chars()
        .next_back()
        .is_some_and(char::is_alphanumeric);
    let digits = match matched.strip_prefix('-') {
        Some(rest) if glued => rest,
        _ => matched,
    };
    digits.replace(',', "").parse().ok()
}

/// The last number in `text`.
fn last_number(text: &str) -> Option<f64> {
    NUMBER
        .find_iter(text)
        .last()
        .and_then(|m| number_at(text, m.start(), m.as_str()))
}

/// The final answer of `text`: the number after the last `####`, else the last number.
pub fn final_number(text: &str) -> Option<f64> {
    match MARKER.captures_iter(text).last().and_then(|c| c.get(1)) {
        Some(m) => number_at(text, m.start(), m.as_str()),
        None => last_number(text),
    }
}

/// The function call in an answer: the body of the first `<tool_call>` block, or the whole
/// answer when it is a bare JSON object. Returns `(name, arguments)`.
pub fn parse_tool_call(text: &str) -> Option<(String, Value)> {
    let body = match TOOL_CALL.captures(text) {
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

/// Whether `answer`'s final number equals `want`.
pub fn number_matches(answer: &str, want: f64) -> bool {
    final_number(answer).is_some_and(|got| numbers_equal(got, want))
}

/// How an answer's tool call compares with the expected one.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum CallMatch {
    /// The right function with equal arguments.
    Correct,
    /// A well-formed call, but another function or other arguments.
    Wrong,
    /// No call could be read.
    Absent,
}

/// Compares `answer`'s tool call with `name(arguments)`.
pub fn call_matches(answer: &str, name: &str, arguments: &Value) -> CallMatch {
    match parse_tool_call(answer) {
        Some((got, args)) if got == name && json_equal(&args, arguments) => CallMatch::Correct,
        Some(_) => CallMatch::Wrong,
        None => CallMatch::Absent,
    }
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
            let got = final_number(answer);
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
    use proptest::prelude::*;

    use super::*;

    #[test]
    fn numbers_are_read_by_the_one_rule() {
        assert_eq!(final_number("so 3 + 4\n#### 7"), Some(7.0));
        assert_eq!(final_number("#### 1,234.5 and 9 later"), Some(1234.5));
        assert_eq!(final_number("no marker, last is 12."), Some(12.0));
        assert_eq!(final_number("Die Antwort ist -15."), Some(-15.0));
        assert_eq!(final_number("keine Zahl"), None);
        assert_eq!(final_number("120 ÷ 15 = 8，所以需要 8 天。"), Some(8.0));
        // The disagreement this module ended: training read 234 here, evaluation 1234.
        assert_eq!(final_number("1,234"), Some(1234.0));
        assert_eq!(final_number("the list 1,2,3"), Some(3.0));
        assert_eq!(final_number("3-5"), Some(5.0));
        assert_eq!(final_number("#### -1,000"), Some(-1000.0));
        assert!(number_matches("it is 7.0", 7.0));
        assert!(!number_matches("it is 50", 5.0));
    }

    #[test]
    fn the_first_tool_call_counts() {
        let tagged = "<tool_call>\n{\"name\": \"f\", \"arguments\": {\"a\": 1}}\n</tool_call>";
        assert_eq!(
            parse_tool_call(tagged),
            Some(("f".to_owned(), serde_json::json!({"a": 1})))
        );
        let two = format!("{tagged} then <tool_call>{{\"name\": \"g\"}}</tool_call>");
        assert_eq!(parse_tool_call(&two).map(|c| c.0), Some("f".to_owned()));
        assert_eq!(
            parse_tool_call("{\"name\": \"g\"}"),
            Some(("g".to_owned(), serde_json::json!({})))
        );
        assert_eq!(parse_tool_call("<tool_call>{\"name\": </tool_call>"), None);
        assert_eq!(parse_tool_call("plain text"), None);
        let args = serde_json::json!({"a": 100});
        assert_eq!(
            call_matches(
                "<tool_call>{\"name\":\"f\",\"arguments\":{\"a\":100.0}}</tool_call>",
                "f",
                &args
            ),
            CallMatch::Correct
        );
        assert_eq!(
            call_matches("{\"name\":\"h\"}", "f", &args),
            CallMatch::Wrong
        );
        assert_eq!(call_matches("f(100)", "f", &args), CallMatch::Absent);
    }

    fn with_separators(n: u64) -> String {
        let digits = n.to_string();
        let mut out = String::new();
        for (i, c) in digits.chars().enumerate() {
            if i > 0 && (digits.len() - i).is_multiple_of(3) {
                out.push(',');
            }
            out.push(c);
        }
        out
    }

    proptest! {
        #[test]
        fn any_integer_reads_back_however_it_is_written(
            n in any::<u32>(),
            negative in any::<bool>(),
            separators in any::<bool>(),
            marker in any::<bool>(),
            before in "[a-z ]{0,12}",
            distractor in 0u32..1000,
        ) {
            let body = if separators { with_separators(u64::from(n)) } else { n.to_string() };
            let sign = if negative { "-" } else { "" };
            let want = if negative { -f64::from(n) } else { f64::from(n) };
            let text = if marker {
                format!("{before} {distractor} #### {sign}{body}")
            } else {
                format!("{distractor} {before} so {sign}{body}.")
            };
            prop_assert_eq!(final_number(&text), Some(want));
            prop_assert!(number_matches(&text, want));
        }

        #[test]
        fn any_call_reads_back_from_the_first_block(
            name in "[a-z_]{1,12}",
            key in "[a-z]{1,8}",
            value in any::<i32>(),
            trailing in "[a-z ]{0,12}",
        ) {
            let args = serde_json::json!({ key: value });
            let call = serde_json::json!({"name": name, "arguments": args});
            let text = format!("<tool_call>{call}</tool_call>{trailing}<tool_call>{{\"name\":\"other\"}}</tool_call>");
            prop_assert_eq!(parse_tool_call(&text), Some((name.clone(), args.clone())));
            prop_assert_eq!(call_matches(&text, &name, &args), CallMatch::Correct);
        }
    }
}
