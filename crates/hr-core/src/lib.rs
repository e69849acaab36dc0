//! The Determined Core API for Rust trials: [`CoreContext`] with training and validation metrics
//! (tagged with `trialRunId` and `stepsCompleted`), checkpoints (`store_path`, `upload`,
//! `restore_path` for `shared_fs` and `directory` storage, `metadata.json` and `resources` as the
//! Python client writes them, `steps_completed` required), preemption fed by a background
//! long-poll (0 s, then 60 s) with an explicit acknowledgement, searcher operations, and the
//! trial's info (latest checkpoint, steps completed, run id).
//!
//! On a cluster (or under the devmaster) it reads `DET_*` and the info files; off-cluster,
//! [`CoreContext::local`] keeps the same API with metrics in JSONL and checkpoints under a run
//! folder, and takes preemption from SIGTERM/SIGINT. TensorBoard is manual: nothing is written.
//! The API is blocking; it runs its own small async runtime for HTTP, the long-poll and queued
//! metric reports (`queue_training_metrics` / `flush_metrics`: several in flight at once).
//! `CoreContext` implements `hr-snapshot`'s `CoreCheckpoints`, so sealed snapshots publish
//! through it.

mod checkpoint;
mod context;
mod error;
mod info;
mod journal;
mod local;
mod placement;
mod queue;
mod snapshots;

pub use checkpoint::StoredCheckpoint;
pub use context::{CoreContext, SearcherOp};
pub use error::CoreError;
pub use info::TrialInfo;
pub use local::{DeferredStop, defer_stop_signals, local_checkpoints, local_import_source};
pub use placement::Placement;
