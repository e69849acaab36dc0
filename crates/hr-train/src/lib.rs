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
//!
//! # In detail
//!
//! `run::<B>(RunOptions, CoreContext, device)` takes a plan from its first step, or from the
//! checkpoint Core selects, to its end. Local (`train`: `CoreContext::local`) and managed
//! (`managed-training`: the trial's context) are the same code, in named phases: `lifecycle.rs`
//! opens the run folder (the plan copy, the publisher, the verified restore, the searcher's
//! operation), and `allocation.rs`'s `Allocation` starts the model, environment and trainer, runs
//! `step` until a stop, saves periodically, and `finish`es with the terminal save. Order:
//! `Publisher::restore` verifies the selected checkpoint (seal, run id, plan digest, source, step,
//! receipt) and `payload::read` checks that its evidence is exactly the manifest's evidence prefix.
//! Only then are the model loaded, the environment service started (`environment.rs`, log in
//! `service.log`) and the trainer resumed or started fresh (`start.rs`); a trainer whose step
//! differs from the sealed step is refused.
//!
//! Each step appends a metrics row and an evidence line (`evidence.rs`) to the run folder; with an
//! `evaluation` section, the row of each step `evaluate` adopts also holds the DEV reward
//! (`dev_probe.rs`: the live adapters on the DEV tasks with the evaluation's seed, the trainer's
//! RNG untouched, so the scores are those `evaluate` selects on; `hr_config::DEV_REWARD` names it).
//! It reports metrics and progress through Core (the DEV values as validation metrics, which the
//! main templates rank by) and saves periodically through `save_periodic`; every Core call is
//! wrapped in `with_rng_preserved` on the trainer's own RNG. After each step one stop reason is
//! decided (plan done, preempted, `stop_after_step`, deadline, device budget), so a step is
//! published once; preemption is read before the step's metric is reported, so a stop asked for
//! once step k's metric is visible lands after step k + 1 however the two interleave.
//!
//! The terminal save runs the typestate chain: native cleanup (sync the run files), service
//! shutdown, publish (or reuse the selected checkpoint at that step), then for a stop the durable
//! receipt and the ack, or for the plan's end the searcher completion. The payload (`payload.rs`)
//! holds the native state, data cursor, evidence, metrics, raw rollouts of the last N steps and the
//! `Budget` (deadline fixed at the first start, device-seconds used, rounded up per allocation).
//!
//! At each start the run folder's `metrics.jsonl` and `evidence.jsonl` are rebuilt from the
//! restored snapshot (`read_metrics` is the one reader of the former); `allocations.jsonl`
//! records each allocation's device, restore, deadline and budget and how it ended. A local run
//! and a managed trial set their limits through `AllocationOptions::local` and `::managed`; the
//! latter reads the recovery tests' fault injections (`faults.rs`).
//!
//! Each start also opens a TensorBoard event file (`tensorboard.rs`: TFRecord framing with masked
//! CRC-32C around hand-encoded `Event` protos) and writes every metrics row as `train/<name>`
//! scalars: in `RUN/tensorboard/` (a fresh folder's first file carries the restored history), or
//! inside a Determined trial where Determined's own TensorBoard manager syncs a trial's files,
//! `<storage>/<cluster id>/tensorboard/experiment/<e>/trial/<t>/`, so `det tensorboard` finds them.
//!
//! Each step's completions, decoded with their prompt, rewards, advantage and length
//! (`completions.rs`), go to `completions.jsonl.gz` (one gzip member per step, texts cut at 16 KiB;
//! a start cuts it back to the restored step and drops a torn member) and, as a markdown table, to
//! the event file's text plugin; `hr-assess`'s `report.md` shows the last step's best and worst.
//! `cargo xtask conformance tensorboard` reads them back with the real `tensorboard` package.
//!
//! `config.rs` maps the plan to `GrpoConfig` (its rollout half `hr_grpo::RolloutConfig::of` the
//! plan's `grpo` section, which `hr-plan` validated once; the trainer trusts it). The plan's
//! digests (`Plan::sha256`: paths to the model, the service Python and the dataset files, and the
//! `evaluation` section, are left out; `Plan::family_sha256`) are `hr-plan`'s, and the negative
//! controls applied at resume are `hr-proof`'s (`Control`); the tests' fault injection is
//! `kill_during_save` (`HR_FAULT_KILL_AT`), `hold_for_preemption` (`HR_FAULT_HOLD_AT`) and
//! `clock_ahead_s` (`HR_FAULT_CLOCK_AHEAD_S`: the deadline reached without waiting for it).
//!
//! `base.rs` digests the base model (`config.json`, `tokenizer.json`, every `*.safetensors`); the
//! digests are sealed in each payload and a restore onto other weights or another tokenizer is
//! refused, as is native state missing any optimizer moment (`hr-grpo`'s `Trainer::resume`). The
//! run-folder file names are `hr_files::RunDir`'s, which the proofs read too. Every run folder
//! holds the run's `plan.json` (written at the first start) and, once finished, `adapter/` (PEFT's
//! files; `cargo xtask conformance families` loads it, and a checkpoint's, with the real `peft` and
//! compares log-probabilities). Evaluation is `hr-assess`'s; this crate lends it the environment
//! (`environment`, `task_set`), the trainer's settings (`grpo_config`, `load_policy`), the
//! checkpoint payload's layout (`NATIVE_DIR`, `BASE_MODEL_FILE`, `BaseModel`) and the episode
//! scores (`score.rs`, shared with `dev_probe.rs`).
//!
//! A plan over several ranks: `lifecycle.rs`'s `run_ranked` is `run` as the chief, with
//! `ranks.rs`'s `Ranks`: before its start is recorded it hands the workers the plan (its trial's
//! searched values applied), the state it starts from and the sampler's cursor, and requires every
//! rank's device record to be its own; it broadcasts go or stop before each step, compares every
//! rank's state digest after each step (a drift stops the run before anything is saved) and charges
//! the budget for every rank's device. `ranks.rs`'s `work` is a worker: it loads the model, starts
//! its own environment services (`service-rank<r>.log`), steps its shards and writes nothing of the
//! run. Ranks of another build are refused when they meet (the binary's commit and sha256 in the
//! greeting). The workers take the restored state from the chief, which verified the seal, rather
//! than each reading the checkpoint. `faults.rs` holds the tests' fault injection (`HR_FAULT_*`,
//! also `HR_FAULT_KILL_RANK` and `HR_FAULT_PARALLEL`).
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
pub use evidence::{evidence_prefix, read_metrics};
pub use lifecycle::{RunOptions, managed_run_id, run, run_ranked};
pub use payload::{BASE_MODEL_FILE, BUDGET_FILE, NATIVE_DIR, import_checkpoint};
pub use ranks::{Ranks, work};
pub use score::{EpisodeScore, SAMPLE_CHARS, SAMPLES, Sample, best_and_worst, episode_score};
