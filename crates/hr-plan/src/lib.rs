//! The training plan (`plan.json`): which model and LoRA, which environment backend and tasks,
//! the GRPO and optimiser hyper-parameters, how many steps, the checkpoint schedule and every
//! seed. Parsing rejects unknown fields and every out-of-range value before any work starts,
//! naming the field by its path (`grpo.beta`) and the accepted range.
//!
//! Plain data: it knows nothing about tensors, services or clusters; the binary maps it onto the
//! trainer's types.

mod error;
mod plan;

pub use error::PlanError;
pub use plan::{
    Checkpoints, Decay, Environment, Evaluation, FixtureTasks, Grpo, Lora, LossType, Model,
    Optimizer, Plan, PromptFormat, ScaleRewards, Seeds, TaskSet,
};
