//! TRL's names that need more than a rename (the plain renames are serde aliases on the fields):
//! each is rewritten into the plan's own fields before the plan is parsed, so a plan means the
//! same whichever spelling it used and its digest does not depend on the spelling.
//!
//! - `max_steps` → `steps`; `save_steps` → `checkpoints.every`; `save_total_limit` →
//!   `checkpoints.keep_last` (`null`, keep all, → 0);
//! - `model.lora.target_modules` as a regular expression → `model.lora.target_regex` (with
//!   `targets` empty); `layers_to_transform` as one index → a list of one;
//! - `grpo.epsilon` → `grpo.epsilon_low`, and `grpo.epsilon_high` unless it is given (TRL's
//!   `epsilon_high` defaults to `epsilon`);
//! - `optimizer.lr_scheduler_type` → `optimizer.decay`: `linear`, `cosine`,
//!   `constant_with_warmup`, or `constant`, which in transformers ignores warm-up and so is
//!   refused beside one;
//! - `optimizer.warmup_ratio` → `optimizer.warmup_steps` = ⌈ratio · steps⌉, as transformers'
//!   `get_warmup_steps` counts them;
//! - TRL fields not offered (`sync_ref_model`, which TRL itself refuses with a PEFT model,
//!   `generation_batch_size`, `steps_per_generation`, `multi_objective_aggregation`) are dropped
//!   at the value that changes nothing and otherwise refused, saying what to use instead.

use serde_json::{Map, Value};

/// A field and what is wrong with it.
pub(crate) type Refusal = (String, String);

fn refuse(field: &str, message: impl Into<String>) -> Refusal {
    (field.to_owned(), message.into())
}

/// Moves `from` to `to` in `object`, refusing both at once.
fn rename(object: &mut Map<String, Value>, from: &str, to: &str, at: &str) -> Result<(), Refusal> {
    if let Some(value) = object.remove(from) {
        if object.contains_key(to) {
            return Err(refuse(
                &format!("{at}{from}"),
                format!("give `{from}` or `{to}`, not both"),
            ));
        }
        object.insert(to.to_owned(), value);
    }
    Ok(())
}

/// Rewrites TRL's spellings in the plan `plan` into its own fields.
pub(crate) fn normalise(plan: &mut Value) -> Result<(), Refusal> {
    let Some(top) = plan.as_object_mut() else {
        return Ok(());
    };
    rename(top, "max_steps", "steps", "")?;
    for (trl, own) in [("save_steps", "every"), ("save_total_limit", "keep_last")] {
        let Some(mut value) = top.remove(trl) else {
            continue;
        };
        if trl == "save_total_limit" && value.is_null() {
            value = Value::from(0);
        }
        let checkpoints = top
            .entry("checkpoints")
            .or_insert_with(|| Value::Object(Map::new()));
        match checkpoints.as_object_mut() {
            Some(c) if !c.contains_key(own) => {
                c.insert(own.to_owned(), value);
            }
            _ => {
                return Err(refuse(
                    trl,
                    format!("give `{trl}` or `checkpoints.{own}`, not both"),
                ));
            }
        }
    }
    if let Some(lora) = top
        .get_mut("model")
        .and_then(|m| m.get_mut("lora"))
        .and_then(Value::as_object_mut)
    {
        lora_selection(lora)?;
    }
    let steps = top.get("steps").and_then(Value::as_u64);
    if let Some(grpo) = top.get_mut("grpo").and_then(Value::as_object_mut) {
        if let Some(epsilon) = grpo.get("epsilon").cloned() {
            rename(grpo, "epsilon", "epsilon_low", "grpo.")?;
            grpo.entry("epsilon_high").or_insert(epsilon);
        }
        not_offered(grpo)?;
    }
    let Some(optimizer) = top.get_mut("optimizer").and_then(Value::as_object_mut) else {
        return Ok(());
    };
    if let Some(kind) = optimizer.remove("lr_scheduler_type") {
        let field = "optimizer.lr_scheduler_type";
        if optimizer.contains_key("decay") {
            return Err(refuse(
                field,
                "give `lr_scheduler_type` or `decay`, not both",
            ));
        }
        let decay = match kind.as_str() {
            Some(d @ ("linear" | "cosine")) => d,
            Some("constant_with_warmup") => "constant",
            Some("constant") => {
                if optimizer.contains_key("warmup_steps") || optimizer.contains_key("warmup_ratio")
                {
                    return Err(refuse(
                        field,
                        "`constant` ignores warm-up in transformers: use `constant_with_warmup`",
                    ));
                }
                "constant"
            }
            _ => {
                return Err(refuse(
                    field,
                    format!(
                        "{kind} is not one of `linear`, `cosine`, `constant`, `constant_with_warmup`"
                    ),
                ));
            }
        };
        optimizer.insert("decay".to_owned(), decay.into());
    }
    if let Some(ratio) = optimizer.remove("warmup_ratio") {
        let field = "optimizer.warmup_ratio";
        if optimizer.contains_key("warmup_steps") {
            return Err(refuse(
                field,
                "give `warmup_ratio` or `warmup_steps`, not both",
            ));
        }
        let ratio = ratio
            .as_f64()
            .filter(|r| (0.0..=1.0).contains(r))
            .ok_or_else(|| refuse(field, format!("{ratio} must be a number in [0, 1]")))?;
        let steps = steps.ok_or_else(|| refuse(field, "needs the plan's `steps`"))?;
        let warmup = (ratio * steps as f64).ceil() as u64;
        optimizer.insert("warmup_steps".to_owned(), warmup.into());
    }
    Ok(())
}

/// TRL `GRPOConfig` fields not offered here: at the value that changes nothing (TRL's default,
/// or what this trainer does anyway) each is dropped; any other value is refused, saying what to
/// use instead.
fn not_offered(grpo: &mut Map<String, Value>) -> Result<(), Refusal> {
    let count = |key: &str, default: u64| grpo.get(key).and_then(Value::as_u64).unwrap_or(default);
    let episodes = count("tasks_per_step", 4).saturating_mul(count("num_generations", 8));
    let accumulation = count("gradient_accumulation_steps", 1);
    let sync = "the reference is the base model throughout, as in TRL with a PEFT model (whose \
                GRPOTrainer refuses `sync_ref_model` then); lower `grpo.beta` for a looser reference";
    let batches = "each step generates its own batch (`tasks_per_step` × `num_generations` \
                   episodes) and makes `num_iterations` updates on it: set those instead";
    let rules: [(&str, Value, &str); 5] = [
        ("sync_ref_model", false.into(), sync),
        ("ref_model_mixup_alpha", 0.6.into(), sync),
        ("ref_model_sync_steps", 512.into(), sync),
        ("generation_batch_size", episodes.into(), batches),
        ("steps_per_generation", accumulation.into(), batches),
    ];
    for (key, harmless, instead) in rules {
        let same = |value: &Value| match (value.as_f64(), harmless.as_f64()) {
            (Some(a), Some(b)) => a == b,
            _ => *value == harmless,
        };
        if let Some(value) = grpo.remove(key)
            && !same(&value)
        {
            return Err(refuse(
                &format!("grpo.{key}"),
                format!("{value}: {instead}"),
            ));
        }
    }
    if let Some(value) = grpo.remove("multi_objective_aggregation")
        && value.as_str() != Some("sum_then_normalize")
    {
        return Err(refuse(
            "grpo.multi_objective_aggregation",
            format!(
                "{value}: only `sum_then_normalize` (TRL's default: weighted rewards summed, then \
                 normalised as `scale_rewards` says) is offered yet"
            ),
        ));
    }
    Ok(())
}

/// PEFT's `target_modules` as one string that is neither a projection's name nor
/// `"all-linear"` is a regular expression: it becomes `target_regex` (and `targets` empty);
/// `layers_to_transform` as one index becomes a list of one.
fn lora_selection(lora: &mut Map<String, Value>) -> Result<(), Refusal> {
    for name in ["target_modules", "targets"] {
        let regex = lora
            .get(name)
            .and_then(Value::as_str)
            .filter(|s| *s != "all-linear" && !crate::vocabulary::LORA_TARGETS.contains(s));
        if let Some(regex) = regex.map(str::to_owned) {
            if lora.contains_key("target_regex") {
                return Err(refuse(
                    "model.lora.target_regex",
                    format!("give `{name}` or `target_regex`, not both"),
                ));
            }
            lora.remove(name);
            lora.insert("target_regex".to_owned(), regex.into());
        }
    }
    if lora.contains_key("target_regex")
        && !lora.contains_key("targets")
        && !lora.contains_key("target_modules")
    {
        lora.insert("targets".to_owned(), Value::Array(Vec::new()));
    }
    if let Some(layer) = lora
        .get("layers_to_transform")
        .filter(|v| v.is_number())
        .cloned()
    {
        lora.insert("layers_to_transform".to_owned(), Value::Array(vec![layer]));
    }
    Ok(())
}
