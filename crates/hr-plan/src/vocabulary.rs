//! The words plans, the trainer and the environments share: one definition each, imported
//! everywhere (no crate keeps its own copy to translate).

use serde::{Deserialize, Serialize};

/// How rewards are scaled after centring (TRL's `scale_rewards`: `group`, `batch` or `none`, or
/// as TRL also accepts, `true` for `group` and `false` for `none`).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "snake_case", try_from = "ScaleRewardsInput")]
pub enum ScaleRewards {
    /// Divide by the group's standard deviation (TRL's default).
    Group,
    /// Divide by the standard deviation of the whole batch.
    Batch,
    /// Do not divide (Dr. GRPO).
    None,
}

/// `scale_rewards` as a plan may spell it.
#[derive(Deserialize)]
#[serde(untagged)]
enum ScaleRewardsInput {
    Flag(bool),
    Word(String),
}

impl TryFrom<ScaleRewardsInput> for ScaleRewards {
    type Error = String;

    fn try_from(input: ScaleRewardsInput) -> Result<Self, String> {
        match input {
            ScaleRewardsInput::Flag(true) => Ok(Self::Group),
            ScaleRewardsInput::Flag(false) => Ok(Self::None),
            ScaleRewardsInput::Word(word) => match word.as_str() {
                "group" => Ok(Self::Group),
                "batch" => Ok(Self::Batch),
                "none" => Ok(Self::None),
                other => Err(format!(
                    "`{other}` is not one of `group`, `batch`, `none`, true (group), false (none)"
                )),
            },
        }
    }
}

/// The LoRA target names a plan accepts: most families' seven in module order, then Phi-3's
/// fused `qkv_proj` and `gate_up_proj`. `"all-linear"` names them all; a model adapts those it
/// has, as PEFT does.
pub(crate) const LORA_TARGETS: [&str; 9] = [
    "q_proj",
    "k_proj",
    "v_proj",
    "o_proj",
    "gate_proj",
    "up_proj",
    "down_proj",
    "qkv_proj",
    "gate_up_proj",
];

/// `model.lora.targets`: a list of module names, or PEFT's `"all-linear"` (alone or in the list)
/// for every one of [`LORA_TARGETS`].
pub(crate) fn lora_targets<'de, D: serde::Deserializer<'de>>(
    d: D,
) -> Result<Vec<String>, D::Error> {
    #[derive(Deserialize)]
    #[serde(untagged)]
    enum Targets {
        One(String),
        Many(Vec<String>),
    }
    let names = match Targets::deserialize(d)? {
        Targets::One(name) => vec![name],
        Targets::Many(names) => names,
    };
    if names.iter().any(|n| n == "all-linear") {
        return Ok(LORA_TARGETS.iter().map(|t| (*t).to_owned()).collect());
    }
    Ok(names)
}

/// The policy-gradient objective and how per-token losses become one number (TRL's
/// `loss_type`).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum LossType {
    /// Clipped surrogate; mean over each sequence's tokens, then over sequences (length-biased;
    /// the paper's form).
    Grpo,
    /// Clipped surrogate; sum over all tokens ÷ active tokens of this micro-batch.
    Bnpo,
    /// Clipped surrogate; sum over all tokens ÷ (sequences × max completion length).
    DrGrpo,
    /// Clipped surrogate; sum over all tokens ÷ active tokens of the whole accumulated batch
    /// (TRL's default).
    Dapo,
    /// MiniMax-M1: the importance weight clipped above at `epsilon_high` and detached, times the
    /// advantage and the log-prob; aggregated as `dapo`.
    Cispo,
    /// Soft Adaptive Policy Optimization: a sigmoid gate of temperature `sapo_temperature_pos`
    /// or `_neg` instead of the hard clip; aggregated as `grpo`.
    Sapo,
    /// Length-Unbiased Sequence Policy Optimization: the clipped surrogate summed over each
    /// sequence's tokens, then averaged over sequences (meant with sequence-level importance
    /// sampling).
    Luspo,
    /// Variational Sequence-Level Soft Policy Optimization: a Gamma weighting φ(w) of the
    /// sequence importance weight (`vespo_k_*`, `vespo_lambda_*`), detached, times the
    /// advantage and the log-prob; aggregated as `dapo`.
    Vespo,
}

impl LossType {
    /// Whether the objective is the clipped surrogate (whose clip ratios are logged).
    pub fn clips(self) -> bool {
        matches!(
            self,
            Self::Grpo | Self::Bnpo | Self::DrGrpo | Self::Dapo | Self::Luspo
        )
    }

    /// Whether the loss is a mean per micro-batch, divided by the accumulation steps (the
    /// others, `dapo`, `cispo` and `vespo`, divide by the whole accumulated batch's tokens).
    pub fn per_micro_batch(self) -> bool {
        !matches!(self, Self::Dapo | Self::Cispo | Self::Vespo)
    }
}

/// Whether importance weights are per token or one per sequence (TRL's
/// `importance_sampling_level`; `sequence` is GSPO).
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum ImportanceSamplingLevel {
    /// `exp(logπ − logπ_old)` per token (TRL's default).
    #[default]
    Token,
    /// `exp` of the mean of the sequence's active log-ratios, shared by its tokens (GSPO).
    Sequence,
}

impl ImportanceSamplingLevel {
    /// Whether this is the default (left out of the serialised plan).
    pub fn is_token(&self) -> bool {
        *self == Self::Token
    }
}

/// How a task's text becomes the prompt (TRL's conversational and standard dataset formats).
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum PromptFormat {
    /// The ChatML chat template (system and user turns, an open assistant turn): instruct models.
    #[default]
    Chat,
    /// The task's text as it is, tokenized without any template: base models. Single-turn only.
    Plain,
}

impl PromptFormat {
    /// Whether this is the default (left out of the serialised plan, so digests of plans written
    /// before the field existed do not change).
    pub fn is_chat(&self) -> bool {
        *self == Self::Chat
    }
}

/// The dtype the frozen base model's weight matrices are stored in (`model.dtype`). LoRA
/// weights, gradients, optimizer moments and activations stay f32 whatever it is: a half
/// dtype halves the base's memory at the cost of rounding its weights.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum Dtype {
    /// 32-bit floats: the weights exactly as an f32 checkpoint holds them.
    #[default]
    F32,
    /// IEEE half precision (11-bit significand, range ±65504).
    F16,
    /// bfloat16 (8-bit significand, f32's range): how most checkpoints of 0.5B–8B models ship.
    Bf16,
}

impl Dtype {
    /// Whether this is the default (left out of the serialised plan, so digests of plans written
    /// before the field existed do not change).
    pub fn is_f32(&self) -> bool {
        *self == Self::F32
    }

    /// The plan's word for it (`f32`, `f16`, `bf16`).
    pub fn name(self) -> &'static str {
        match self {
            Self::F32 => "f32",
            Self::F16 => "f16",
            Self::Bf16 => "bf16",
        }
    }
}

impl std::str::FromStr for Dtype {
    type Err = String;

    fn from_str(s: &str) -> Result<Self, String> {
        [Self::F32, Self::F16, Self::Bf16]
            .into_iter()
            .find(|d| d.name() == s)
            .ok_or_else(|| format!("unknown dtype `{s}`; use f32, f16 or bf16"))
    }
}

impl std::fmt::Display for Dtype {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(self.name())
    }
}

/// The learning rate's decay after warm-up.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum Decay {
    /// Keep the peak rate.
    Constant,
    /// Half a cosine from the peak to 0 at the last step.
    Cosine,
    /// A straight line from the peak to 0 at the end of the run (TRL's default
    /// `lr_scheduler_type`, as transformers' `get_linear_schedule_with_warmup`).
    Linear,
}

/// A family of built-in fixture tasks (the fixture backend of `hr-env`).
///
/// Read from its name with an error that names the `kind` field and the accepted names (serde's
/// own message would lose the field inside the internally tagged `environment`).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "snake_case", try_from = "String")]
pub enum FixtureKind {
    /// `a + b` with small operands, answered directly.
    Arithmetic,
    /// A weather request to answer with one tool call.
    ToolCall,
    /// `a + b` with an `add` tool available (two turns).
    Calculator,
    /// "Answer with digits only": rewarded by the share of digit characters.
    Digits,
    /// Authored grade-school word problems (`hr-env/tasks/word_problems.jsonl`), answered
    /// with a number.
    WordProblem,
    /// Authored requests answered with one call of five described tools
    /// (`hr-env/tasks/tool_calls.jsonl`).
    ToolUse,
}

impl FixtureKind {
    /// Every kind.
    pub const ALL: [Self; 6] = [
        Self::Arithmetic,
        Self::ToolCall,
        Self::Calculator,
        Self::Digits,
        Self::WordProblem,
        Self::ToolUse,
    ];

    /// The kind a plan names, if any.
    pub fn from_name(name: &str) -> Option<Self> {
        Self::ALL.into_iter().find(|k| k.name() == name)
    }

    /// The kind's name in plans and task ids.
    pub fn name(self) -> &'static str {
        match self {
            Self::Arithmetic => "arithmetic",
            Self::ToolCall => "tool_call",
            Self::Calculator => "calculator",
            Self::Digits => "digits",
            Self::WordProblem => "word_problem",
            Self::ToolUse => "tool_use",
        }
    }
}

impl TryFrom<String> for FixtureKind {
    type Error = String;

    fn try_from(name: String) -> Result<Self, String> {
        Self::from_name(&name).ok_or_else(|| {
            let names: Vec<&str> = Self::ALL.iter().map(|k| k.name()).collect();
            format!(
                "fixture task `kind` `{name}` is unknown: use one of {}",
                names.join(", ")
            )
        })
    }
}
