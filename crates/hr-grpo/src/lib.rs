//! GRPO as TRL defines it, generic over the Burn backend: group-normalised advantages
//! (`scale_rewards` group / batch / none, optional leave-one-out baseline), the per-token clipped
//! surrogate with ε_low / ε_high and Schulman's k3 KL to the reference weighted by β, and the
//! loss aggregations `grpo`, `bnpo`, `dr_grpo` and `dapo`, with the clip and KL statistics TRL logs.
//!
//! It is the algorithm only: sampling and scoring live in `hr-policy`, environments in
//! `hr-bridge`, and the training loop, optimiser and checkpoints in the layers above.

mod advantage;
mod error;
mod loss;

pub use advantage::{AdvantageConfig, ScaleRewards, advantages};
pub use error::GrpoError;
pub use loss::{LossConfig, LossOutput, LossType, grpo_loss};
