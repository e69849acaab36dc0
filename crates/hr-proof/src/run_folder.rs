//! The one reader of a run's evidence stream (`hr_files::RunDir::evidence`): what the training
//! lifecycle writes and the qualifications compare.

use std::path::Path;

use crate::ProofError;

/// One step's evidence: a JSON object with at least a `step`.
pub type EvidenceLine = serde_json::Map<String, serde_json::Value>;

/// Parses an evidence stream (`path` names it in errors): every non-empty line must be a JSON
/// object whose `step` is a positive integer, steps strictly increasing.
pub fn parse_evidence(text: &str, path: &Path) -> Result<Vec<EvidenceLine>, ProofError> {
    let mut lines: Vec<EvidenceLine> = Vec::new();
    let mut last = 0;
    for (n, line) in text.lines().enumerate() {
        if line.trim().is_empty() {
            continue;
        }
        let bad = |message: String| ProofError::Evidence {
            path: path.to_owned(),
            line: n + 1,
            message,
        };
        let record: EvidenceLine =
            serde_json::from_str(line).map_err(|e| bad(format!("not a JSON object: {e}")))?;
        let step = record
            .get("step")
            .and_then(serde_json::Value::as_u64)
            .filter(|s| *s > 0)
            .ok_or_else(|| bad("no positive integer `step`".to_owned()))?;
        if step <= last {
            return Err(bad(format!("step {step} after step {last}")));
        }
        last = step;
        lines.push(record);
    }
    Ok(lines)
}

/// Reads and parses the evidence stream at `path` ([`parse_evidence`]).
pub fn read_evidence(path: &Path) -> Result<Vec<EvidenceLine>, ProofError> {
    let text = std::fs::read_to_string(path).map_err(|source| ProofError::Io {
        op: "read",
        path: path.to_owned(),
        source,
    })?;
    parse_evidence(&text, path)
}
