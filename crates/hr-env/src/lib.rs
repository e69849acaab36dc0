//! The environment side of an episode, without networking: the [`Environment`] trait the
//! trainer drives episodes through, the [`Task`]/[`Observation`]/[`StepOutcome`] it exchanges,
//! the [`EnvError`] every environment reports, and the built-in fixture environment (generated
//! arithmetic, tool-call, calculator and digits task families and authored word-problem and
//! tool-use ones, each with TRAIN/DEV/HELD-OUT splits), which needs no service, and the dataset
//! backend (your own JSON-lines prompts scored by weighted built-in reward rules per episode, or
//! by your own Python functions in child processes speaking JSON lines over pipes, one call per
//! generation batch as TRL makes it). Rewards are scored by
//! `hr-eval`'s one scoring rule.
//!
//! [`GroupWatchdog`] keeps a child's process group from outliving the run that started it.
//!
//! Not here: the service-backed environments (NeMo Gym, OpenEnv) and their process supervision,
//! which live in `hr-bridge`; tensor crates depend on this crate so they never link an HTTP stack.

mod authored;
mod dataset;
mod environment;
mod error;
mod fixture;
mod python_reward;
mod watchdog;

pub use dataset::{
    BatchScores, DatasetEnvironment, PythonRewards, RowError, dataset_tasks, draw_rows,
    reward_score, score_python_batch, start_python_rewards, take_python_metrics,
};
pub use environment::{Environment, Observation, StepOutcome, Task};
pub use error::EnvError;
pub use fixture::{FixtureEnvironment, Split, fixture_split_tasks, fixture_tasks};
pub use hr_plan::FixtureKind;
pub use python_reward::{PythonReward, RewardBatch};
pub use watchdog::GroupWatchdog;
