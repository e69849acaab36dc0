//! What each step leaves behind: its metrics row (TRL names), its evidence line (task ids,
//! rewards, digests of the sampled tokens, the advantages and the native state after the step,
//! the data cursor) and its raw rollouts; and the digest of an evidence prefix that manifests
//! carry.

use hr_grpo::{DataCursor, NativeState, StepReport};
use hr_proof::{CursorRecord, EvidenceLine};
use hr_seal::{EvidencePrefix, sha256_hex};
use serde_json::{Value, json};

/// One step's metrics row.
pub(crate) fn metrics_row(report: &StepReport) -> Value {
    let mut row = json!({"step": report.step + 1});
    for (k, v) in &report.metrics {
        row[k] = json!(v);
    }
    row
}

/// One step's evidence line.
pub(crate) fn evidence_line(
    report: &StepReport,
    state: &NativeState,
    cursor: DataCursor,
) -> EvidenceLine {
    let tokens: Vec<&Vec<u32>> = report.episodes.iter().map(|e| &e.completion).collect();
    let digest = |name: &str| {
        state
            .files
            .get(name)
            .map(|b| sha256_hex(b))
            .unwrap_or_default()
    };
    EvidenceLine {
        step: report.step + 1,
        task_ids: report.episodes.iter().map(|e| e.task_id.clone()).collect(),
        rewards: report.episodes.iter().map(|e| e.reward).collect(),
        tokens_sha256: sha256_hex(&serde_json::to_vec(&tokens).expect("tokens serialise")),
        advantages_sha256: sha256_hex(
            &serde_json::to_vec(&report.advantages).expect("advantages serialise"),
        ),
        adapter_sha256: digest(hr_policy::ADAPTER_WEIGHTS),
        optimizer_sha256: digest(hr_grpo::OPTIMIZER_STATE),
        trainer_state_sha256: digest(hr_grpo::TRAINER_STATE),
        data_cursor: CursorRecord {
            epoch: cursor.epoch,
            position: cursor.position as u64,
        },
    }
}

/// One step's raw rollouts.
pub(crate) fn rollout_record(report: &StepReport) -> Value {
    let episodes: Vec<Value> = report
        .episodes
        .iter()
        .map(|e| {
            json!({"task_id": e.task_id, "prompt": e.prompt, "completion": e.completion,
                   "policy_mask": e.policy_mask, "reward": e.reward})
        })
        .collect();
    json!({"step": report.step + 1, "episodes": episodes})
}

/// The manifest entry for an evidence stream's text (one record a line): the record count and
/// the sha256 of the records' sha256 digests in order.
pub fn evidence_prefix(name: &str, text: &str) -> EvidencePrefix {
    let digests: String = text.lines().map(|l| sha256_hex(l.as_bytes())).collect();
    EvidencePrefix {
        name: name.to_owned(),
        count: text.lines().count() as u64,
        sha256: sha256_hex(digests.as_bytes()),
    }
}

/// A run folder's `metrics.jsonl` (one object per step, as the trainer writes it), as the
/// training report and `evaluate` read it: a line that is not a JSON object with a `step` is
/// refused, naming the file and the line.
pub fn read_metrics(run_dir: &std::path::Path) -> Result<Vec<Value>, crate::TrainError> {
    use hr_files::IoResultExt;
    let path = hr_files::RunDir::new(run_dir).metrics();
    let text = std::fs::read_to_string(&path).at("read", &path)?;
    text.lines()
        .enumerate()
        .map(|(i, line)| match serde_json::from_str::<Value>(line) {
            Ok(row) if row.get("step").is_some_and(Value::is_u64) => Ok(row),
            _ => Err(crate::TrainError::Refused(format!(
                "{} line {}: not a metrics row (a JSON object with its step); the run folder \
                 is damaged",
                path.display(),
                i + 1
            ))),
        })
        .collect()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn an_evidence_prefix_changes_with_any_record_and_counts_lines() {
        let a = evidence_prefix("evidence", "{\"step\":1}\n{\"step\":2}\n");
        assert_eq!(a.count, 2);
        let b = evidence_prefix("evidence", "{\"step\":1}\n{\"step\":3}\n");
        assert_ne!(a.sha256, b.sha256);
        let prefix = evidence_prefix("evidence", "{\"step\":1}\n");
        assert_eq!(prefix.count, 1);
        assert_ne!(prefix.sha256, a.sha256);
    }
}
