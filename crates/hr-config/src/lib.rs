//! Determined 0.35 configuration as types: experiment and command configs (the fields we use, with
//! Determined's names and shapes), the two cluster profiles (`jaif`, `local`), the environment
//! defaults (GPUs hidden, Hub offline, bounded thread pools), the bounded-command builder, the
//! templates under `cluster/determined/`, YAML rendering, validation against Determined's own
//! expconf schemas plus our rules, and where a `checkpoint_storage` keeps its folders.
//!
//! This crate is pure and synchronous: it does no network I/O, knows nothing about a running
//! master, and never depends on burn. Its only file access is reading a config to check it.

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
