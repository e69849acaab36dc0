//! The interface the trainer drives episodes through, whatever serves them (the built-in
//! fixture tasks, NeMo Gym, OpenEnv). Single-turn tasks take one step; multi-turn ones return
//! observations (tool results, environment messages) until `done`. The text of observations is
//! environment output: the trainer masks its tokens out of the loss.

use serde::{Deserialize, Serialize};
use serde_json::Value;

use crate::EnvError;

/// A task to run an episode on.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct Task {
    /// Stable id (for evidence and data cursors).
    pub id: String,
    /// What the environment needs to set the task up (its own format).
    pub payload: Value,
}

/// What the policy sees next.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct Observation {
    /// Text appended to the conversation (masked out of the loss).
    pub text: String,
    /// Raw environment data, for evidence.
    pub raw: Value,
}

/// The result of one step.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct StepOutcome {
    /// The next observation.
    pub observation: Observation,
    /// The reward of this step (the final reward when `done`).
    pub reward: f64,
    /// Whether the episode is over.
    pub done: bool,
}

/// An environment that runs episodes.
pub trait Environment {
    /// Starts an episode on `task` with `seed`; returns the first observation.
    fn reset(&mut self, task: &Task, seed: u64) -> Result<Observation, EnvError>;

    /// Applies the policy's output for this turn.
    fn step(&mut self, action: &str) -> Result<StepOutcome, EnvError>;

    /// Ends the episode and releases its session (a no-op when none is open).
    fn close(&mut self) -> Result<(), EnvError>;
}
