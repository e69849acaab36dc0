//! GRPO as TRL 1.16 defines it, generic over the Burn backend: group-normalised advantages
//! (`scale_rewards` group / batch / none, optional leave-one-out baseline) and TRL's loss
//! variants (token or sequence importance weights; the clipped surrogate aggregated as `grpo`,
//! `bnpo`, `dr_grpo`, `dapo` or `luspo`, or `cispo`, `sapo`, `vespo`; δ, the off-policy and
//! high-entropy masks, k3 KL to the reference weighted by β, the entropy bonus, fixed or under
//! adaptive control), with the
//! statistics TRL logs, checked against TRL's own code.
//!
//! On top: rollouts of G episodes per task through `hr-env`'s `Environment` trait (multi-turn,
//! with environment tokens masked out of the loss, and episodes cut by a token limit optionally
//! left out of it), the warm-up + constant, cosine or linear learning rate, and
//! [`Trainer::step`]: AdamW on the LoRA adapters with global gradient-norm clipping, μ iterations,
//! and TRL's metric names (each named reward's `rewards/<name>/mean` and `/std` among them). Sampling and scoring live in `hr-policy`; plans, checkpoints and the
//! command line live above.
//!
//! # In detail
//!
//! GRPO as TRL defines it. `advantage.rs`: group-normalised advantages (Bessel std + ε;
//! `scale_rewards` group / batch / none; optional leave-one-out baseline; zero-std groups get 0).
//! `loss.rs`: TRL 1.16's `_compute_loss`: token or sequence (GSPO) importance weights; the clipped
//! surrogate (ε_low / ε_high, optional δ cap) aggregated as `grpo` / `bnpo` / `dr_grpo` / `dapo` /
//! `luspo`, or `cispo`, `sapo`, `vespo`; the off-policy sequence mask and the high-entropy token
//! mask; k3 KL × β, bias-corrected by the weight (reference skipped when β = 0); the entropy bonus,
//! fixed or under adaptive control (`entropy_control.rs`: TRL's controller, its coefficient and
//! last entropy kept in `trainer_state.json`); and the metrics TRL logs with them (each
//! micro-batch's value from sums over its chunks, so chunking changes no metric, then their mean
//! over the micro-batches, as TRL averages its calls: `trainer/stats.rs`). `cargo xtask conformance
//! loss` runs TRL's own code on 224 cases and the `trl_loss` test requires its loss, gradients,
//! metrics and adaptive controller state within 1e-6. The quantile of the high-entropy mask is over
//! a micro-batch, so the trainer scores each micro-batch's entropies first (a forward pass on the
//! inference view per update) and the chunks take their rows of the mask.
//!
//! `rollout.rs`: G episodes per task through one `Environment` per episode (from an
//! `EnvironmentFactory`), generated batched on the inference copy of the policy, in waves no larger
//! than the service's session limit (OpenEnv's echo env allows one); multi-turn replies are
//! appended as user turns written by the model's chat template and masked out of the loss; an
//! episode whose prompt and `max_completion_length` together pass the model's
//! `max_position_embeddings` is refused naming its task (not truncated); `check_prompts` opens
//! every row of a dataset that way before the first step (`hr-train` calls it at start).
//!
//! `schedule.rs`: warm-up + constant, cosine or linear LR (a function of the step).
//!
//! `trainer.rs` (the update in `trainer/optimise.rs`, its loss statistics in `trainer/stats.rs`):
//! `Trainer::step`: rollouts, advantages, scoring with gradients through the adapters only, μ
//! iterations (old and reference log-probs scored on the inference view, no graph), gradient
//! accumulation over micro-batches (`dapo`, `cispo` and `vespo` normalised by the whole batch's
//! tokens), each micro-batch back-propagated in chunks of whole prompt groups whose estimated
//! activations fit a budget (1.25 GiB by default, `Trainer::with_activation_budget`; the loss's
//! denominators stay the micro-batch's, `loss::Whole`, so the update is the same: SmolLM2's peak
//! RSS 2.86 → 1.79 GiB in `bench grpo`), or of single rows when not even one group fits
//! (Qwen2.5-0.5B's groups of 8 × 256 new tokens: 24 GB and killed before). Chunks are
//! back-propagated one at a time, their losses, statistics and gradients folded in chunk order: two
//! side by side, each through its own autodiff leaves of the adapters, were faster on the CPU but
//! not repeatable under load (about one in three runs of the data-parallel e2e tests gave other
//! gradient bits; none one at a time). Then Burn's AdamW with explicit constants, torch-style
//! global gradient-norm clipping, TRL-named metrics (entropy included; `num_tokens` the running
//! total as TRL logs it, kept in the trainer state so a resumed run continues it, `step_tokens` the
//! step's; `hr-train` adds the fractional `epoch`); a step whose loss, gradient norm or updated
//! adapter weights are not finite ends with `GrpoError::Diverged` before anything of it can be
//! captured, so no NaN state is ever sealed.
//!
//! `state.rs`: `Trainer::capture` / `Trainer::resume` with the native state as files (PEFT adapter
//! files, AdamW's moments and step counts by adapter tensor name in `optimizer.safetensors`, step,
//! RNG, tokens seen and the adaptive entropy controller in `trainer_state.json`); keyed by names
//! rather than Burn's `ParamId`s so a new process restores onto freshly loaded adapters; resume
//! restores everything before any randomness is consumed and continues bit for bit (tested under
//! adaptive entropy control, with RNG-dropped, optimizer-dropped and controller-dropped controls).
//!
//! `data.rs`: `TaskSampler`, a per-epoch seeded shuffle resumable from its cursor (the epoch
//! boundary included).
//!
//! `exchange.rs`: data-parallel steps keyed by shard, not rank. With `parallel.shards` S > 1 the
//! step's tasks are cut into S contiguous shards; shard s samples from stream s of one key drawn
//! from the trainer's RNG, rolls out as its own batch and is cut into its own micro-batches
//! (`gradient_accumulation_steps / S`); chunks are numbered over the whole step (LoRA dropout's
//! seeds). `Trainer::step_with(tasks, envs, &mut dyn Exchange)` runs rank r's S/N contiguous
//! shards; ranks exchange bytes only by `all_gather` (bincode: floats as their bits): the shards'
//! episodes and reward metrics, every chunk's loss and statistics record (folded in chunk order),
//! and each rank's gradient subtree, read to the host and summed by `tree_fold`, a fixed pairwise
//! tree over shard index, so 1, 2, 4 or 8 ranks give the same bits (`tests/shards.rs`: four shards
//! at one, two and four ranks equal at every step and byte of state, and resumed across rank
//! counts). One shard is exactly the single-process step. `ParallelFault` (`HR_FAULT_PARALLEL`)
//! breaks it on purpose for the controls: rank-keyed streams, an arrival-order sum.

mod advantage;
mod data;
mod entropy_control;
mod error;
mod exchange;
mod loss;
mod rollout;
mod schedule;
mod state;
mod trainer;

pub use advantage::{AdvantageConfig, advantages};
pub use data::{DataCursor, TaskSampler};
pub use entropy_control::{AdaptiveEntropy, EntropyControl};
pub use error::GrpoError;
pub use exchange::{Alone, Exchange, ParallelFault, gather, tree_fold};
pub use loss::{
    LossConfig, LossInputs, LossOutput, Vespo, Whole, active_positions, grpo_loss,
    high_entropy_mask,
};
pub use rollout::{
    EnvironmentFactory, Episode, RewardState, RolloutConfig, check_prompts, rollouts,
};
pub use schedule::LrSchedule;
// The plan's vocabulary, defined once in `hr-plan`.
pub use hr_plan::{Decay, ImportanceSamplingLevel, LossType, PromptFormat, ScaleRewards};
pub use state::{NativeState, OPTIMIZER_STATE, TRAINER_STATE};
pub use trainer::{AdamWSettings, GrpoConfig, StepReport, Trainer};
