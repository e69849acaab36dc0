//! Running a policy over suites and scoring each answer.

use std::time::Instant;

use serde::Serialize;

use crate::{Error, Policy, Suite, score};

/// The outcome of one task.
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct ItemResult {
    /// Suite name.
    pub suite: String,
    /// Task id.
    pub id: String,
    /// Language code.
    pub lang: String,
    /// The policy's answer.
    pub response: String,
    /// The expected answer, rendered.
    pub expected: String,
    /// What was read from the answer.
    pub extracted: Option<String>,
    /// The verdict.
    pub correct: bool,
}

/// The score of one suite.
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct SuiteScore {
    /// Suite name.
    pub suite: String,
    /// Number of tasks.
    pub items: usize,
    /// Number answered correctly.
    pub correct: usize,
    /// `correct / items`.
    pub accuracy: f64,
    /// Wall time, milliseconds.
    pub elapsed_ms: u64,
    /// sha256 of the suite data.
    pub suite_sha256: String,
}

/// A whole evaluation.
#[derive(Debug, Clone, PartialEq)]
pub struct Evaluation {
    /// The policy's name.
    pub policy: String,
    /// Per-task results, in suite and task order.
    pub results: Vec<ItemResult>,
    /// Per-suite scores, in suite order.
    pub suites: Vec<SuiteScore>,
}

fn render_expected(expected: &crate::Expected) -> String {
    match expected {
        crate::Expected::Number(n) => n.to_string(),
        crate::Expected::ToolCall { name, arguments } => {
            serde_json::json!({"name": name, "arguments": arguments}).to_string()
        }
    }
}

/// Runs `policy` over `suites`. `progress(suite, done, total)` is called after each task.
pub fn evaluate(
    suites: &[Suite],
    policy: &mut dyn Policy,
    mut progress: impl FnMut(&str, usize, usize),
) -> Result<Evaluation, Error> {
    let mut results = Vec::new();
    let mut scores = Vec::new();
    for suite in suites {
        let started = Instant::now();
        let mut correct = 0;
        let responses = policy.respond_all(&suite.tasks)?;
        for (i, (task, response)) in suite.tasks.iter().zip(responses).enumerate() {
            let verdict = score(suite.kind, task, &response);
            correct += usize::from(verdict.correct);
            results.push(ItemResult {
                suite: suite.name.clone(),
                id: task.id.clone(),
                lang: task.lang.clone(),
                response,
                expected: render_expected(&task.expected),
                extracted: verdict.extracted,
                correct: verdict.correct,
            });
            progress(&suite.name, i + 1, suite.tasks.len());
        }
        let items = suite.tasks.len();
        scores.push(SuiteScore {
            suite: suite.name.clone(),
            items,
            correct,
            accuracy: if items == 0 {
                0.0
            } else {
                correct as f64 / items as f64
            },
            elapsed_ms: u64::try_from(started.elapsed().as_millis()).unwrap_or(u64::MAX),
            suite_sha256: suite.sha256.clone(),
        });
    }
    Ok(Evaluation {
        policy: policy.name().to_owned(),
        results,
        suites: scores,
    })
}
