//! The report files: `results.jsonl` (one line per task), `report.json` (per-suite scores,
//! counts, timings, versions) and `report.md` (the same for people). Rendering only: the demo
//! seals the bytes (`demo.rs`), checkpoint evaluation adds plots and seals its own folder.

use serde_json::json;
use sha2::{Digest, Sha256};

use crate::Evaluation;

/// Facts about the run that the report records.
#[derive(Debug, Clone, PartialEq)]
pub struct ReportMeta {
    /// `(tool, version)` pairs, e.g. the binary's and this crate's version.
    pub tool_versions: Vec<(String, String)>,
    /// Total wall time, milliseconds.
    pub elapsed_ms: u64,
}

fn hex(bytes: &[u8]) -> String {
    hex::encode(Sha256::digest(bytes))
}

/// Renders the three report files: `(file name, bytes)`.
pub fn render_reports(eval: &Evaluation, meta: &ReportMeta) -> Vec<(&'static str, Vec<u8>)> {
    let mut results = String::new();
    for item in &eval.results {
        results.push_str(&serde_json::to_string(item).expect("results serialise"));
        results.push('\n');
    }
    let (items, correct) = eval
        .suites
        .iter()
        .fold((0, 0), |(n, c), s| (n + s.items, c + s.correct));
    let accuracy = if items == 0 {
        0.0
    } else {
        correct as f64 / items as f64
    };
    let versions: serde_json::Map<String, serde_json::Value> = meta
        .tool_versions
        .iter()
        .map(|(k, v)| (k.clone(), json!(v)))
        .collect();
    let report = json!({
        "schema": "hessian-recipes/eval-report/v1",
        "policy": eval.policy,
        "suites": eval.suites,
        "total": {"items": items, "correct": correct, "accuracy": accuracy},
        "elapsed_ms": meta.elapsed_ms,
        "results_sha256": hex(results.as_bytes()),
        "tool_versions": versions,
    });
    let mut md = format!(
        "# Evaluation report\n\nPolicy: `{}`. {correct} of {items} tasks correct ({:.1}%).\n\n\
         | suite | items | correct | accuracy | time (ms) |\n|---|---:|---:|---:|---:|\n",
        eval.policy,
        100.0 * accuracy
    );
    for s in &eval.suites {
        md.push_str(&format!(
            "| {} | {} | {} | {:.1}% | {} |\n",
            s.suite,
            s.items,
            s.correct,
            100.0 * s.accuracy,
            s.elapsed_ms
        ));
    }
    md.push_str("\nIncorrect answers:\n\n");
    for r in eval.results.iter().filter(|r| !r.correct) {
        let got = r.extracted.as_deref().unwrap_or("(nothing readable)");
        md.push_str(&format!(
            "- `{}` ({}): expected `{}`, got `{got}`\n",
            r.id, r.suite, r.expected
        ));
    }
    md.push_str("\nTool versions: ");
    let list: Vec<String> = meta
        .tool_versions
        .iter()
        .map(|(k, v)| format!("{k} {v}"))
        .collect();
    md.push_str(&list.join(", "));
    md.push('\n');
    vec![
        ("results.jsonl", results.into_bytes()),
        (
            "report.json",
            serde_json::to_vec_pretty(&report).expect("report serialises"),
        ),
        ("report.md", md.into_bytes()),
    ]
}
