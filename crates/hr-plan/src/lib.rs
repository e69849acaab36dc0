//! The training plan (`plan.json`): which model (and the dtype of its frozen base) and LoRA,
//! which environment backend and tasks (a dataset's files and weighted reward rules among them),
//! the GRPO and optimiser hyper-parameters, how many steps, the checkpoint schedule and every
//! seed. Parsing accepts TRL's and PEFT's spellings where they mean the same, rejects unknown
//! fields and every out-of-range value before any work starts, naming the field by its path
//! (`grpo.beta`) and the accepted range. `docs/plan.md` lists every field. A plan's digests live
//! here too: [`Plan::sha256`], which every snapshot and proof is bound to, and
//! [`Plan::family_sha256`], which a qualification plan shares with the run it qualifies.
//!
//! Plain data: it knows nothing about tensors, services or clusters (a model named by its Hub id
//! is looked up in the local Hugging Face cache, never downloaded); `hr-train` maps it onto the
//! trainer's types.
//!
//! # In detail
//!
//! `plan.json`: schema version, name, model (a folder, and/or a Hugging Face Hub id: `hub_cache.rs`
//! finds a model named only by `model.hub_id` in the local Hugging Face cache,
//! `<cache>/models--ORG--NAME/refs/main` → `snapshots/<commit>/`, offline; by hand because `hf-hub`
//! 1.0 always links reqwest, tokio and hf-xet, which this layer must not; `Model::peft_base` is
//! what adapters name as their base) and LoRA, the environment backend (`fixture` tasks, or an
//! owned `openenv` / `nemo` server with its Python, folder and task payloads), GRPO settings (TRL
//! defaults for what is omitted), AdamW and schedule, steps, checkpoint schedule, seeds. Unknown
//! fields are refused by `serde` with their path (`serde_path_to_error`), and every value is
//! range-checked before any work, naming the field (`grpo.beta`, `grpo.num_generations`, ...),
//! every size with an upper bound (`limits`: episodes a step, generations, iterations, tokens,
//! turns, drawn tasks, LoRA rank), so nothing a plan sizes is allocated unbounded: `plan.rs` holds
//! the fields (the larger sections in `plan/`), `load.rs` the parsing (and `Plan::input_paths`,
//! every file and folder a run reads, which preflight and `managed prepare` check), `validate.rs`
//! the checks (a section's own in `validate/`), `hparams.rs` a Determined trial's hyperparameter
//! values written over the plan's `grpo`, `optimizer` and `lora` fields (`Plan::with_hparams`),
//! `schedule.rs` the checkpoints a run saves and keeps.
//!
//! `vocabulary.rs` owns the words the plan shares with the trainer and the environments
//! (`ScaleRewards`, `LossType`, `Decay`, `PromptFormat`, `FixtureKind`, `Dtype`); `hr-grpo` and
//! `hr-env` re-export them instead of defining their own, so no code maps one spelling onto
//! another.
//!
//! PEFT's and TRL's spellings: plain renames are serde aliases (`r`, `lora_alpha`, `lora_dropout`,
//! `target_modules` with `all-linear`) or accepted values (boolean `scale_rewards`); the names that
//! need computing or a check (`max_steps`, `save_steps`, `grpo.epsilon`,
//! `optimizer.lr_scheduler_type`, `optimizer.warmup_ratio`) are rewritten into the plan's own
//! fields before parsing (`trl_names.rs`), so a plan's digest never depends on its spelling.
//!
//! `parallel.shards` (default 1, left out of the serialised plan then, so older digests hold) cuts
//! each step into the shards data-parallel ranks share (`hr-grpo`'s `exchange.rs`).

mod digest;
mod error;
mod hparams;
mod hub_cache;
mod load;
mod plan;
mod schedule;
mod trl_names;
mod validate;
mod vocabulary;

pub use digest::QUALIFICATION_STEPS;
pub use error::PlanError;
pub use hparams::SEARCHABLE;
pub use hub_cache::{find_cached, hub_cache_dir, is_hub_id};
pub use plan::{
    Checkpoints, Environment, Evaluation, FixtureTasks, Grpo, Lora, Model, Optimizer, Parallel,
    Plan, Reward, RewardRule, Seeds, Solved, TaskSet,
};
pub use validate::limits;
pub use vocabulary::{
    Decay, Dtype, FixtureKind, ImportanceSamplingLevel, LossType, PromptFormat, ScaleRewards,
};
