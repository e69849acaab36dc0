//! Determined 0.35 configuration as types: experiment and command configs (the fields we use, with
//! Determined's names and shapes), the two cluster profiles (`jaif`, `local`), the environment
//! defaults (GPUs hidden, Hub offline, bounded thread pools), the bounded-command builder, the
//! templates under `cluster/determined/`, YAML rendering, validation against Determined's own
//! expconf schemas plus our rules, and where a `checkpoint_storage` keeps its folders.
//!
//! This crate is pure and synchronous: it does no network I/O, knows nothing about a running
//! master, and never depends on burn. Its only file access is reading a config to check it.
//!
//! # In detail
//!
//! Determined 0.35 configs as types (`ExperimentConfig`, `CommandConfig` and their shared parts),
//! the cluster profiles (`jaif`, `local`; `jaif` pins one image, `JAIF_IMAGE`, for every job), the
//! environment defaults (`EnvPolicy`), the bounded command builder (`BoundedCommand`: `timeout`
//! around `bash -lc 'cd CHECKOUT && exec ...'`, optionally making a fresh evidence folder first and
//! teeing the program's output into its `command.log`), the templates (`templates()`: the CPU and
//! GPU commands, the zero-GPU shell, the managed experiments, the main run on one GPU and on eight
//! through the binary's launcher; `TrainingRun`), YAML rendering and parsing, and validation:
//!
//! - `schema/`: Determined's expconf JSON schemas, copied with their LICENSE into `schemas/` and
//!   embedded at build time, and a validator for the draft-07 subset they use plus Determined's
//!   custom keywords (`optionalRef`, `union`, `checks`, `compareProperties`, `disallowProperties`,
//!   `eventuallyRequired`, `eventually`) with the master's two phases (sanity, completeness) and
//!   its error rendering (`<config>.a.b[0]: message`). Determined's shared test cases
//!   (`test_data/test_cases/v0`) are its test vectors. Commands have no schema in Determined; ours
//!   (`schemas/hessian-recipes/command.json`) mirrors the Go `model.CommandConfig`.
//! - `finding.rs`: `ConfigKind` (experiment, command, shell: a command config in a file named
//!   `*shell.yaml`, or `--kind shell`) and `Finding`, which `check.rs` (schema phase, then rules)
//!   and `rules.rs` share.
//! - `rules.rs`: the mistakes the schema lets through (slot field names, `max_length`), and the
//!   house rules (`work_dir` in the shared mount, unbounded commands, a shell that holds a GPU,
//!   environment defaults), problems in a config of ours and `Finding::note`s, listed after the
//!   problems, in any other.
//! - `storage.rs`: the one resolver of where a `checkpoint_storage` keeps its folders
//!   (`CheckpointStorage::from_expconf(..).folder(StorageView::{Container, Host})`), as
//!   Determined's harness computes it: `storage_path` joined to `host_path` and normalised must
//!   stay under it (refused naming the field otherwise), then placed under `/determined_shared_fs`
//!   in a container or `host_path` on the host; `directory` is its `container_path`. `hr-core` (a
//!   trial's storage), the devmaster (its trials' folders, and the refusal at creation) and
//!   `evaluate --resume ID` all call it.

mod bounded;
mod check;
mod command;
mod env;
mod error;
mod experiment;
mod finding;
mod profile;
mod rules;
pub mod schema;
mod search;
mod storage;
mod templates;
mod yaml;

pub use bounded::{BoundedCommand, COMMAND_LOG, TIMEOUT_PREFIX, shell_quote};
pub use check::{check_file, check_value};
pub use command::CommandConfig;
pub use env::{EnvPolicy, OVERRIDES_VAR};
pub use error::Error;
pub use experiment::{
    BindMount, CheckpointPolicy, CheckpointStorage, DEV_REWARD, Environment, ExperimentConfig,
    Length, Reproducibility, Resources, Searcher, StorageKind,
};
pub use finding::{ConfigKind, Finding};
pub use profile::{BOOTSTRAP_WORK_DIR, ClusterProfile, JAIF_IMAGE, JAIF_MOUNT, ProfileName};
pub use search::{SearchKind, SearchedField, searched_values};
pub use storage::{SHARED_FS_MOUNT, StorageView};
pub use templates::{
    Backend, Template, TemplateConfig, TrainingRun, cpu_command, gpu_command, shell, templates,
    training_experiment,
};
pub use yaml::{YamlConfig, parse_yaml};
