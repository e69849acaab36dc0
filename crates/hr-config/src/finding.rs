//! The vocabulary of a config check: what kind of config it is ([`ConfigKind`]) and what is wrong
//! with it ([`Finding`]), shared by the schema phase (`check.rs`) and our rules (`rules.rs`).

use std::{fmt, str::FromStr};

use serde_json::Value;

/// What a config file configures.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum ConfigKind {
    /// An experiment (`det experiment create`).
    Experiment,
    /// A command (`det command run --config-file`).
    Command,
    /// An interactive shell (`det shell start --config-file`): a command config that takes no
    /// entrypoint and, as the retained shell, holds no GPU.
    Shell,
}

impl ConfigKind {
    /// An experiment config has a `searcher`; a command config does not.
    pub fn detect(value: &Value) -> Self {
        if value.get("searcher").is_some() {
            Self::Experiment
        } else {
            Self::Command
        }
    }

    /// As [`ConfigKind::detect`], and a config without a searcher in a file named `*shell.yaml`
    /// (or `.yml`) is a shell.
    pub fn detect_file(path: &std::path::Path, value: &Value) -> Self {
        let shell_name = path
            .file_stem()
            .and_then(|s| s.to_str())
            .is_some_and(|s| s.ends_with("shell"));
        match Self::detect(value) {
            Self::Command if shell_name => Self::Shell,
            kind => kind,
        }
    }
}

impl FromStr for ConfigKind {
    type Err = String;
    fn from_str(s: &str) -> Result<Self, String> {
        match s {
            "experiment" => Ok(Self::Experiment),
            "command" => Ok(Self::Command),
            "shell" => Ok(Self::Shell),
            other => Err(format!(
                "unknown config kind {other:?}: use `experiment`, `command` or `shell`"
            )),
        }
    }
}

impl fmt::Display for ConfigKind {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(match self {
            Self::Experiment => "experiment",
            Self::Command => "command",
            Self::Shell => "shell",
        })
    }
}

/// One problem with a config, or a note.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Finding {
    /// Dotted field path (`resources.slots`), or `(top level)`.
    pub field: String,
    /// What is wrong, and the fix.
    pub message: String,
    /// A house rule of the cluster (its environment defaults, bounded commands, the retained
    /// shell, the work folder) on a config that is not this project's: shown after the
    /// problems, never failing the check.
    pub note: bool,
}

impl Finding {
    /// Whether it fails the check (it is not a [`Finding::note`]).
    pub fn is_problem(&self) -> bool {
        !self.note
    }
}

impl fmt::Display for Finding {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "{}: {}", self.field, self.message)
    }
}
