//! The command config (Determined's Go `model.CommandConfig`; commands have no JSON schema).

use serde::{Deserialize, Serialize};

use crate::{BindMount, Environment, Resources};

/// A command config: only the fields we use, with Determined's names and shapes. The entrypoint
/// is normally given on the `det command run` line, not in the file.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct CommandConfig {
    /// Free-text description.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub description: Option<String>,
    /// Slots (`resources.slots`) and pool.
    pub resources: Resources,
    /// Host folders mounted into the container.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub bind_mounts: Vec<BindMount>,
    /// Image and environment variables.
    pub environment: Environment,
    /// Working directory of the command; keep Determined's bootstrap default.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub work_dir: Option<String>,
    /// The command, when the file carries it.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub entrypoint: Option<Vec<String>>,
}
