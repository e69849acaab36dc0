//! The one GRPO training lifecycle. [`run`] takes a plan from its first step (or from the
//! checkpoint Core selects) to its last: it starts the plan's environment service, runs GRPO
//! steps, writes metrics (also as TensorBoard scalars), evidence and the decoded completions
//! ([`completions`]), reports them through Core with the policy RNG preserved,
//! and publishes sealed snapshots through `hr-snapshot`'s [`hr_snapshot::Publisher`] (periodic
//! saves after sealing; preemption, stop and final saves once, after native cleanup and service
//! shutdown, then the durable receipt and the acknowledgement). The persistent deadline and the
//! cumulative device-seconds budget travel sealed in every snapshot and are never renewed.
//!
//! It runs on a [`hr_core::CoreContext`]: in local mode for `hessian-recipes train`, with a
//! trial's context for `hessian-recipes managed-training`; there is no second loop (a
//! data-parallel run's workers, [`work`], only step their shards when its chief, [`run_ranked`],
//! says so, and write nothing). It is generic
//! over the Burn backend; choosing one and parsing flags belong to the binary, assessing a finished
//! run and drawing its reports to `hr-assess`.
// A run reports its progress (one line per step, checkpoints, the stop) on stderr, as the
// trainers it stands beside do; stdout stays for the binary.

mod allocation;
mod base;
mod check;
pub mod completions;
mod config;
mod dev_probe;
mod environment;
mod error;
mod evidence;
mod faults;
mod lifecycle;
mod payload;
mod ranks;
mod score;
mod start;
mod tensorboard;

pub use allocation::{AllocationOptions, Outcome, PROGRESS_BEGIN_TARGET, PROGRESS_TARGET};
pub use base::BaseModel;
pub use check::{CheckReport, check};
pub use config::{float_dtype, grpo_config, load_policy};
pub use environment::{Factory, check_dataset, environment, task_set};
pub use error::TrainError;
pub use evidence::evidence_prefix;
pub use faults::{fault_clock_ahead, fault_point, fault_points};
pub use lifecycle::{RunOptions, managed_run_id, run, run_ranked};
pub use payload::{BASE_MODEL_FILE, BUDGET_FILE, NATIVE_DIR, import_checkpoint};
pub use ranks::{Ranks, work};
pub use score::{EpisodeScore, SAMPLE_CHARS, SAMPLES, Sample, best_and_worst, episode_score};
