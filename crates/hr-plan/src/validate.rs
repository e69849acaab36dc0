//! The plan's range and consistency checks, run after parsing: each failure names the field by
//! its path and says what to write instead.

use std::path::Path;

use crate::vocabulary::LORA_TARGETS as TARGETS;
use crate::{Environment, Plan, PlanError, TaskSet};

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
    // A size the plan sets, refused above its bound with the bound named.
    let at_most = |value: usize, limit: usize, field: &str| {
        check(
            value <= limit,
            field,
            format!("{value} is above the largest supported value, {limit}"),
        )
    };
    let g = &plan.grpo;
    let o = &plan.optimizer;
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
    check(
        !plan.model.path.as_os_str().is_empty() || plan.model.hub_id.is_some(),
        "model.path",
        "must name an HF model folder (or leave it out and name a cached model by model.hub_id)"
            .to_owned(),
    )?;
    if let Some(id) = &plan.model.hub_id {
        check(
            crate::hub_cache::is_hub_id(id),
            "model.hub_id",
            format!("{id:?} is not a Hugging Face model id such as \"Qwen/Qwen3-0.6B\""),
        )?;
    }
    check(
        plan.model.lora.rank >= 1,
        "model.lora.rank",
        "must be at least 1".to_owned(),
    )?;
    at_most(
        plan.model.lora.rank,
        limits::MAX_LORA_RANK,
        "model.lora.rank",
    )?;
    check(
        (0.0..1.0).contains(&plan.model.lora.dropout),
        "model.lora.dropout",
        format!(
            "{} must be at least 0 and below 1 (PEFT's lora_dropout; 0 is off)",
            plan.model.lora.dropout
        ),
    )?;
    check(
        plan.model.lora.alpha.is_finite() && plan.model.lora.alpha > 0.0,
        "model.lora.alpha",
        "must be > 0".to_owned(),
    )?;
    lora_selection(&plan.model.lora, &check)?;
    for t in &plan.model.lora.targets {
        check(
            TARGETS.contains(&t.as_str()),
            "model.lora.targets",
            format!("`{t}` is not one of {TARGETS:?}"),
        )?;
    }
    match &plan.environment {
        Environment::Openenv {
            tasks,
            max_sessions,
            app,
            ..
        } => {
            check(
                app.split_once(':').is_some_and(|(module, attribute)| {
                    !module.is_empty()
                        && !attribute.is_empty()
                        && !app.contains(char::is_whitespace)
                }),
                "environment.app",
                format!("{app:?} is not MODULE:ATTRIBUTE, e.g. \"my_env.server.app:app\""),
            )?;
            check(
                !tasks.is_empty(),
                "environment.tasks",
                "list at least one reset payload".to_owned(),
            )?;
            check(
                *max_sessions >= 1,
                "environment.max_sessions",
                "must be at least 1".to_owned(),
            )?;
            at_most(
                *max_sessions,
                limits::MAX_SESSIONS,
                "environment.max_sessions",
            )?;
        }
        Environment::Nemo {
            tasks,
            server_config,
            ..
        } => {
            check(
                !tasks.is_empty(),
                "environment.tasks",
                "list at least one dataset row".to_owned(),
            )?;
            for key in ["entrypoint", "host", "port", "domain"] {
                check(
                    !server_config.contains_key(key),
                    "environment.server_config",
                    format!("`{key}` is set by the bridge (it runs the server); leave it out"),
                )?;
            }
        }
        Environment::Fixture { tasks } => {
            check(
                tasks.count >= 1,
                "environment.tasks.count",
                "must be at least 1".to_owned(),
            )?;
            at_most(
                tasks.count,
                limits::MAX_DRAWN_TASKS,
                "environment.tasks.count",
            )?;
        }
        Environment::Dataset { rewards, .. } => {
            check(
                !rewards.is_empty(),
                "environment.rewards",
                "name at least one reward, e.g. {\"name\": \"correct\", \"rule\": \
                 \"final_number\", \"column\": \"answer\"}"
                    .to_owned(),
            )?;
            for (i, r) in rewards.iter().enumerate() {
                let at = |field: &str| format!("environment.rewards[{i}].{field}");
                check(
                    !r.name.is_empty()
                        && r.name
                            .chars()
                            .all(|c| c.is_ascii_alphanumeric() || c == '_' || c == '-'),
                    &at("name"),
                    format!("{:?}: use letters, digits, `_` and `-`", r.name),
                )?;
                check(
                    rewards.iter().filter(|o| o.name == r.name).count() == 1,
                    &at("name"),
                    format!("{:?} names two rewards", r.name),
                )?;
                check(
                    r.weight.is_finite(),
                    &at("weight"),
                    format!("{} must be a finite number", r.weight),
                )?;
                let given = [
                    ("column", r.column.is_some()),
                    ("pattern", r.pattern.is_some()),
                    ("tag", r.tag.is_some()),
                    ("max_chars", r.max_chars.is_some()),
                    ("file", r.file.is_some()),
                    ("function", r.function.is_some()),
                ];
                for (setting, present) in given {
                    let needed = r.rule.needs().contains(&setting);
                    check(
                        present == needed,
                        &at(setting),
                        if needed {
                            format!("the {:?} rule needs `{setting}`", r.rule)
                        } else {
                            format!("the {:?} rule takes no `{setting}`", r.rule)
                        },
                    )?;
                }
                if let Some(pattern) = &r.pattern {
                    check(
                        regex::Regex::new(pattern).is_ok(),
                        &at("pattern"),
                        format!("{pattern:?} is not a regular expression"),
                    )?;
                }
                for (setting, present) in [
                    ("python", r.python.is_some()),
                    ("timeout_s", r.timeout_s.is_some()),
                ] {
                    check(
                        !present || r.rule == crate::RewardRule::Python,
                        &at(setting),
                        format!("the {:?} rule takes no `{setting}`", r.rule),
                    )?;
                }
                check(
                    r.timeout_s != Some(0),
                    &at("timeout_s"),
                    "must be at least 1".to_owned(),
                )?;
                check(
                    r.max_chars != Some(0),
                    &at("max_chars"),
                    "must be at least 1".to_owned(),
                )?;
            }
        }
    }
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
    )?;
    at_most(
        g.max_turn_tokens,
        limits::MAX_TOKENS,
        "grpo.max_turn_tokens",
    )?;
    at_most(g.max_turns, limits::MAX_TURNS, "grpo.max_turns")?;
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
    loss_fields(g, &check)?;
    check(
        g.num_iterations >= 1,
        "grpo.num_iterations",
        "must be at least 1".to_owned(),
    )?;
    at_most(
        g.num_iterations,
        limits::MAX_ITERATIONS,
        "grpo.num_iterations",
    )?;
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
    )?;
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
    )?;
    check(plan.steps >= 1, "steps", "must be at least 1".to_owned())?;
    check(
        plan.checkpoints.every >= 1,
        "checkpoints.every",
        "must be at least 1".to_owned(),
    )?;
    if let Some(e) = &plan.evaluation {
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
            match set {
                TaskSet::Drawn { count, .. } => {
                    let drawable = match &plan.environment {
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
                    at_most(*count, limits::MAX_DRAWN_TASKS, field)?;
                }
                TaskSet::Listed { tasks } => {
                    check(
                        !tasks.is_empty(),
                        field,
                        "list at least one task".to_owned(),
                    )?;
                }
            }
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
    }
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

/// Which projections get adapters: `targets`, or PEFT's regular-expression `target_regex`
/// (then `targets` is empty and `layers_to_transform` unused, as PEFT ignores it there).
fn lora_selection(
    lora: &crate::Lora,
    check: &impl Fn(bool, &str, String) -> Result<(), PlanError>,
) -> Result<(), PlanError> {
    if let Some(pattern) = &lora.target_regex {
        check(
            lora.targets.is_empty(),
            "model.lora.target_regex",
            "give `targets` or `target_regex`, not both".to_owned(),
        )?;
        check(
            regex::Regex::new(&format!("^(?:{pattern})$")).is_ok(),
            "model.lora.target_regex",
            format!(
                "`{pattern}` is not a regular expression this reads (the regex crate's syntax: no \
                 look-around or back-references)"
            ),
        )?;
        check(
            lora.layers_to_transform.is_none(),
            "model.lora.layers_to_transform",
            "PEFT ignores it beside a regular-expression target_modules: put the layers in the \
             expression (`model\\.layers\\.(0|1)\\..*_proj`)"
                .to_owned(),
        )?;
    } else {
        check(
            !lora.targets.is_empty(),
            "model.lora.targets",
            format!("name at least one of {TARGETS:?}"),
        )?;
    }
    if let Some(layers) = &lora.layers_to_transform {
        check(
            !layers.is_empty() && layers.len() <= limits::MAX_LAYERS,
            "model.lora.layers_to_transform",
            format!(
                "name between 1 and {} layer indices, or leave it out for all",
                limits::MAX_LAYERS
            ),
        )?;
    }
    Ok(())
}
