//! The `evaluation` section's checks: the adopted checkpoints are ones the run saves, the DEV and
//! HELD-OUT task sets can be drawn or are listed, and the solved rule names a reward there is.

use super::{at_most, limits};
use crate::{Environment, Plan, PlanError, TaskSet};

/// The evaluation of a finished run, against the plan's steps, checkpoints and environment.
pub(super) fn evaluation(
    plan: &Plan,
    e: &crate::Evaluation,
    check: &impl Fn(bool, &str, String) -> Result<(), PlanError>,
) -> Result<(), PlanError> {
    check(
        !e.checkpoints.is_empty() && e.checkpoints.windows(2).all(|w| w[0] < w[1]),
        "evaluation.checkpoints",
        "list at least one step, ascending, e.g. [64, 128, 256]".to_owned(),
    )?;
    for step in &e.checkpoints {
        check(
            (1..=plan.steps).contains(step)
                && (step % plan.checkpoints.every == 0 || *step == plan.steps),
            "evaluation.checkpoints",
            format!(
                "step {step} is not saved by this run: use multiples of checkpoints.every \
                 ({}) up to steps ({}), or the last step",
                plan.checkpoints.every, plan.steps
            ),
        )?;
    }
    for (field, set) in [
        ("evaluation.dev", &e.dev),
        ("evaluation.held_out", &e.held_out),
    ] {
        task_set(&plan.environment, field, set, check)?;
    }
    check(
        e.num_generations >= 1,
        "evaluation.num_generations",
        "must be at least 1".to_owned(),
    )?;
    at_most(
        e.num_generations,
        limits::MAX_GENERATIONS,
        "evaluation.num_generations",
        check,
    )?;
    check(
        e.retention_max_new_tokens >= 1,
        "evaluation.retention_max_new_tokens",
        "must be at least 1".to_owned(),
    )?;
    at_most(
        e.retention_max_new_tokens,
        limits::MAX_TOKENS,
        "evaluation.retention_max_new_tokens",
        check,
    )?;
    check(
        e.solved.at_least.is_finite(),
        "evaluation.solved.at_least",
        format!("{} must be a finite number", e.solved.at_least),
    )?;
    if let Some(name) = &e.solved.reward {
        let names: Vec<&str> = match &plan.environment {
            Environment::Dataset { rewards, .. } => {
                rewards.iter().map(|r| r.name.as_str()).collect()
            }
            _ => Vec::new(),
        };
        check(
            names.contains(&name.as_str()),
            "evaluation.solved.reward",
            if names.is_empty() {
                format!(
                    "`{name}`: only a dataset plan names its reward functions; leave \
                     `reward` out to judge the episode's reward"
                )
            } else {
                format!(
                    "`{name}` is not one of environment.rewards: {}",
                    names.join(", ")
                )
            },
        )?;
    }
    Ok(())
}

/// One of the evaluation's task sets: drawn tasks only where the backend can draw them (the
/// fixture backend, a dataset with that split's file), and never an empty set.
fn task_set(
    environment: &Environment,
    field: &str,
    set: &TaskSet,
    check: &impl Fn(bool, &str, String) -> Result<(), PlanError>,
) -> Result<(), PlanError> {
    match set {
        TaskSet::Drawn { count, .. } => {
            let drawable = match environment {
                Environment::Fixture { .. } => true,
                Environment::Dataset { dev, held_out, .. } => {
                    if field == "evaluation.dev" {
                        dev.is_some()
                    } else {
                        held_out.is_some()
                    }
                }
                _ => false,
            };
            check(
                drawable,
                field,
                "drawn tasks ({count, seed}) exist only for the fixture backend and a \
                 dataset with that split's file; list them as {\"tasks\": [...]}"
                    .to_owned(),
            )?;
            check(*count >= 1, field, "count must be at least 1".to_owned())?;
            at_most(*count, limits::MAX_DRAWN_TASKS, field, check)?;
        }
        TaskSet::Listed { tasks } => {
            check(
                !tasks.is_empty(),
                field,
                "list at least one task".to_owned(),
            )?;
        }
    }
    Ok(())
}
