//! The plan's fields and their defaults (TRL's where TRL has one).

use std::path::PathBuf;

use serde::{Deserialize, Serialize};

use crate::{
    Decay, Dtype, FixtureKind, ImportanceSamplingLevel, LossType, PromptFormat, ScaleRewards,
};

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

/// The assessment of a finished run: the retained checkpoints to adopt, the DEV tasks that
/// select one of them, and the HELD-OUT tasks that only the final assessment sees.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct Evaluation {
    /// Steps whose checkpoints are adopted, ascending; each one the run saves (a multiple of
    /// `checkpoints.every`, or the last step).
    pub checkpoints: Vec<u64>,
    /// Checkpoint selection only.
    pub dev: TaskSet,
    /// The final agent assessment only (the selected checkpoint and the base model).
    pub held_out: TaskSet,
    /// Episodes per task.
    #[serde(default = "four")]
    pub num_generations: usize,
    /// Seed of the evaluation's sampling (the same for every checkpoint and the base).
    #[serde(default)]
    pub seed: u64,
    /// Most new tokens of a retention (MGSM) answer, decoded greedily.
    #[serde(default = "retention_tokens")]
    pub retention_max_new_tokens: usize,
    /// The retention set: a JSON-lines file in MGSM's format (`question`, `answer_number`,
    /// `lang` per line; relative to the plan file); absent, the twelve authored items.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub retention_file: Option<PathBuf>,
    /// Whether the MGSM retention check runs (`false` skips it).
    #[serde(default = "yes", skip_serializing_if = "is_true")]
    pub retention: bool,
    /// What counts as a solved episode, for DEV and HELD-OUT alike.
    #[serde(default, skip_serializing_if = "Solved::is_default")]
    pub solved: Solved,
}

impl Evaluation {
    /// An evaluation of `checkpoints` on `dev` and `held_out` with every other field at its
    /// default.
    pub fn with_defaults(checkpoints: Vec<u64>, dev: TaskSet, held_out: TaskSet) -> Self {
        Self {
            checkpoints,
            dev,
            held_out,
            num_generations: four(),
            seed: 0,
            retention_max_new_tokens: retention_tokens(),
            retention_file: None,
            retention: true,
            solved: Solved::default(),
        }
    }
}

/// What counts as a solved episode: its reward, or one reward function's own score, at least
/// `at_least`. The default, the episode's reward ≥ 1, fits rewards that give 1 for a full
/// solution; with weighted rewards name the one that says whether the task was done.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct Solved {
    /// The reward function whose own (unweighted) score decides, by its name in
    /// `environment.rewards`; absent, the episode's reward (the weighted sum).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub reward: Option<String>,
    /// The least score that counts as solved.
    #[serde(default = "one_f64")]
    pub at_least: f64,
}

impl Default for Solved {
    fn default() -> Self {
        Self {
            reward: None,
            at_least: 1.0,
        }
    }
}

impl Solved {
    fn is_default(&self) -> bool {
        *self == Self::default()
    }

    /// Whether an episode with `reward` and the reward functions' scores `parts` is solved.
    pub fn holds(&self, reward: f64, parts: &std::collections::BTreeMap<String, f64>) -> bool {
        match &self.reward {
            None => reward >= self.at_least,
            Some(name) => parts.get(name).is_some_and(|s| *s >= self.at_least),
        }
    }
}

impl std::fmt::Display for Solved {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match &self.reward {
            None => write!(f, "the episode's reward ≥ {}", self.at_least),
            Some(name) => write!(f, "reward `{name}`'s own score ≥ {}", self.at_least),
        }
    }
}

fn yes() -> bool {
    true
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

fn is_true(v: &bool) -> bool {
    *v
}

/// TRL's `sapo_temperature_neg`.
const SAPO_TEMPERATURE_NEG: f64 = 1.05;

fn is_sapo_neg_default(v: &f64) -> bool {
    *v == SAPO_TEMPERATURE_NEG
}

fn four() -> usize {
    4
}

fn retention_tokens() -> usize {
    64
}

/// Where a split's tasks come from.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(untagged, deny_unknown_fields)]
pub enum TaskSet {
    /// Drawn from the fixture family's split (fixture plans).
    Drawn {
        /// How many tasks.
        count: usize,
        /// Seed of the draw.
        seed: u64,
    },
    /// Listed in the backend's task format (reset payloads, dataset rows).
    Listed {
        /// The tasks.
        tasks: Vec<serde_json::Value>,
    },
}

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

/// The environment backend.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(tag = "backend", rename_all = "snake_case", deny_unknown_fields)]
pub enum Environment {
    /// The built-in fixture tasks (no service).
    Fixture {
        /// The tasks.
        tasks: FixtureTasks,
    },
    /// An OpenEnv environment server, run as an owned service (uvicorn serving its ASGI app).
    Openenv {
        /// The service's Python (with `openenv-core` and the environment's requirements).
        python: PathBuf,
        /// The folder holding the environment's package (for `openenv init echo_env`, the
        /// folder holding `echo_env/`).
        env_root: PathBuf,
        /// The environment's ASGI app as uvicorn names it, `MODULE:ATTRIBUTE` importable from
        /// `env_root` (default `echo_env.server.app:app`; `openenv init NAME` makes
        /// `NAME.server.app:app`).
        #[serde(default = "echo_app", skip_serializing_if = "is_echo_app")]
        app: String,
        /// The action field the policy's text goes into.
        #[serde(default = "message_field")]
        action_field: String,
        /// Sessions the server allows at once (the echo env allows one).
        #[serde(default = "one")]
        max_sessions: usize,
        /// Reset payloads, one per task.
        tasks: Vec<serde_json::Value>,
    },
    /// Your own prompts: JSON-lines files (one object per line with a `prompt` string and any
    /// columns the rewards read), scored by weighted built-in reward rules. Paths are relative
    /// to the plan file.
    Dataset {
        /// The TRAIN rows.
        train: PathBuf,
        /// DEV rows (`evaluation.dev` may draw from them).
        #[serde(default, skip_serializing_if = "Option::is_none")]
        dev: Option<PathBuf>,
        /// HELD-OUT rows (`evaluation.held_out` may draw from them).
        #[serde(default, skip_serializing_if = "Option::is_none")]
        held_out: Option<PathBuf>,
        /// The reward functions; an episode's reward is their weighted sum.
        rewards: Vec<Reward>,
    },
    /// A NeMo Gym resources server (`example_single_tool_call`), run as an owned service.
    Nemo {
        /// The service's Python (with `nemo-gym` installed).
        python: PathBuf,
        /// The resources server's folder.
        server_dir: PathBuf,
        /// The server's own config fields (a judge model, data paths: what its config class
        /// declares), merged into the instance block the bridge writes; `entrypoint`, `host`,
        /// `port` and `domain` are the bridge's.
        #[serde(default, skip_serializing_if = "serde_json::Map::is_empty")]
        server_config: serde_json::Map<String, serde_json::Value>,
        /// Dataset rows (`responses_create_params`, ...), one per task.
        tasks: Vec<serde_json::Value>,
    },
}

fn echo_app() -> String {
    "echo_env.server.app:app".to_owned()
}

/// Left out of the serialised plan when it is the default, so digests of plans written before
/// the field existed do not change.
fn is_echo_app(app: &str) -> bool {
    app == echo_app()
}

fn message_field() -> String {
    "message".to_owned()
}

fn one() -> usize {
    1
}

impl Environment {
    /// The backend's name, as the plan's `backend` and `--backend` spell it.
    pub fn backend(&self) -> &'static str {
        match self {
            Environment::Fixture { .. } => "fixture",
            Environment::Openenv { .. } => "openenv",
            Environment::Nemo { .. } => "nemo",
            Environment::Dataset { .. } => "dataset",
        }
    }

    /// The files a dataset plan reads (its TRAIN, DEV and HELD-OUT rows and its Python reward
    /// files); none for the other backends.
    pub fn dataset_files_mut(&mut self) -> Vec<&mut PathBuf> {
        match self {
            Environment::Dataset {
                train,
                dev,
                held_out,
                rewards,
            } => std::iter::once(train)
                .chain(dev.as_mut())
                .chain(held_out.as_mut())
                .chain(rewards.iter_mut().filter_map(|r| r.file.as_mut()))
                .collect(),
            _ => Vec::new(),
        }
    }
}

/// One reward function of the dataset backend: a built-in `rule` with its settings, weighted in
/// the episode's reward and logged on its own as `rewards/<name>/mean` and `/std` (TRL's names).
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct Reward {
    /// The name it is logged under (letters, digits, `_`, `-`).
    pub name: String,
    /// The rule.
    pub rule: RewardRule,
    /// Its weight in the episode's reward.
    #[serde(default = "one_f64")]
    pub weight: f64,
    /// The row's column holding the expected answer (`exact_match`, `final_number`,
    /// `tool_call`).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub column: Option<String>,
    /// The regular expression the completion must match somewhere (`regex`).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub pattern: Option<String>,
    /// The tag whose one `<tag>…</tag>` pair the completion must hold (`tag`).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub tag: Option<String>,
    /// Characters allowed before the penalty starts (`length_penalty`).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub max_chars: Option<usize>,
    /// The Python file holding the reward function (`python`; relative to the plan file).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub file: Option<PathBuf>,
    /// The function's name in `file` (`python`): TRL's `reward_funcs` signature, called as
    /// `f(prompts=[...], completions=[...], **columns)` and returning a list of floats.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub function: Option<String>,
    /// The interpreter that runs it (`python`; default `python3` on the PATH).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub python: Option<PathBuf>,
    /// Seconds one call (and the import) may take before the step fails (`python`; default
    /// 120).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub timeout_s: Option<u64>,
}

fn one_f64() -> f64 {
    1.0
}

/// The built-in reward rules. Each scores one completion (the policy's text) against its row.
///
/// Read from its name with an error that names the `rule` field and the accepted names (serde's
/// own message would lose the field inside the internally tagged `environment`).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "snake_case", try_from = "String")]
pub enum RewardRule {
    /// 1 when the completion, trimmed, equals the row's `column` (a string), else 0.
    ExactMatch,
    /// 1 when the completion's last number equals the row's `column` (a number or numeric
    /// string), else 0.
    FinalNumber,
    /// 1 when `pattern` matches somewhere in the completion, else 0.
    Regex,
    /// 1 when the completion holds exactly one `<tag>…</tag>` pair, else 0.
    Tag,
    /// 0 up to `max_chars` characters; beyond, `−(chars − max_chars) / max_chars`, at least −1.
    LengthPenalty,
    /// 1 when the completion is one JSON tool call (`{"name", "arguments"}`) equal to the row's
    /// `column`, else 0.
    ToolCall,
    /// Your own function in Python (`file`, `function`, optionally `python`), with TRL's
    /// `reward_funcs` signature, so one file serves both.
    Python,
}

impl TryFrom<String> for RewardRule {
    type Error = String;

    fn try_from(name: String) -> Result<Self, String> {
        let all = [
            Self::ExactMatch,
            Self::FinalNumber,
            Self::Regex,
            Self::Tag,
            Self::LengthPenalty,
            Self::ToolCall,
            Self::Python,
        ];
        let named = |r: &Self| {
            serde_json::to_value(r)
                .ok()
                .and_then(|v| v.as_str().map(str::to_owned))
        };
        all.iter()
            .find(|r| named(r).as_deref() == Some(name.as_str()))
            .copied()
            .ok_or_else(|| {
                let names: Vec<String> = all.iter().filter_map(named).collect();
                format!(
                    "reward `rule` `{name}` is unknown: use one of {}",
                    names.join(", ")
                )
            })
    }
}

impl RewardRule {
    /// The settings this rule needs.
    pub fn needs(self) -> &'static [&'static str] {
        match self {
            Self::ExactMatch | Self::FinalNumber | Self::ToolCall => &["column"],
            Self::Regex => &["pattern"],
            Self::Tag => &["tag"],
            Self::LengthPenalty => &["max_chars"],
            Self::Python => &["file", "function"],
        }
    }
}

/// Fixture tasks drawn from a seed.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct FixtureTasks {
    /// `arithmetic`, `tool_call`, `calculator`, `digits`, `word_problem` or `tool_use`.
    pub kind: FixtureKind,
    /// How many tasks.
    pub count: usize,
    /// Seed of the task list.
    pub seed: u64,
}

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
