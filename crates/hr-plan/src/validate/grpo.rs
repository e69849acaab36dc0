//! The `grpo` section's checks: the step's sizes, sampling, advantages and clipping, the loss
//! variants' fields and adaptive entropy control.

use super::{at_most, limits};
use crate::PlanError;

/// GRPO's settings: the step's sizes, sampling, advantages, clipping and the loss variants.
pub(super) fn grpo(
    g: &crate::Grpo,
    check: &impl Fn(bool, &str, String) -> Result<(), PlanError>,
) -> Result<(), PlanError> {
    check(
        g.tasks_per_step >= 1,
        "grpo.tasks_per_step",
        "must be at least 1".to_owned(),
    )?;
    check(
        g.num_generations >= 2,
        "grpo.num_generations",
        format!(
            "G = {} gives no group to compare; use at least 2",
            g.num_generations
        ),
    )?;
    at_most(
        g.num_generations,
        limits::MAX_GENERATIONS,
        "grpo.num_generations",
        check,
    )?;
    check(
        g.tasks_per_step.saturating_mul(g.num_generations) <= limits::MAX_EPISODES,
        "grpo.tasks_per_step",
        format!(
            "{} tasks × {} generations = {} episodes a step, above the largest supported {}; \
             lower grpo.tasks_per_step",
            g.tasks_per_step,
            g.num_generations,
            g.tasks_per_step.saturating_mul(g.num_generations),
            limits::MAX_EPISODES
        ),
    )?;
    check(
        g.temperature.is_finite() && g.temperature > 0.0,
        "grpo.temperature",
        format!("{} must be > 0", g.temperature),
    )?;
    check(
        g.top_p > 0.0 && g.top_p <= 1.0,
        "grpo.top_p",
        format!("{} must be in (0, 1]", g.top_p),
    )?;
    check(
        g.max_completion_length >= 1,
        "grpo.max_completion_length",
        "must be at least 1".to_owned(),
    )?;
    check(
        g.max_turn_tokens >= 1,
        "grpo.max_turn_tokens",
        "must be at least 1".to_owned(),
    )?;
    check(
        g.max_turns >= 1,
        "grpo.max_turns",
        "must be at least 1".to_owned(),
    )?;
    at_most(
        g.max_completion_length,
        limits::MAX_TOKENS,
        "grpo.max_completion_length",
        check,
    )?;
    at_most(
        g.max_turn_tokens,
        limits::MAX_TOKENS,
        "grpo.max_turn_tokens",
        check,
    )?;
    at_most(g.max_turns, limits::MAX_TURNS, "grpo.max_turns", check)?;
    check(
        g.prompt_format.is_chat() || (g.max_turns == 1 && g.system_prompt.is_none()),
        "grpo.prompt_format",
        "`plain` prompts have no turns: use it with max_turns 1 and no system_prompt, or use `chat`"
            .to_owned(),
    )?;
    check(
        g.advantage_epsilon.is_finite() && g.advantage_epsilon >= 0.0,
        "grpo.advantage_epsilon",
        "must be ≥ 0".to_owned(),
    )?;
    check(
        g.repetition_penalty.is_finite() && g.repetition_penalty > 0.0,
        "grpo.repetition_penalty",
        format!("{} must be > 0 (1 disables it)", g.repetition_penalty),
    )?;
    check(
        (0.0..1.0).contains(&g.min_p),
        "grpo.min_p",
        format!("{} must be in [0, 1) (0 disables it)", g.min_p),
    )?;
    check(
        g.epsilon_low > 0.0 && g.epsilon_low < 1.0,
        "grpo.epsilon_low",
        format!("{} must be in (0, 1)", g.epsilon_low),
    )?;
    check(
        g.epsilon_high.is_finite() && g.epsilon_high > 0.0,
        "grpo.epsilon_high",
        format!("{} must be > 0", g.epsilon_high),
    )?;
    check(
        g.beta.is_finite() && g.beta >= 0.0,
        "grpo.beta",
        format!("{} must be ≥ 0 (0 disables the KL term)", g.beta),
    )?;
    loss_fields(g, check)?;
    check(
        g.num_iterations >= 1,
        "grpo.num_iterations",
        "must be at least 1".to_owned(),
    )?;
    at_most(
        g.num_iterations,
        limits::MAX_ITERATIONS,
        "grpo.num_iterations",
        check,
    )?;
    Ok(())
}

/// The loss variants' fields (ranges as TRL documents them).
fn loss_fields(
    g: &crate::Grpo,
    check: &impl Fn(bool, &str, String) -> Result<(), PlanError>,
) -> Result<(), PlanError> {
    if let Some(delta) = g.delta {
        check(
            delta.is_finite() && delta > 1.0,
            "grpo.delta",
            format!("{delta} must be > 1 (TRL recommends more than 1 + epsilon_high)"),
        )?;
    }
    for (field, value, accepted) in [
        ("grpo.sapo_temperature_pos", g.sapo_temperature_pos, "> 0"),
        ("grpo.sapo_temperature_neg", g.sapo_temperature_neg, "> 0"),
    ] {
        check(
            value.is_finite() && value > 0.0,
            field,
            format!("{value} must be {accepted}"),
        )?;
    }
    for (field, value) in [
        ("grpo.vespo_k_pos", g.vespo_k_pos),
        ("grpo.vespo_lambda_pos", g.vespo_lambda_pos),
        ("grpo.vespo_k_neg", g.vespo_k_neg),
        ("grpo.vespo_lambda_neg", g.vespo_lambda_neg),
    ] {
        check(
            value.is_finite() && value >= 0.0,
            field,
            format!("{value} must be ≥ 0"),
        )?;
    }
    if let Some(threshold) = g.off_policy_mask_threshold {
        check(
            threshold.is_finite() && threshold > 0.0,
            "grpo.off_policy_mask_threshold",
            format!("{threshold} must be > 0 (DeepSeek-V3.2 uses 0.5); leave it out to disable"),
        )?;
    }
    check(
        (0.0..=1.0).contains(&g.top_entropy_quantile),
        "grpo.top_entropy_quantile",
        format!(
            "{} must be in [0, 1] (1 keeps every token; the paper uses 0.2)",
            g.top_entropy_quantile
        ),
    )?;
    check(
        g.entropy_coef.is_finite() && g.entropy_coef >= 0.0,
        "grpo.entropy_coef",
        format!("{} must be ≥ 0 (0 disables the bonus)", g.entropy_coef),
    )?;
    adaptive_entropy(g, check)
}

/// The adaptive entropy settings: in range, and given only with `use_adaptive_entropy`.
fn adaptive_entropy(
    g: &crate::Grpo,
    check: &impl Fn(bool, &str, String) -> Result<(), PlanError>,
) -> Result<(), PlanError> {
    let defaults = crate::Grpo::default();
    let settings = [
        (
            "entropy_coef_min",
            g.entropy_coef_min,
            defaults.entropy_coef_min,
        ),
        (
            "entropy_coef_max",
            g.entropy_coef_max,
            defaults.entropy_coef_max,
        ),
        (
            "entropy_coef_delta",
            g.entropy_coef_delta,
            defaults.entropy_coef_delta,
        ),
        ("entropy_target", g.entropy_target, defaults.entropy_target),
    ];
    for (name, value, default) in settings {
        let field = format!("grpo.{name}");
        check(
            value.is_finite() && value >= 0.0,
            &field,
            format!("{value} must be a number ≥ 0"),
        )?;
        check(
            g.use_adaptive_entropy || value == default,
            &field,
            format!(
                "{value} is read only with `use_adaptive_entropy: true`; set that, or leave this out"
            ),
        )?;
    }
    check(
        g.entropy_coef_min <= g.entropy_coef_max,
        "grpo.entropy_coef_max",
        format!(
            "{} must be ≥ entropy_coef_min {}",
            g.entropy_coef_max, g.entropy_coef_min
        ),
    )
}
