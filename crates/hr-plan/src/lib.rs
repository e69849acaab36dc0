//! The training plan (`plan.json`): which model (and the dtype of its frozen base) and LoRA,
//! which environment backend and tasks (a dataset's files and weighted reward rules among them),
//! the GRPO and optimiser hyper-parameters, how many steps, the checkpoint schedule and every
//! seed. Parsing accepts TRL's and PEFT's spellings where they mean the same, rejects unknown
//! fields and every out-of-range value before any work starts, naming the field by its path
//! (`grpo.beta`) and the accepted range. `docs/plan.md` lists every field. A plan's digests live
//! here too: [`Plan::sha256`], which every snapshot and proof is bound to, and
//! [`Plan::family_sha256`], which a qualification plan shares with the run it qualifies.
//!
//! Plain data: it knows nothing about tensors, services or clusters (a model named by its Hub id
//! is looked up in the local Hugging Face cache, never downloaded); `hr-train` maps it onto the
//! trainer's types.

mod digest;
mod error;
mod hparams;
mod hub_cache;
mod load;
mod plan;
mod schedule;
mod trl_names;
mod validate;
mod vocabulary;

pub use error::PlanError;
pub use hparams::SEARCHABLE;
pub use hub_cache::{find_cached, hub_cache_dir, is_hub_id};
pub use plan::{
    Checkpoints, Environment, Evaluation, FixtureTasks, Grpo, Lora, Model, Optimizer, Parallel,
    Plan, Reward, RewardRule, Seeds, Solved, TaskSet,
};
pub use validate::limits;
pub use vocabulary::{
    Decay, Dtype, FixtureKind, ImportanceSamplingLevel, LossType, PromptFormat, ScaleRewards,
};
