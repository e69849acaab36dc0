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
