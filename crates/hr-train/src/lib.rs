//! The one GRPO training lifecycle. [`run`] takes a plan from its first step (or from the
//! checkpoint Core selects) to its last: it starts the plan's environment service, runs GRPO
//! steps, writes metrics (also as TensorBoard scalars) and evidence, reports them through Core with the policy RNG preserved,
//! and publishes sealed snapshots through `hr-snapshot`'s [`hr_snapshot::Publisher`] (periodic
//! saves after sealing; preemption, stop and final saves once, after native cleanup and service
//! shutdown, then the durable receipt and the acknowledgement). The persistent deadline and the
//! cumulative device-seconds budget travel sealed in every snapshot and are never renewed.
//!
//! It runs on a [`hr_core::CoreContext`]: in local mode for `hessian-recipes train`, with a
//! trial's context for `hessian-recipes managed-training`; there is no second loop. It is generic
//! over the Burn backend; choosing one, parsing flags and drawing plots belong to the binary.
// A run reports its progress (one line per step, checkpoints, the stop) on stderr, as the
// trainers it stands beside do; stdout stays for the binary.

mod adopt;
mod allocation;
mod assess;
mod base;
mod config;
mod dev_probe;
mod environment;
mod error;
mod evidence;
mod lifecycle;
mod payload;
mod score;
mod start;
mod tensorboard;

pub use adopt::{Adopted, adopt, evaluation};
pub use allocation::{AllocationOptions, Outcome, PROGRESS_TARGET};
pub use assess::{
    Assessment, CheckpointScore, ComparedScore, Comparison, Retention, SELECTION_RULE, assess,
    check_disjoint,
};
pub use config::{float_dtype, grpo_config};
pub use environment::check_dataset;
pub use error::TrainError;
pub use evidence::evidence_prefix;
pub use lifecycle::{RunOptions, managed_run_id, run};
pub use payload::{BUDGET_FILE, import_checkpoint};
pub use score::EpisodeScore;
