//! The `environment` section: the backend (fixture tasks, an OpenEnv or NeMo Gym server, or a
//! dataset), a dataset's reward functions and their built-in rules, and the fixture tasks.

use std::path::PathBuf;

use serde::{Deserialize, Serialize};

use super::one_f64;
use crate::FixtureKind;

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
