//! A training snapshot's payload: the native state (PEFT adapter, optimizer moments, trainer
//! step and RNG; the adapter's two files also at the folder's root, for PEFT), the data cursor, the run's evidence and metrics so far, the raw rollouts of
//! the last steps and the budget. Written into a [`SnapshotWriter`]; read back only from a
//! snapshot that verified, and cross-checked against its manifest's evidence prefix.

use hr_files::IoResultExt;
use std::collections::VecDeque;
use std::path::Path;

use hr_grpo::{DataCursor, NativeState};
use hr_seal::{SnapshotWriter, Verified};
use hr_snapshot::Budget;
use serde_json::Value;

use crate::base::BaseModel;
use crate::{TrainError, evidence::evidence_prefix};

/// The trainer's native state in a checkpoint (the PEFT adapter files among it).
pub const NATIVE_DIR: &str = "payload/native";
const CURSOR_FILE: &str = "payload/data_cursor.json";
const EVIDENCE_PAYLOAD: &str = "payload/evidence.jsonl";
const METRICS_PAYLOAD: &str = "payload/metrics.jsonl";
const ROLLOUTS_PAYLOAD: &str = "payload/rollouts.json";
/// The sealed budget (deadline, device-seconds limit and use) in a snapshot.
pub const BUDGET_FILE: &str = "payload/budget.json";
/// The base model's digests.
pub const BASE_MODEL_FILE: &str = "payload/base_model.json";
/// The manifest's name for the evidence stream.
const EVIDENCE_STREAM: &str = "evidence";

/// What a run has produced so far, besides the trainer's native state.
#[derive(Debug, Clone)]
pub(crate) struct Progress {
    /// `evidence.jsonl` so far.
    pub(crate) evidence: String,
    /// `metrics.jsonl` so far.
    pub(crate) metrics: String,
    /// The raw rollouts of the last steps, oldest first.
    pub(crate) recent: VecDeque<Value>,
    /// The data cursor after the last step.
    pub(crate) cursor: DataCursor,
}

/// Writes a snapshot's payload and its evidence prefix.
pub(crate) fn write(
    w: &mut SnapshotWriter,
    state: &NativeState,
    progress: &Progress,
    budget: &Budget,
    base: &BaseModel,
) -> Result<(), String> {
    let mut add = |path: &str, role: &str, bytes: &[u8]| {
        w.add_bytes(path, role, bytes).map_err(|e| e.to_string())
    };
    for (file, bytes) in &state.files {
        add(&format!("{NATIVE_DIR}/{file}"), "native-state", bytes)?;
        // PEFT's files at the folder's root too, so a downloaded checkpoint loads as it is.
        if [hr_policy::ADAPTER_CONFIG, hr_policy::ADAPTER_WEIGHTS].contains(&file.as_str()) {
            add(file, "peft-adapter", bytes)?;
        }
    }
    add(CURSOR_FILE, "data-cursor", &json(&progress.cursor))?;
    add(EVIDENCE_PAYLOAD, "evidence", progress.evidence.as_bytes())?;
    add(METRICS_PAYLOAD, "metrics", progress.metrics.as_bytes())?;
    add(ROLLOUTS_PAYLOAD, "rollouts", &json(&progress.recent))?;
    add(BUDGET_FILE, "budget", &budget.to_bytes())?;
    add(BASE_MODEL_FILE, "base-model", &json(base))?;
    w.evidence(evidence_prefix(EVIDENCE_STREAM, &progress.evidence));
    Ok(())
}

fn json<T: serde::Serialize>(value: &T) -> Vec<u8> {
    serde_json::to_vec(value).expect("payload values serialise")
}

fn restore_err(snapshot: &Verified, what: impl std::fmt::Display) -> TrainError {
    TrainError::Restore(format!("{}: {what}", snapshot.dir.display()))
}

/// Reads a verified snapshot's payload. Its evidence must be exactly the manifest's evidence
/// prefix, with one record per step, and its base model the one loaded now (`base`).
pub(crate) fn read(
    snapshot: &Verified,
    base: &BaseModel,
) -> Result<(NativeState, Progress, Budget), TrainError> {
    // Every file is read through the seal: what is loaded is what was verified.
    let bytes = |rel: &str| {
        snapshot
            .read_file(rel)
            .map_err(|e| restore_err(snapshot, e.to_string()))
    };
    let text = |rel: &str| {
        String::from_utf8(bytes(rel)?).map_err(|e| restore_err(snapshot, format!("{rel}: {e}")))
    };
    let parse = |rel: &str| -> Result<Value, TrainError> {
        serde_json::from_slice(&bytes(rel)?)
            .map_err(|e| restore_err(snapshot, format!("{rel}: {e}")))
    };
    let sealed: BaseModel = serde_json::from_value(parse(BASE_MODEL_FILE)?)
        .map_err(|e| restore_err(snapshot, format!("{BASE_MODEL_FILE}: {e}")))?;
    if let Some(what) = sealed.difference(base) {
        return Err(restore_err(
            snapshot,
            format!("it was trained on another base model than the plan's model.path: {what}"),
        ));
    }
    let state = NativeState::read_with(|name| {
        snapshot
            .read_file(&format!("{NATIVE_DIR}/{name}"))
            .map_err(|e| e.to_string())
    })
    .map_err(|e| restore_err(snapshot, e.to_string()))?;
    let cursor: DataCursor = serde_json::from_value(parse(CURSOR_FILE)?)
        .map_err(|e| restore_err(snapshot, format!("{CURSOR_FILE}: {e}")))?;
    let recent: VecDeque<Value> = serde_json::from_value(parse(ROLLOUTS_PAYLOAD)?)
        .map_err(|e| restore_err(snapshot, format!("{ROLLOUTS_PAYLOAD}: {e}")))?;
    let budget = Budget::from_bytes(&bytes(BUDGET_FILE)?)
        .map_err(|e| restore_err(snapshot, format!("{BUDGET_FILE}: {e}")))?;
    let evidence = text(EVIDENCE_PAYLOAD)?;
    let metrics = text(METRICS_PAYLOAD)?;
    let step = snapshot.manifest.step;
    let sealed = snapshot
        .manifest
        .evidence
        .iter()
        .find(|p| p.name == EVIDENCE_STREAM)
        .ok_or_else(|| restore_err(snapshot, "the manifest has no evidence prefix"))?;
    if *sealed != evidence_prefix(EVIDENCE_STREAM, &evidence) || sealed.count != step {
        return Err(restore_err(
            snapshot,
            format!(
                "the evidence ({} records) is not the manifest's prefix of {} records at step {step}",
                evidence.lines().count(),
                sealed.count
            ),
        ));
    }
    Ok((
        state,
        Progress {
            evidence,
            metrics,
            recent,
            cursor,
        },
        budget,
    ))
}

/// Prepares a local run (Core folder `core_dir`) to continue from `src`: a checkpoint folder,
/// or a run folder of `hessian-recipes train` (its latest checkpoint). The checkpoint is copied
/// and restored, fully verified, by the same path as a scheduler-selected one.
pub fn import_checkpoint(core_dir: &Path, src: &Path) -> Result<(String, u64), TrainError> {
    let run = hr_files::RunDir::new(src);
    let from = if run.checkpoint_list().is_file() {
        run.core()
    } else {
        src.to_owned()
    };
    std::fs::create_dir_all(core_dir).at("create", core_dir)?;
    hr_core::CoreContext::local_import(core_dir, &from).map_err(|e| match e {
        hr_core::CoreError::NotACheckpoint { .. } => TrainError::Refused(format!("--resume: {e}")),
        other => other.into(),
    })
}
