//! The `grpo` section: sampling, advantages, clipping, the loss variants and adaptive entropy
//! control, with TRL's defaults and the tests that leave a default out of the serialised plan.

use serde::{Deserialize, Serialize};

use super::{is_one, is_true, is_zero, is_zero_f64};
use crate::{ImportanceSamplingLevel, LossType, PromptFormat, ScaleRewards};

/// GRPO settings; defaults follow TRL.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields, default)]
pub struct Grpo {
    /// Tasks per step.
    pub tasks_per_step: usize,
    /// G: episodes per task (≥ 2).
    pub num_generations: usize,
    /// Sampling temperature (> 0), also applied when scoring.
    pub temperature: f64,
    /// Keep only the `top_k` likeliest tokens when sampling (TRL's `top_k`); 0 disables it.
    #[serde(skip_serializing_if = "is_zero")]
    pub top_k: usize,
    /// Nucleus mass in (0, 1].
    pub top_p: f64,
    /// Leave episodes cut by a token limit (no stop token) out of the loss (TRL's
    /// `mask_truncated_completions`).
    #[serde(skip_serializing_if = "std::ops::Not::not")]
    pub mask_truncated_completions: bool,
    /// Drop tokens less likely than `min_p` times the likeliest (TRL's `min_p`), in [0, 1); 0
    /// disables it.
    #[serde(skip_serializing_if = "is_zero_f64")]
    pub min_p: f64,
    /// transformers' repetition penalty when sampling (TRL's `repetition_penalty`; > 0, 1 is
    /// off): the logits of tokens already in the episode are divided by it (multiplied when
    /// negative). Scoring is not penalised, as in TRL.
    #[serde(skip_serializing_if = "is_one")]
    pub repetition_penalty: f64,
    /// Most completion tokens per episode (all turns).
    pub max_completion_length: usize,
    /// Most tokens per policy turn.
    pub max_turn_tokens: usize,
    /// Most policy turns per episode.
    pub max_turns: usize,
    /// A system message before each task.
    pub system_prompt: Option<String>,
    /// `chat` (default) or `plain`.
    #[serde(skip_serializing_if = "PromptFormat::is_chat")]
    pub prompt_format: PromptFormat,
    /// Reward scaling.
    pub scale_rewards: ScaleRewards,
    /// Leave-one-out baseline.
    pub leave_one_out: bool,
    /// Added to the std before dividing.
    pub advantage_epsilon: f64,
    /// Lower clip.
    pub epsilon_low: f64,
    /// Upper clip.
    pub epsilon_high: f64,
    /// KL weight β ≥ 0.
    pub beta: f64,
    /// The objective and its aggregation (TRL's `loss_type`).
    pub loss_type: LossType,
    /// `token` (default) or `sequence` (GSPO) importance weights.
    #[serde(skip_serializing_if = "ImportanceSamplingLevel::is_token")]
    pub importance_sampling_level: ImportanceSamplingLevel,
    /// Two-sided clipping: cap the unclipped importance weight at δ (TRL's `delta`, > 1).
    #[serde(skip_serializing_if = "Option::is_none")]
    pub delta: Option<f64>,
    /// Multiply the KL term by the importance weight (TRL's `use_bias_correction_kl`, default
    /// true as in TRL 1.16).
    #[serde(skip_serializing_if = "is_true")]
    pub use_bias_correction_kl: bool,
    /// `sapo`'s gate temperature for positive advantages (1.0).
    #[serde(skip_serializing_if = "is_one")]
    pub sapo_temperature_pos: f64,
    /// `sapo`'s gate temperature for the others (1.05).
    #[serde(skip_serializing_if = "is_sapo_neg_default")]
    pub sapo_temperature_neg: f64,
    /// `vespo`'s power k for A ≥ 0 (2.0).
    #[serde(skip_serializing_if = "is_two")]
    pub vespo_k_pos: f64,
    /// `vespo`'s decay λ for A ≥ 0 (3.0).
    #[serde(skip_serializing_if = "is_three")]
    pub vespo_lambda_pos: f64,
    /// `vespo`'s power k for A < 0 (3.0).
    #[serde(skip_serializing_if = "is_three")]
    pub vespo_k_neg: f64,
    /// `vespo`'s decay λ for A < 0 (2.0).
    #[serde(skip_serializing_if = "is_two")]
    pub vespo_lambda_neg: f64,
    /// Leave out sequences with A < 0 whose mean `logπ_old − logπ` exceeds this (TRL's
    /// `off_policy_mask_threshold`, DeepSeek-V3.2's δ).
    #[serde(skip_serializing_if = "Option::is_none")]
    pub off_policy_mask_threshold: Option<f64>,
    /// Keep only the top ρ quantile of each micro-batch's tokens by entropy in the loss (TRL's
    /// `top_entropy_quantile`; 1 keeps all, the paper uses 0.2).
    #[serde(skip_serializing_if = "is_one")]
    pub top_entropy_quantile: f64,
    /// Weight of the entropy bonus, `loss − coef · mean entropy` (TRL's `entropy_coef`; 0 off);
    /// with adaptive control, its starting value.
    #[serde(skip_serializing_if = "is_zero_f64")]
    pub entropy_coef: f64,
    /// Adaptive entropy control (Skywork-OR1, TRL's `use_adaptive_entropy`): after each
    /// optimiser step the coefficient moves by `entropy_coef_delta` within
    /// [`entropy_coef_min`, `entropy_coef_max`], up when the step's mean entropy was at most
    /// `entropy_target`, down otherwise, and the bonus applies only while it was.
    #[serde(skip_serializing_if = "is_false")]
    pub use_adaptive_entropy: bool,
    /// The adaptive coefficient's floor (TRL 0).
    #[serde(skip_serializing_if = "is_zero_f64")]
    pub entropy_coef_min: f64,
    /// The adaptive coefficient's ceiling (TRL 1).
    #[serde(skip_serializing_if = "is_entropy_coef_max")]
    pub entropy_coef_max: f64,
    /// The adaptive coefficient's step (TRL 0.005).
    #[serde(skip_serializing_if = "is_entropy_coef_delta")]
    pub entropy_coef_delta: f64,
    /// The mean token entropy, in nats, the adaptive control aims at (TRL 0.2).
    #[serde(skip_serializing_if = "is_entropy_target")]
    pub entropy_target: f64,
    /// μ.
    pub num_iterations: usize,
    /// Micro-batches per optimiser step (gradients summed).
    pub gradient_accumulation_steps: usize,
}

impl Default for Grpo {
    fn default() -> Self {
        Self {
            tasks_per_step: 4,
            num_generations: 8,
            temperature: 1.0,
            top_k: 0,
            top_p: 1.0,
            mask_truncated_completions: false,
            min_p: 0.0,
            repetition_penalty: 1.0,
            max_completion_length: 256,
            max_turn_tokens: 256,
            max_turns: 1,
            system_prompt: None,
            prompt_format: PromptFormat::Chat,
            scale_rewards: ScaleRewards::Group,
            leave_one_out: false,
            advantage_epsilon: 1e-4,
            epsilon_low: 0.2,
            epsilon_high: 0.2,
            beta: 0.0,
            loss_type: LossType::Dapo,
            importance_sampling_level: ImportanceSamplingLevel::Token,
            delta: None,
            use_bias_correction_kl: true,
            sapo_temperature_pos: 1.0,
            sapo_temperature_neg: SAPO_TEMPERATURE_NEG,
            vespo_k_pos: 2.0,
            vespo_lambda_pos: 3.0,
            vespo_k_neg: 3.0,
            vespo_lambda_neg: 2.0,
            off_policy_mask_threshold: None,
            top_entropy_quantile: 1.0,
            entropy_coef: 0.0,
            use_adaptive_entropy: false,
            entropy_coef_min: 0.0,
            entropy_coef_max: ENTROPY_COEF_MAX,
            entropy_coef_delta: ENTROPY_COEF_DELTA,
            entropy_target: ENTROPY_TARGET,
            num_iterations: 1,
            gradient_accumulation_steps: 1,
        }
    }
}

fn is_two(v: &f64) -> bool {
    *v == 2.0
}

fn is_false(v: &bool) -> bool {
    !*v
}

fn is_entropy_coef_max(v: &f64) -> bool {
    *v == ENTROPY_COEF_MAX
}

fn is_entropy_coef_delta(v: &f64) -> bool {
    *v == ENTROPY_COEF_DELTA
}

fn is_entropy_target(v: &f64) -> bool {
    *v == ENTROPY_TARGET
}

/// TRL 1.16's defaults for adaptive entropy control.
const ENTROPY_COEF_MAX: f64 = 1.0;
const ENTROPY_COEF_DELTA: f64 = 0.005;
const ENTROPY_TARGET: f64 = 0.2;

fn is_three(v: &f64) -> bool {
    *v == 3.0
}

/// TRL's `sapo_temperature_neg`.
const SAPO_TEMPERATURE_NEG: f64 = 1.05;

fn is_sapo_neg_default(v: &f64) -> bool {
    *v == SAPO_TEMPERATURE_NEG
}
