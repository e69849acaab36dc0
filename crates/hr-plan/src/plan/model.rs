//! The `model` section: the policy model (its folder or Hub id and base dtype) and its LoRA
//! adapters, with PEFT's defaults for what a plan leaves out.

use std::path::PathBuf;

use serde::{Deserialize, Serialize};

use super::is_zero_f64;
use crate::Dtype;

/// The policy model.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct Model {
    /// An HF model folder (config.json, model.safetensors, tokenizer.json); relative paths are
    /// relative to the plan file. May be left out when `hub_id` names a model in the local
    /// Hugging Face cache: reading the plan fills it with that model's snapshot folder.
    #[serde(default)]
    pub path: PathBuf,
    /// The model's Hugging Face Hub id (`Qwen/Qwen3-0.6B`): what adapters name as their
    /// `base_model_name_or_path`, and where to find the model when `path` is left out.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub hub_id: Option<String>,
    /// The dtype the frozen base's weight matrices live in (`f32`, `f16`, `bf16`; default
    /// `f32`). A plan means the same on every device: a device that cannot hold the dtype
    /// refuses the plan rather than running it in another.
    #[serde(default, skip_serializing_if = "Dtype::is_f32")]
    pub dtype: Dtype,
    /// The LoRA adapters that train.
    #[serde(default)]
    pub lora: Lora,
}

impl Model {
    /// What PEFT adapter files name as `base_model_name_or_path`: the Hub id when the plan has
    /// one (PEFT and transformers then find the model in any Hugging Face cache), else the model
    /// folder's absolute path.
    pub fn peft_base(&self) -> String {
        match &self.hub_id {
            Some(id) => id.clone(),
            None => std::path::absolute(&self.path)
                .unwrap_or_else(|_| self.path.clone())
                .display()
                .to_string(),
        }
    }
}

/// LoRA settings; what a plan leaves out takes PEFT's `LoraConfig` default (r 8, alpha 8, the
/// q and v projections: PEFT's choice for Llama, Mistral and Qwen).
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields, default)]
pub struct Lora {
    /// Rank (PEFT's `r` is accepted too).
    #[serde(alias = "r")]
    pub rank: usize,
    /// The update is scaled by `alpha / rank` (PEFT's `lora_alpha` is accepted too).
    #[serde(alias = "lora_alpha")]
    pub alpha: f64,
    /// Target module names (`q_proj`, `k_proj`, `v_proj`, `o_proj`, `gate_proj`, `up_proj`,
    /// `down_proj`, and Phi-3's fused `qkv_proj`, `gate_up_proj`); the model adapts those its
    /// family has, as PEFT does. PEFT's `target_modules` is accepted too, and so is its
    /// `"all-linear"` (alone or in the list), which names all nine (every linear layer but the
    /// LM head, in any family).
    #[serde(
        alias = "target_modules",
        deserialize_with = "crate::vocabulary::lora_targets"
    )]
    pub targets: Vec<String>,
    /// Rank-stabilised LoRA (PEFT's `use_rslora`): the update is scaled by `alpha / √rank`
    /// instead of `alpha / rank`; the adapter files say so, and PEFT loads them alike.
    #[serde(default, skip_serializing_if = "std::ops::Not::not")]
    pub use_rslora: bool,
    /// Weight-decomposed LoRA (PEFT's `use_dora`): each adapted projection also trains a
    /// magnitude per output row, `W' = m · (W + ΔW) / ‖W + ΔW‖`; the adapter files say so.
    #[serde(default, skip_serializing_if = "std::ops::Not::not")]
    pub use_dora: bool,
    /// LoRA dropout (PEFT's `lora_dropout` is accepted too): in training passes each adapter's
    /// input is zeroed with this probability, its masks drawn from a stream forked off the run's
    /// sampling stream; in `[0, 1)`, 0 (off) by default.
    #[serde(alias = "lora_dropout", default, skip_serializing_if = "is_zero_f64")]
    pub dropout: f64,
    /// PEFT's `layers_to_transform`: only these decoder layers get adapters (all when absent;
    /// one index is read as a list of one).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub layers_to_transform: Option<Vec<usize>>,
    /// PEFT's `target_modules` given as a regular expression (a string that is neither a
    /// projection's name nor `"all-linear"`): full-matched against each projection's module
    /// name, `model.layers.3.self_attn.q_proj`; `targets` is then empty.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub target_regex: Option<String>,
}

impl Default for Lora {
    fn default() -> Self {
        Self {
            rank: 8,
            alpha: 8.0,
            targets: vec!["q_proj".to_owned(), "v_proj".to_owned()],
            use_rslora: false,
            use_dora: false,
            dropout: 0.0,
            layers_to_transform: None,
            target_regex: None,
        }
    }
}
