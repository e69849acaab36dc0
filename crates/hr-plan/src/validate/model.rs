//! The `model` section's checks: the model's folder or Hub id, and its LoRA adapters' rank,
//! dropout, alpha and the projections they adapt.

use super::{at_most, limits};
use crate::PlanError;
use crate::vocabulary::LORA_TARGETS as TARGETS;

/// The model's folder or Hub id, and its LoRA settings.
pub(super) fn model(
    model: &crate::Model,
    check: &impl Fn(bool, &str, String) -> Result<(), PlanError>,
) -> Result<(), PlanError> {
    check(
        !model.path.as_os_str().is_empty() || model.hub_id.is_some(),
        "model.path",
        "must name an HF model folder (or leave it out and name a cached model by model.hub_id)"
            .to_owned(),
    )?;
    if let Some(id) = &model.hub_id {
        check(
            crate::hub_cache::is_hub_id(id),
            "model.hub_id",
            format!("{id:?} is not a Hugging Face model id such as \"Qwen/Qwen3-0.6B\""),
        )?;
    }
    check(
        model.lora.rank >= 1,
        "model.lora.rank",
        "must be at least 1".to_owned(),
    )?;
    at_most(
        model.lora.rank,
        limits::MAX_LORA_RANK,
        "model.lora.rank",
        check,
    )?;
    check(
        (0.0..1.0).contains(&model.lora.dropout),
        "model.lora.dropout",
        format!(
            "{} must be at least 0 and below 1 (PEFT's lora_dropout; 0 is off)",
            model.lora.dropout
        ),
    )?;
    check(
        model.lora.alpha.is_finite() && model.lora.alpha > 0.0,
        "model.lora.alpha",
        "must be > 0".to_owned(),
    )?;
    lora_selection(&model.lora, check)?;
    for t in &model.lora.targets {
        check(
            TARGETS.contains(&t.as_str()),
            "model.lora.targets",
            format!("`{t}` is not one of {TARGETS:?}"),
        )?;
    }
    Ok(())
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
