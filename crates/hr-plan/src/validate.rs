//! The plan's range and consistency checks, run after parsing: each failure names the field by
//! its path and says what to write instead. The checks run section by section in a fixed order and
//! stop at the first failure; the model's, the environment's, GRPO's and the evaluation's are in
//! `validate/`.

mod environment;
mod evaluation;
mod grpo;
mod model;

use std::path::Path;

use crate::{Plan, PlanError};

/// Upper bounds on the sizes a plan sets. Each is far above what a GRPO run uses (TRL's examples:
/// 8–64 generations, 1–4 iterations, completions of up to a few thousand tokens) and low enough
/// that what it sizes is bounded before anything is allocated: a step holds at most
/// [`MAX_EPISODES`] episodes of at most [`MAX_TOKENS`] completion tokens each.
pub mod limits {
    /// Episodes per step: `grpo.tasks_per_step × grpo.num_generations`.
    pub const MAX_EPISODES: usize = 1 << 16;
    /// `grpo.num_generations` and `evaluation.num_generations`.
    pub const MAX_GENERATIONS: usize = 4096;
    /// `grpo.num_iterations` (μ): the passes over one step's episodes.
    pub const MAX_ITERATIONS: usize = 64;
    /// `grpo.max_completion_length`, `grpo.max_turn_tokens` and
    /// `evaluation.retention_max_new_tokens`.
    pub const MAX_TOKENS: usize = 1 << 17;
    /// `grpo.max_turns`.
    pub const MAX_TURNS: usize = 1024;
    /// Drawn tasks: `environment.tasks.count` and an evaluation set's `count`.
    pub const MAX_DRAWN_TASKS: usize = 1 << 20;
    /// `model.lora.rank` (PEFT's largest common ranks are 256–512).
    pub const MAX_LORA_RANK: usize = 4096;
    /// `environment.max_sessions` (OpenEnv sessions held open at once).
    pub const MAX_SESSIONS: usize = 4096;
    /// Entries of `model.lora.layers_to_transform` (more than any model's decoder layers).
    pub const MAX_LAYERS: usize = 1024;
    /// `parallel.shards` (ranks a step can be spread over).
    pub const MAX_SHARDS: usize = 64;
}

pub(crate) fn validate(plan: &Plan, path: &Path) -> Result<(), PlanError> {
    let check = |ok: bool, field: &str, message: String| {
        if ok {
            Ok(())
        } else {
            Err(PlanError::Field {
                path: path.to_owned(),
                field: field.to_owned(),
                message,
            })
        }
    };
    check(
        plan.schema_version == 1,
        "schema_version",
        format!("{} is not supported; use 1", plan.schema_version),
    )?;
    check(
        !plan.name.is_empty()
            && plan
                .name
                .chars()
                .all(|c| c.is_ascii_alphanumeric() || "-_.".contains(c)),
        "name",
        "must be non-empty and use only letters, digits, '-', '_' and '.'".to_owned(),
    )?;
    model::model(&plan.model, &check)?;
    environment::environment(&plan.environment, &check)?;
    grpo::grpo(&plan.grpo, &check)?;
    parallel(plan, &check)?;
    optimizer(&plan.optimizer, &check)?;
    check(plan.steps >= 1, "steps", "must be at least 1".to_owned())?;
    check(
        plan.checkpoints.every >= 1,
        "checkpoints.every",
        "must be at least 1".to_owned(),
    )?;
    if let Some(e) = &plan.evaluation {
        evaluation::evaluation(plan, e, &check)?;
    }
    Ok(())
}

/// A size the plan sets, refused above its bound with the bound named.
fn at_most(
    value: usize,
    limit: usize,
    field: &str,
    check: &impl Fn(bool, &str, String) -> Result<(), PlanError>,
) -> Result<(), PlanError> {
    check(
        value <= limit,
        field,
        format!("{value} is above the largest supported value, {limit}"),
    )
}

/// How a step is cut into shards, and the micro-batches that score them.
fn parallel(
    plan: &Plan,
    check: &impl Fn(bool, &str, String) -> Result<(), PlanError>,
) -> Result<(), PlanError> {
    let g = &plan.grpo;
    let shards = plan.parallel.shards;
    check(
        shards.is_power_of_two()
            && shards <= limits::MAX_SHARDS
            && g.tasks_per_step.is_multiple_of(shards),
        "parallel.shards",
        format!(
            "{shards} must be a power of two of at most {} that divides grpo.tasks_per_step ({})",
            limits::MAX_SHARDS,
            g.tasks_per_step
        ),
    )?;
    check(
        g.gradient_accumulation_steps == 1 || g.gradient_accumulation_steps.is_multiple_of(shards),
        "grpo.gradient_accumulation_steps",
        format!(
            "{} must be a multiple of parallel.shards ({shards}): each shard is scored in its own \
             micro-batches (1 is one per shard)",
            g.gradient_accumulation_steps
        ),
    )?;
    check(
        (1..=g.tasks_per_step.saturating_mul(g.num_generations))
            .contains(&g.gradient_accumulation_steps),
        "grpo.gradient_accumulation_steps",
        format!(
            "{} must be between 1 and the step's episodes ({})",
            g.gradient_accumulation_steps,
            g.tasks_per_step.saturating_mul(g.num_generations)
        ),
    )
}

/// AdamW's settings.
fn optimizer(
    o: &crate::Optimizer,
    check: &impl Fn(bool, &str, String) -> Result<(), PlanError>,
) -> Result<(), PlanError> {
    check(
        o.learning_rate.is_finite() && o.learning_rate > 0.0 && o.learning_rate <= 1.0,
        "optimizer.learning_rate",
        format!(
            "{} must be in (0, 1]: AdamW moves each weight by about the learning rate a step \
             (LoRA uses 1e-6 to 1e-3)",
            o.learning_rate
        ),
    )?;
    check(
        o.weight_decay.is_finite() && o.weight_decay >= 0.0,
        "optimizer.weight_decay",
        "must be ≥ 0".to_owned(),
    )?;
    check(
        o.adam_epsilon.is_finite() && o.adam_epsilon > 0.0,
        "optimizer.adam_epsilon",
        "must be > 0".to_owned(),
    )?;
    check(
        (0.0..1.0).contains(&o.beta1),
        "optimizer.beta1",
        "must be in [0, 1)".to_owned(),
    )?;
    check(
        (0.0..1.0).contains(&o.beta2),
        "optimizer.beta2",
        "must be in [0, 1)".to_owned(),
    )?;
    check(
        o.max_grad_norm.is_none_or(|m| m.is_finite() && m > 0.0),
        "optimizer.max_grad_norm",
        "must be > 0 or null".to_owned(),
    )
}
