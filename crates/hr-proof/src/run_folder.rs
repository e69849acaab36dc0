//! The one reader of a run's evidence stream (`hr_files::RunDir::evidence`): what the training
//! lifecycle writes (`hr-train`, through [`EvidenceLine`]) and the qualifications compare.

use std::path::Path;

use serde::{Deserialize, Serialize};

use hr_files::IoResultExt;

use crate::ProofError;

/// Where the task sampler stands after a step.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct CursorRecord {
    /// Epochs completed.
    pub epoch: u64,
    /// Tasks taken in this epoch.
    pub position: u64,
}

/// One step's evidence line: what identifies the step's work and the state after it. The field
/// order is the line's key order (a checkpoint's manifest seals the lines' digests).
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct EvidenceLine {
    /// The step (1-based).
    pub step: u64,
    /// The tasks of the step's episodes, in order.
    pub task_ids: Vec<String>,
    /// The episodes' rewards.
    pub rewards: Vec<f64>,
    /// sha256 of the sampled completion tokens (JSON of the per-episode token lists).
    pub tokens_sha256: String,
    /// sha256 of the advantages.
    pub advantages_sha256: String,
    /// sha256 of the adapter weights after the step.
    pub adapter_sha256: String,
    /// sha256 of the optimizer state after the step.
    pub optimizer_sha256: String,
    /// sha256 of the trainer state (RNG included) after the step.
    pub trainer_state_sha256: String,
    /// The data cursor after the step.
    pub data_cursor: CursorRecord,
}

impl EvidenceLine {
    /// The first field, in [`crate::NATIVE_FIELDS`] order, in which the two lines differ (floats
    /// compared bit for bit); `None` when they are equal.
    pub fn first_difference(&self, other: &Self) -> Option<&'static str> {
        let bits = |v: &[f64]| v.iter().map(|x| x.to_bits()).collect::<Vec<_>>();
        [
            ("task_ids", self.task_ids == other.task_ids),
            ("tokens_sha256", self.tokens_sha256 == other.tokens_sha256),
            ("rewards", bits(&self.rewards) == bits(&other.rewards)),
            (
                "advantages_sha256",
                self.advantages_sha256 == other.advantages_sha256,
            ),
            (
                "adapter_sha256",
                self.adapter_sha256 == other.adapter_sha256,
            ),
            (
                "optimizer_sha256",
                self.optimizer_sha256 == other.optimizer_sha256,
            ),
            (
                "trainer_state_sha256",
                self.trainer_state_sha256 == other.trainer_state_sha256,
            ),
            ("data_cursor", self.data_cursor == other.data_cursor),
        ]
        .into_iter()
        .find(|(_, same)| !same)
        .map(|(field, _)| field)
    }
}

/// The line as written to the stream: compact JSON, keys in field order.
impl std::fmt::Display for EvidenceLine {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(&serde_json::to_string(self).map_err(|_| std::fmt::Error)?)
    }
}

/// Parses an evidence stream (`path` names it in errors): every non-empty line must be an
/// [`EvidenceLine`] with a positive `step`, steps strictly increasing.
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
            serde_json::from_str(line).map_err(|e| bad(format!("not an evidence record: {e}")))?;
        if record.step == 0 {
            return Err(bad("`step` must be positive".to_owned()));
        }
        if record.step <= last {
            return Err(bad(format!("step {} after step {last}", record.step)));
        }
        last = record.step;
        lines.push(record);
    }
    Ok(lines)
}

/// Reads and parses the evidence stream at `path` ([`parse_evidence`]).
pub fn read_evidence(path: &Path) -> Result<Vec<EvidenceLine>, ProofError> {
    let text = std::fs::read_to_string(path).at("read", path)?;
    parse_evidence(&text, path)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_line_is_written_with_its_keys_in_field_order_and_reads_back_equal() {
        let line = EvidenceLine {
            step: 3,
            task_ids: vec!["digits-1".into()],
            rewards: vec![0.25, 1.0],
            tokens_sha256: "aa".into(),
            advantages_sha256: "bb".into(),
            adapter_sha256: "cc".into(),
            optimizer_sha256: "dd".into(),
            trainer_state_sha256: "ee".into(),
            data_cursor: CursorRecord {
                epoch: 1,
                position: 4,
            },
        };
        let text = line.to_string();
        assert_eq!(
            text,
            "{\"step\":3,\"task_ids\":[\"digits-1\"],\"rewards\":[0.25,1.0],\
             \"tokens_sha256\":\"aa\",\"advantages_sha256\":\"bb\",\"adapter_sha256\":\"cc\",\
             \"optimizer_sha256\":\"dd\",\"trainer_state_sha256\":\"ee\",\
             \"data_cursor\":{\"epoch\":1,\"position\":4}}"
        );
        let parsed = parse_evidence(&format!("{text}\n"), Path::new("e")).expect("parses");
        assert_eq!(parsed, [line]);
    }
}
