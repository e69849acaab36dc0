//! The `evaluation` section: the checkpoints a finished run adopts, its DEV and HELD-OUT task
//! sets, the retention check and what counts as a solved episode.

use std::path::PathBuf;

use serde::{Deserialize, Serialize};

use super::{is_true, one_f64};

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
