//! The plan's fields, their defaults (TRL's where TRL has one) and their checks.

use std::path::{Path, PathBuf};

use serde::{Deserialize, Serialize};

use crate::PlanError;

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
    /// How `hessian-recipes evaluate` assesses the finished run; not part of training (left out
    /// of the digests a checkpoint is bound to).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub evaluation: Option<Evaluation>,
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
    /// relative to the plan file.
    pub path: PathBuf,
    /// The LoRA adapters that train.
    #[serde(default)]
    pub lora: Lora,
}

/// LoRA settings.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct Lora {
    /// Rank.
    pub rank: usize,
    /// `lora_alpha`.
    pub alpha: f64,
    /// Target module names (`q_proj`, `k_proj`, `v_proj`, `o_proj`, `gate_proj`, `up_proj`,
    /// `down_proj`).
    pub targets: Vec<String>,
}

impl Default for Lora {
    fn default() -> Self {
        Self {
            rank: 8,
            alpha: 16.0,
            targets: vec!["q_proj".to_owned(), "v_proj".to_owned()],
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
    /// An OpenEnv environment server (the `openenv init echo_env` template), run as an owned
    /// service.
    Openenv {
        /// The service's Python (with `openenv-core` installed).
        python: PathBuf,
        /// The environment's folder (holding `echo_env/`).
        env_root: PathBuf,
        /// The action field the policy's text goes into.
        #[serde(default = "message_field")]
        action_field: String,
        /// Sessions the server allows at once (the echo env allows one).
        #[serde(default = "one")]
        max_sessions: usize,
        /// Reset payloads, one per task.
        tasks: Vec<serde_json::Value>,
    },
    /// A NeMo Gym resources server (`example_single_tool_call`), run as an owned service.
    Nemo {
        /// The service's Python (with `nemo-gym` installed).
        python: PathBuf,
        /// The resources server's folder.
        server_dir: PathBuf,
        /// Dataset rows (`responses_create_params`, ...), one per task.
        tasks: Vec<serde_json::Value>,
    },
}

fn message_field() -> String {
    "message".to_owned()
}

fn one() -> usize {
    1
}

/// Fixture tasks drawn from a seed.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct FixtureTasks {
    /// `arithmetic`, `tool_call`, `calculator` or `digits`.
    pub kind: String,
    /// How many tasks.
    pub count: usize,
    /// Seed of the task list.
    pub seed: u64,
}

/// How rewards are scaled after centring (TRL's `scale_rewards`).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum ScaleRewards {
    /// Divide by the group's standard deviation (TRL's default).
    Group,
    /// Divide by the standard deviation of the whole batch.
    Batch,
    /// Do not divide (Dr. GRPO).
    None,
}

/// How per-token losses become one number (TRL's `loss_type`).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum LossType {
    /// Mean over each sequence's tokens, then over sequences (length-biased; the paper's form).
    Grpo,
    /// Sum over all tokens ÷ active tokens of this batch.
    Bnpo,
    /// Sum over all tokens ÷ (sequences × max completion length).
    DrGrpo,
    /// Sum over all tokens ÷ active tokens of the whole accumulated batch (TRL's default).
    Dapo,
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

/// The learning rate's decay after warm-up.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum Decay {
    /// Keep the peak rate.
    Constant,
    /// Half a cosine from the peak to 0 at the last step.
    Cosine,
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
    /// Nucleus mass in (0, 1].
    pub top_p: f64,
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
    /// Aggregation.
    pub loss_type: LossType,
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
            top_p: 1.0,
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
    pub beta1: f64,
    /// β2.
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
}

impl Default for Checkpoints {
    fn default() -> Self {
        Self {
            every: 1,
            raw_rollout_steps: 2,
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

const TARGETS: [&str; 7] = [
    "q_proj",
    "k_proj",
    "v_proj",
    "o_proj",
    "gate_proj",
    "up_proj",
    "down_proj",
];
const FIXTURE_KINDS: [&str; 4] = ["arithmetic", "tool_call", "calculator", "digits"];

impl Plan {
    /// Reads, parses and checks a plan; `model.path` is resolved against the plan's folder.
    pub fn from_file(path: &Path) -> Result<Self, PlanError> {
        let text = std::fs::read_to_string(path).map_err(|source| PlanError::Io {
            path: path.to_owned(),
            source,
        })?;
        let mut plan = Self::parse(path, &text)?;
        if plan.model.path.is_relative()
            && let Some(dir) = path.parent()
        {
            plan.model.path = dir.join(&plan.model.path);
        }
        Ok(plan)
    }

    /// Makes every path in the plan (the model folder, a service's Python and folder) absolute
    /// against the current folder, so a copy of the plan reads the same files from anywhere.
    pub fn make_paths_absolute(&mut self) -> std::io::Result<()> {
        let absolute = |p: &mut PathBuf| -> std::io::Result<()> {
            *p = std::path::absolute(&*p)?;
            Ok(())
        };
        absolute(&mut self.model.path)?;
        match &mut self.environment {
            Environment::Fixture { .. } => {}
            Environment::Openenv {
                python, env_root, ..
            } => {
                absolute(python)?;
                absolute(env_root)?;
            }
            Environment::Nemo {
                python, server_dir, ..
            } => {
                absolute(python)?;
                absolute(server_dir)?;
            }
        }
        Ok(())
    }

    /// Parses and checks plan text; `path` only names the file in errors.
    pub fn parse(path: &Path, text: &str) -> Result<Self, PlanError> {
        let de = &mut serde_json::Deserializer::from_str(text);
        let plan: Plan = serde_path_to_error::deserialize(de).map_err(|e| {
            let field = e.path().to_string();
            PlanError::Field {
                path: path.to_owned(),
                field: if field == "." {
                    "(plan)".to_owned()
                } else {
                    field
                },
                message: e.into_inner().to_string(),
            }
        })?;
        plan.validate(path)?;
        Ok(plan)
    }

    fn validate(&self, path: &Path) -> Result<(), PlanError> {
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
        let g = &self.grpo;
        let o = &self.optimizer;
        check(
            self.schema_version == 1,
            "schema_version",
            format!("{} is not supported; use 1", self.schema_version),
        )?;
        check(
            !self.name.is_empty()
                && self
                    .name
                    .chars()
                    .all(|c| c.is_ascii_alphanumeric() || "-_.".contains(c)),
            "name",
            "must be non-empty and use only letters, digits, '-', '_' and '.'".to_owned(),
        )?;
        check(
            !self.model.path.as_os_str().is_empty(),
            "model.path",
            "must name an HF model folder".to_owned(),
        )?;
        check(
            self.model.lora.rank >= 1,
            "model.lora.rank",
            "must be at least 1".to_owned(),
        )?;
        check(
            self.model.lora.alpha.is_finite() && self.model.lora.alpha > 0.0,
            "model.lora.alpha",
            "must be > 0".to_owned(),
        )?;
        check(
            !self.model.lora.targets.is_empty(),
            "model.lora.targets",
            format!("name at least one of {TARGETS:?}"),
        )?;
        for t in &self.model.lora.targets {
            check(
                TARGETS.contains(&t.as_str()),
                "model.lora.targets",
                format!("`{t}` is not one of {TARGETS:?}"),
            )?;
        }
        match &self.environment {
            Environment::Openenv {
                tasks,
                max_sessions,
                ..
            } => {
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
            }
            Environment::Nemo { tasks, .. } => {
                check(
                    !tasks.is_empty(),
                    "environment.tasks",
                    "list at least one dataset row".to_owned(),
                )?;
            }
            Environment::Fixture { tasks } => {
                check(
                    FIXTURE_KINDS.contains(&tasks.kind.as_str()),
                    "environment.tasks.kind",
                    format!("`{}` is not one of {FIXTURE_KINDS:?}", tasks.kind),
                )?;
                check(
                    tasks.count >= 1,
                    "environment.tasks.count",
                    "must be at least 1".to_owned(),
                )?;
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
        check(
            g.num_iterations >= 1,
            "grpo.num_iterations",
            "must be at least 1".to_owned(),
        )?;
        check(
            o.learning_rate.is_finite() && o.learning_rate > 0.0,
            "optimizer.learning_rate",
            "must be > 0".to_owned(),
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
        check(self.steps >= 1, "steps", "must be at least 1".to_owned())?;
        check(
            self.checkpoints.every >= 1,
            "checkpoints.every",
            "must be at least 1".to_owned(),
        )?;
        if let Some(e) = &self.evaluation {
            check(
                !e.checkpoints.is_empty() && e.checkpoints.windows(2).all(|w| w[0] < w[1]),
                "evaluation.checkpoints",
                "list at least one step, ascending, e.g. [64, 128, 256]".to_owned(),
            )?;
            for step in &e.checkpoints {
                check(
                    (1..=self.steps).contains(step)
                        && (step % self.checkpoints.every == 0 || *step == self.steps),
                    "evaluation.checkpoints",
                    format!(
                        "step {step} is not saved by this run: use multiples of checkpoints.every \
                         ({}) up to steps ({}), or the last step",
                        self.checkpoints.every, self.steps
                    ),
                )?;
            }
            for (field, set) in [
                ("evaluation.dev", &e.dev),
                ("evaluation.held_out", &e.held_out),
            ] {
                match set {
                    TaskSet::Drawn { count, .. } => {
                        check(
                            matches!(self.environment, Environment::Fixture { .. }),
                            field,
                            "drawn tasks ({count, seed}) exist only for the fixture backend; \
                             list them as {\"tasks\": [...]}"
                                .to_owned(),
                        )?;
                        check(*count >= 1, field, "count must be at least 1".to_owned())?;
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
            check(
                e.retention_max_new_tokens >= 1,
                "evaluation.retention_max_new_tokens",
                "must be at least 1".to_owned(),
            )?;
        }
        Ok(())
    }
}
