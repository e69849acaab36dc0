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
//!
//! # In detail
//!
//! `Environment` is the trait the trainer drives episodes through (`reset`, `step`, `close`), with
//! `Task`, `Observation`, `StepOutcome` and `EnvError`, the one error every environment reports
//! (service failures name the service and carry its log tail). `fixture.rs` is the built-in
//! `FixtureEnvironment` (no service): seeded `arithmetic`, `tool_call`, multi-turn `calculator` (an
//! `add` tool answered with a `<tool_response>`) and `digits` (a dense format reward) tasks, and
//! from `authored.rs` the authored `word_problem` and `tool_use` families (shipped in `tasks/`,
//! each line labelled with its split, provenance in `tasks/README.md`), rewarded by exact checks
//! read with `hr-eval`'s one scoring rule. Each generated family's question space is cut once,
//! independent of any seed, into TRAIN (70%), DEV and HELD-OUT splits (`Split`); training draws
//! only from TRAIN (`fixture_tasks`), evaluation from the others (`fixture_split_tasks`). The
//! families themselves (`FixtureKind`) are plan vocabulary and live in `hr-plan`.
//!
//! `dataset.rs` is the dataset backend: `dataset_tasks` reads a JSON-lines file and checks every
//! row (a `prompt` string, or chat messages when the plan's prompt format is chat, the columns the
//! plan's rewards read, of the right type; `RowError` names the file, line and field; a chat row's
//! messages travel in the reset observation's raw value, and `hr-grpo`'s rollout opens the
//! conversation with them), `reward_score` is the built-in rules (`exact_match`, `final_number` and
//! `tool_call` through `hr-eval`, `regex`, `tag`, `length_penalty`), and `DatasetEnvironment` runs
//! one-turn episodes whose reward is the weighted sum, each rule's score in the step's raw
//! observation (`{"rewards": {name: score}}`), which `hr-grpo` sums per episode
//! (`Episode::reward_parts`) and logs as `rewards/<name>/mean` and `/std`.
//!
//! `python_reward.rs` runs a `python` reward with TRL 1.16's contract: one child process per
//! function (an embedded driver imports the file, says it is ready, then answers one JSON line per
//! request with `f(prompts=..., completions=..., completion_ids=..., trainer_state=...,
//! log_extra=..., log_metric=..., **columns)`, awaited when `async`, a chat row's completion as the
//! assistant's message, as TRL passes conversational rows), one request per generation batch in
//! episode order (`score_python_batch`, which `hr-grpo`'s `rollouts` calls through
//! `EnvironmentFactory::score_batch` once all of a batch's episodes ended), with what it passed to
//! `log_metric` kept until the trainer takes each name's mean for the step's metrics
//! (`take_python_metrics`, through `EnvironmentFactory::reward_metrics`); a function that misses
//! its timeout is stopped and refused afterwards, so a late answer is never read as the next
//! batch's; `None` means "not applicable": the weighted sum skips it, and an episode no reward
//! applies to is unscorable (`Episode::scorable`: out of its group's statistics, advantage 0, as
//! TRL's NaN rows).
//!
//! Stderr goes to the run's `service.log` (through `CappedLog`); an exception, an answer that is
//! not one float or `None` per completion, a non-finite one, an exit or a timeout is an `EnvError`
//! naming the reward with its log tail. The driver leads its own process group (a terminal's Ctrl-C
//! reaches `train`, not the reward mid-answer); the whole group, with whatever the function
//! started, is killed when the run's environment is dropped, and by its watchdog when `train` ends
//! without dropping it (`watchdog.rs`: `GroupWatchdog`, an `sh` in the group waiting on a pipe only
//! `train` holds; when the kernel closes it, the watchdog kills the group; services in `hr-bridge`
//! have one too). `dataset.rs` bounds a dataset file (1 GiB) and a row (4 MiB) before parsing them.

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
