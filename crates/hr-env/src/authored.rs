//! The authored task families, shipped as files under `tasks/` (provenance in
//! `tasks/README.md`), each line labelled with its split:
//! - `word_problem`: grade-school word problems with whole-number answers;
//! - `tool_use`: a user request to be answered with one call of five tools described in the
//!   prompt ([`TOOLS_PROMPT`]), the expected name and arguments alongside.
//!
//! The files are parsed once; the tests check ids, splits, schemas and that no question is in
//! two splits.

use std::sync::LazyLock;

use serde::Deserialize;
use serde::de::DeserializeOwned;
use serde_json::{Value, json};

use hr_plan::FixtureKind;

/// One authored word problem.
#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields)]
struct WordProblem {
    id: String,
    split: String,
    question: String,
    answer: i64,
}

/// One authored tool call.
#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields)]
struct ToolUse {
    id: String,
    split: String,
    request: String,
    name: String,
    arguments: Value,
}

/// What a `tool_use` prompt says before the request.
pub(crate) const TOOLS_PROMPT: &str = "You can call these tools: get_weather(city, unit: \
    \"celsius\" or \"fahrenheit\"), set_timer(minutes), convert_currency(amount, from, to: ISO \
    4217 codes), get_stock_price(symbol), set_alarm(time: \"HH:MM\"). Answer with exactly one \
    call: <tool_call>{\"name\": ..., \"arguments\": {...}}</tool_call>.";

/// The tools [`TOOLS_PROMPT`] describes, with their argument names.
#[cfg(test)]
const TOOLS: [(&str, &[&str]); 5] = [
    ("get_weather", &["city", "unit"]),
    ("set_timer", &["minutes"]),
    ("convert_currency", &["amount", "from", "to"]),
    ("get_stock_price", &["symbol"]),
    ("set_alarm", &["time"]),
];

fn parse<T: DeserializeOwned>(file: &str, text: &str) -> Vec<T> {
    text.lines()
        .map(|line| {
            serde_json::from_str(line).unwrap_or_else(|e| panic!("tasks/{file} is invalid: {e}"))
        })
        .collect()
}

static WORD_PROBLEMS: LazyLock<Vec<WordProblem>> = LazyLock::new(|| {
    parse(
        "word_problems.jsonl",
        include_str!("../tasks/word_problems.jsonl"),
    )
});

static TOOL_USES: LazyLock<Vec<ToolUse>> = LazyLock::new(|| {
    parse(
        "tool_calls.jsonl",
        include_str!("../tasks/tool_calls.jsonl"),
    )
});

/// `(id, split)` of every line of an authored family, in file order; `None` for generated ones.
fn lines(kind: FixtureKind) -> Option<Vec<(&'static str, &'static str)>> {
    match kind {
        FixtureKind::WordProblem => Some(
            WORD_PROBLEMS
                .iter()
                .map(|p| (p.id.as_str(), p.split.as_str()))
                .collect(),
        ),
        FixtureKind::ToolUse => Some(
            TOOL_USES
                .iter()
                .map(|t| (t.id.as_str(), t.split.as_str()))
                .collect(),
        ),
        _ => None,
    }
}

/// How many lines an authored family has, or `None` for a generated family.
pub(crate) fn len(kind: FixtureKind) -> Option<usize> {
    lines(kind).map(|all| all.len())
}

/// The indexes of an authored family's lines labelled `split` (`train`, `dev`, `held_out`), or
/// `None` for a generated family.
pub(crate) fn split_indexes(kind: FixtureKind, split: &str) -> Option<Vec<usize>> {
    lines(kind).map(|all| {
        all.iter()
            .enumerate()
            .filter(|(_, (_, s))| *s == split)
            .map(|(i, _)| i)
            .collect()
    })
}

/// The task payload of line `index` of an authored family.
pub(crate) fn payload(kind: FixtureKind, index: usize) -> Option<Value> {
    match kind {
        FixtureKind::WordProblem => WORD_PROBLEMS.get(index).map(|p| {
            json!({"kind": "word_problem", "question": p.question, "answer": p.answer,
                   "source": p.id})
        }),
        FixtureKind::ToolUse => TOOL_USES.get(index).map(|t| {
            json!({"kind": "tool_use", "question": format!("{TOOLS_PROMPT}\nRequest: {}", t.request),
                   "name": t.name, "arguments": t.arguments, "source": t.id})
        }),
        _ => None,
    }
}

#[cfg(test)]
mod tests {
    use std::collections::BTreeSet;

    use super::*;

    fn check_labels(kind: FixtureKind, counts: (usize, usize, usize)) {
        let all = lines(kind).expect("authored");
        let ids: BTreeSet<&str> = all.iter().map(|(id, _)| *id).collect();
        assert_eq!(ids.len(), all.len(), "{kind:?}: ids are unique");
        for (id, split) in &all {
            assert!(
                ["train", "dev", "held_out"].contains(split),
                "{id}: split {split:?}"
            );
        }
        let count = |s: &str| split_indexes(kind, s).expect("authored").len();
        assert_eq!(
            (count("train"), count("dev"), count("held_out")),
            counts,
            "{kind:?}"
        );
    }

    #[test]
    fn the_word_problems_are_labelled_and_none_is_an_evaluation_suites_question() {
        check_labels(FixtureKind::WordProblem, (42, 9, 9));
        for p in WORD_PROBLEMS.iter() {
            assert!(p.question.ends_with('?') && p.answer > 0, "{}", p.id);
        }
        let suite: BTreeSet<String> = hr_eval::builtin_suites()
            .expect("suites")
            .iter()
            .flat_map(|s| s.tasks.iter().map(|t| t.prompt.clone()))
            .collect();
        assert!(WORD_PROBLEMS.iter().all(|p| !suite.contains(&p.question)));
    }

    #[test]
    fn every_tool_call_uses_a_described_tool_with_exactly_its_arguments() {
        check_labels(FixtureKind::ToolUse, (31, 7, 7));
        let requests: BTreeSet<&str> = TOOL_USES.iter().map(|t| t.request.as_str()).collect();
        assert_eq!(requests.len(), TOOL_USES.len(), "requests are unique");
        for t in TOOL_USES.iter() {
            let (_, params) = TOOLS
                .iter()
                .find(|(name, _)| *name == t.name)
                .unwrap_or_else(|| panic!("{}: tool {} is not described", t.id, t.name));
            assert!(TOOLS_PROMPT.contains(&format!("{}(", t.name)), "{}", t.name);
            let keys: BTreeSet<&str> = t
                .arguments
                .as_object()
                .expect("arguments object")
                .keys()
                .map(String::as_str)
                .collect();
            assert_eq!(keys, params.iter().copied().collect(), "{}", t.id);
        }
    }
}
