//! The authored task suites, embedded in the crate (`suites/*.jsonl`).

use serde::Deserialize;
use serde_json::Value;
use sha2::{Digest, Sha256};

use crate::Error;

/// How a suite's answers are judged.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum SuiteKind {
    /// Word problems: the final number (`#### N`, else the last number) must equal the answer.
    Arithmetic,
    /// Tool calls: the `<tool_call>` JSON must name the right function with equal arguments.
    ToolCall,
    /// MGSM format: the last number in the answer must equal `answer_number`.
    Mgsm,
}

/// What a correct answer contains.
#[derive(Debug, Clone, PartialEq)]
pub enum Expected {
    /// A number, compared by value.
    Number(f64),
    /// A function call.
    ToolCall {
        /// Function name.
        name: String,
        /// Arguments, compared as JSON.
        arguments: Value,
    },
}

/// One task.
#[derive(Debug, Clone, PartialEq)]
pub struct Task {
    /// Suite name.
    pub suite: String,
    /// Unique id.
    pub id: String,
    /// Language code (MGSM) or `en`.
    pub lang: String,
    /// The full prompt a policy sees (tool definitions included for tool tasks).
    pub prompt: String,
    /// The correct answer.
    pub expected: Expected,
}

/// A named list of tasks.
#[derive(Debug, Clone)]
pub struct Suite {
    /// Suite name.
    pub name: String,
    /// How it is scored.
    pub kind: SuiteKind,
    /// The tasks, in file order.
    pub tasks: Vec<Task>,
    /// sha256 of the suite file (and tool definitions), hex.
    pub sha256: String,
}

const ARITHMETIC: &str = include_str!("../suites/arithmetic.jsonl");
const TOOL_CALL: &str = include_str!("../suites/tool_call.jsonl");
const TOOLS: &str = include_str!("../suites/tools.json");
const MGSM: &str = include_str!("../suites/mgsm.jsonl");

#[derive(Deserialize)]
#[serde(deny_unknown_fields)]
struct ArithmeticLine {
    id: String,
    question: String,
    answer: f64,
}

#[derive(Deserialize)]
#[serde(deny_unknown_fields)]
struct ToolLine {
    id: String,
    prompt: String,
    tools: Vec<String>,
    expected: ToolExpected,
}

#[derive(Deserialize)]
#[serde(deny_unknown_fields)]
struct ToolExpected {
    name: String,
    arguments: Value,
}

/// One MGSM item: MGSM's own columns (`question`, `answer_number`; `answer` and
/// `equation_solution` may be there and are not read) and its language; the id defaults to
/// `mgsm-<lang>-<line>`.
#[derive(Deserialize)]
struct MgsmLine {
    #[serde(default)]
    id: Option<String>,
    lang: String,
    question: String,
    answer_number: f64,
}

/// An MGSM-format retention suite from the JSON lines `text` (of `file`, which names it in
/// errors): one `{"question", "answer_number", "lang"}` object per line; an empty question or a
/// non-finite answer is refused naming the line, and so is a file without items.
pub fn mgsm_suite(file: &str, text: &str) -> Result<Suite, Error> {
    let bad = |line: usize, message: &str| Error::Data {
        file: file.to_owned(),
        line,
        message: message.to_owned(),
    };
    let tasks = parse_lines::<MgsmLine>(file, text)?
        .into_iter()
        .map(|(line, l)| {
            if l.question.trim().is_empty() {
                return Err(bad(line, "`question` is empty"));
            }
            if !l.answer_number.is_finite() {
                return Err(bad(line, "`answer_number` must be a finite number"));
            }
            Ok(Task {
                suite: "mgsm".to_owned(),
                id: l.id.unwrap_or_else(|| format!("mgsm-{}-{line}", l.lang)),
                lang: l.lang,
                prompt: l.question,
                expected: Expected::Number(l.answer_number),
            })
        })
        .collect::<Result<Vec<_>, Error>>()?;
    if tasks.is_empty() {
        return Err(bad(0, "holds no items"));
    }
    Ok(Suite {
        name: "mgsm".to_owned(),
        kind: SuiteKind::Mgsm,
        tasks,
        sha256: digest(&[text]),
    })
}

/// Parses JSONL, one `T` per non-empty line, each with its 1-based line number.
pub(crate) fn parse_lines<T: for<'de> Deserialize<'de>>(
    file: &str,
    text: &str,
) -> Result<Vec<(usize, T)>, Error> {
    text.lines()
        .enumerate()
        .filter(|(_, l)| !l.trim().is_empty())
        .map(|(i, l)| {
            serde_json::from_str(l)
                .map(|t| (i + 1, t))
                .map_err(|e| Error::Data {
                    file: file.to_owned(),
                    line: i + 1,
                    message: e.to_string(),
                })
        })
        .collect()
}

fn digest(parts: &[&str]) -> String {
    let mut hasher = Sha256::new();
    for part in parts {
        hasher.update(part.as_bytes());
    }
    hex::encode(hasher.finalize())
}

fn tool_prompt(line_no: usize, line: &ToolLine, tools: &[Value]) -> Result<String, Error> {
    let mut defs = Vec::new();
    for name in &line.tools {
        let def = tools
            .iter()
            .find(|t| t.get("name").and_then(Value::as_str) == Some(name))
            .ok_or_else(|| Error::Data {
                file: "suites/tool_call.jsonl".to_owned(),
                line: line_no,
                message: format!(
                    "task {} names unknown tool {name:?}: define it in suites/tools.json",
                    line.id
                ),
            })?;
        defs.push(def.to_string());
    }
    Ok(format!(
        "You may call one of these tools:\n<tools>\n{}\n</tools>\nAnswer with \
         <tool_call>{{\"name\": ..., \"arguments\": {{...}}}}</tool_call>.\n\n{}",
        defs.join("\n"),
        line.prompt
    ))
}

/// The three authored suites, in a fixed order.
pub fn builtin_suites() -> Result<Vec<Suite>, Error> {
    let arithmetic = parse_lines::<ArithmeticLine>("suites/arithmetic.jsonl", ARITHMETIC)?
        .into_iter()
        .map(|(_, l)| Task {
            suite: "arithmetic".to_owned(),
            id: l.id,
            lang: "en".to_owned(),
            prompt: l.question,
            expected: Expected::Number(l.answer),
        })
        .collect();
    let tools: Vec<Value> = serde_json::from_str(TOOLS).map_err(|e| Error::Data {
        file: "suites/tools.json".to_owned(),
        line: e.line(),
        message: e.to_string(),
    })?;
    let tool_call = parse_lines::<ToolLine>("suites/tool_call.jsonl", TOOL_CALL)?
        .into_iter()
        .map(|(line_no, l)| {
            Ok(Task {
                suite: "tool_call".to_owned(),
                prompt: tool_prompt(line_no, &l, &tools)?,
                id: l.id,
                lang: "en".to_owned(),
                expected: Expected::ToolCall {
                    name: l.expected.name,
                    arguments: l.expected.arguments,
                },
            })
        })
        .collect::<Result<Vec<_>, Error>>()?;
    Ok(vec![
        Suite {
            name: "arithmetic".to_owned(),
            kind: SuiteKind::Arithmetic,
            tasks: arithmetic,
            sha256: digest(&[ARITHMETIC]),
        },
        Suite {
            name: "tool_call".to_owned(),
            kind: SuiteKind::ToolCall,
            tasks: tool_call,
            sha256: digest(&[TOOL_CALL, TOOLS]),
        },
        mgsm_suite("suites/mgsm.jsonl", MGSM)?,
    ])
}
