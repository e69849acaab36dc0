//! The names in a training run's folder that proofs read: what the training lifecycle writes
//! and the qualifications compare.

/// The evidence stream, one JSON line per step.
pub const EVIDENCE_FILE: &str = "evidence.jsonl";
/// The metrics, one JSON line per step: `step` and TRL's metric names.
pub const METRICS_FILE: &str = "metrics.jsonl";
/// Every allocation's start (what it restored, its deadline and budget) and end.
pub const ALLOCATIONS_FILE: &str = "allocations.jsonl";
