//! The plan's fields and their defaults (TRL's where TRL has one): the plan itself and its
//! parallel, optimiser, checkpoint and seed sections here, the model and LoRA, environment, GRPO
//! and evaluation sections in `plan/`.

mod environment;
mod evaluation;
mod grpo;
mod model;

use serde::{Deserialize, Serialize};

use crate::Decay;

pub use environment::{Environment, FixtureTasks, Reward, RewardRule};
pub use evaluation::{Evaluation, Solved, TaskSet};
pub use grpo::Grpo;
pub use model::{Lora, Model};

/// A training plan.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct Plan {
    /// Must be 1.
    pub schema_version: u32,
    /// The run's name (used in output and snapshot identities).
    pub name: String,
    /// The policy model and its adapters.
    pub model: Model,
    /// Where episodes come from.
    pub environment: Environment,
    /// GRPO settings.
    #[serde(default)]
    pub grpo: Grpo,
    /// Optimiser settings.
    #[serde(default)]
    pub optimizer: Optimizer,
    /// Optimiser steps to run.
    pub steps: u64,
    /// When native snapshots are written.
    #[serde(default)]
    pub checkpoints: Checkpoints,
    /// Every seed of the run.
    pub seeds: Seeds,
    /// How a step's work is cut for data-parallel training.
    #[serde(default, skip_serializing_if = "Parallel::is_default")]
    pub parallel: Parallel,
    /// How `hessian-recipes evaluate` assesses the finished run; not part of training (left out
    /// of the digests a checkpoint is bound to).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub evaluation: Option<Evaluation>,
}

/// How a step's work is cut so that several ranks (a trial's slots) can share it and still give
/// the bits one rank gives.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(deny_unknown_fields, default)]
pub struct Parallel {
    /// S: each step's tasks are cut into this many contiguous shards (a power of two that
    /// divides `grpo.tasks_per_step`), each sampled from its own stream and scored in its own
    /// micro-batches; 1, 2, 4 or 8 ranks dividing S give the same bits. S ranks at most can share
    /// a step, so choose the largest number of slots you will use. 1: one shard, as TRL.
    pub shards: usize,
}

impl Default for Parallel {
    fn default() -> Self {
        Self { shards: 1 }
    }
}

impl Parallel {
    fn is_default(&self) -> bool {
        *self == Self::default()
    }

    /// Whether `ranks` ranks can share the shards (each the same number).
    pub fn admits(&self, ranks: usize) -> bool {
        ranks > 0 && self.shards.is_multiple_of(ranks)
    }
}

/// Left out of the serialised plan when off, so digests of plans written before the field
/// existed do not change.
fn is_zero(v: &usize) -> bool {
    *v == 0
}

/// As [`is_zero`], for a float.
fn is_zero_f64(v: &f64) -> bool {
    *v == 0.0
}

/// As [`is_zero`], for a factor that is off at 1.
fn is_one(v: &f64) -> bool {
    *v == 1.0
}

fn is_true(v: &bool) -> bool {
    *v
}

fn one_f64() -> f64 {
    1.0
}

/// AdamW and schedule settings (explicit: Burn's AdamW defaults differ from torch's).
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields, default)]
pub struct Optimizer {
    /// Peak learning rate.
    pub learning_rate: f64,
    /// Decoupled weight decay.
    pub weight_decay: f64,
    /// Adam ε.
    pub adam_epsilon: f64,
    /// β1.
    #[serde(alias = "adam_beta1")]
    pub beta1: f64,
    /// β2.
    #[serde(alias = "adam_beta2")]
    pub beta2: f64,
    /// Global gradient-norm clip; null disables.
    pub max_grad_norm: Option<f64>,
    /// Linear warm-up steps.
    pub warmup_steps: u64,
    /// Decay after warm-up.
    pub decay: Decay,
}

impl Default for Optimizer {
    fn default() -> Self {
        Self {
            learning_rate: 1e-6,
            weight_decay: 0.0,
            adam_epsilon: 1e-8,
            beta1: 0.9,
            beta2: 0.999,
            max_grad_norm: Some(1.0),
            warmup_steps: 0,
            decay: Decay::Constant,
        }
    }
}

/// The native snapshot schedule.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields, default)]
pub struct Checkpoints {
    /// Write a snapshot after every `every` steps (and always after the last).
    pub every: u64,
    /// Keep the raw rollout data of this many latest steps in each snapshot (digests of all).
    pub raw_rollout_steps: usize,
    /// A local run keeps its latest `keep_last` checkpoints and every one its evaluation adopts,
    /// deleting the others as it goes (Determined's `save_trial_latest`; TRL's
    /// `save_total_limit`); 0 keeps every one. Not part of training: left out of the digest. A
    /// managed run's checkpoints are the cluster's, kept by its `checkpoint_storage` policy.
    #[serde(skip_serializing_if = "is_keep_last_default")]
    pub keep_last: usize,
}

/// [`Checkpoints::keep_last`]'s default.
const KEEP_LAST: usize = 2;

fn is_keep_last_default(v: &usize) -> bool {
    *v == KEEP_LAST
}

impl Default for Checkpoints {
    fn default() -> Self {
        Self {
            every: 1,
            raw_rollout_steps: 2,
            keep_last: KEEP_LAST,
        }
    }
}

/// Seeds.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct Seeds {
    /// The sampling RNG.
    pub sampling: u64,
    /// The LoRA initialisation.
    pub adapter_init: u64,
    /// The task order.
    pub task_order: u64,
}
