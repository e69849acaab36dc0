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
//!
//! # In detail
//!
//! `CoreContext`, a blocking API over a private one-thread runtime: from `DET_*` and the info files
//! (`HR_DET_INFO_DIR` or `/run/determined/info`) on a cluster, or `CoreContext::local(run_dir)`
//! off-cluster (metrics JSONL, checkpoints under the run folder, preemption from SIGTERM/SIGINT).
//! Checkpoints follow the Python layout (`<base>/<uuid>/`, `metadata.json`, `resources` with sizes,
//! `steps_completed` required; `shared_fs` at `/determined_shared_fs/<storage_path>`). Preemption
//! comes from a background long-poll (0 s, then 60 s); acknowledgement is explicit. On a TLS master
//! it trusts the certificate it is handed (`master_cert_file`/`master_cert_name`, else
//! `DET_MASTER_CERT_FILE`/`DET_MASTER_CERT_NAME`). A trial given more than one slot or container
//! (`slot_ids`/`DET_SLOT_IDS`, `rendezvous.json`) and started as one process is refused before
//! `runs/start`, naming `resources.slots_per_trial`, as Python's `core.init` refuses one without a
//! distributed context (the other GPUs would sit reserved and idle; `hr-config`'s rules flag such a
//! config of ours unless its entrypoint starts a launcher); the chief of a data-parallel run
//! (`CoreContext::for_chief(ranks)`) needs one rank per slot. `placement.rs`: `Placement`, the
//! trial's containers and this one's slots, from which `launch` numbers its ranks.
//!
//! `defer_stop_signals` is the local context's signal rule for a process that does not decide when
//! a run stops (a worker rank, the launcher): the first SIGTERM/SIGINT is announced and left to the
//! chief, a second exits 130.
//!
//! `CoreContext::local_import` copies a checkpoint (or a local run's latest) into a local run so it
//! is restored like a scheduler-selected one (`train --resume`); it copies regular files and
//! folders only and refuses a link, FIFO or device rather than follow or open it. `prune_local` is
//! a local run's checkpoint GC (`checkpoints.keep_last`, the evaluation's steps kept): a `{"uuid",
//! "deleted": true}` line first, then the folder removed (a folder a crash left behind goes at the
//! next prune), and `local_checkpoints` lists only what is kept (a mark hides the reports before
//! it; a managed run's checkpoints are the master's).
//!
//! Files: `context.rs` (the API), `info.rs` (the trial's identity, read through
//! `hr_det::task_info`), `local.rs` (the off-cluster context), `journal.rs` (durable JSON-lines
//! appends, torn tails cut), `queue.rs` (metrics in flight), `checkpoint.rs` (the storage layout),
//! `snapshots.rs` (`hr-snapshot`'s `CoreCheckpoints` for `CoreContext`).
//! `hr-core-conformance-trial` is the Rust twin of the Python conformance trial.

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
