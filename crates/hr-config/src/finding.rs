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
}

impl FromStr for ConfigKind {
    type Err = String;
    fn from_str(s: &str) -> Result<Self, String> {
        match s {
            "experiment" => Ok(Self::Experiment),
            "command" => Ok(Self::Command),
            other => Err(format!(
                "unknown config kind {other:?}: use `experiment` or `command`"
            )),
        }
    }
}

impl fmt::Display for ConfigKind {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(match self {
            Self::Experiment => "experiment",
            Self::Command => "command",
        })
    }
}

/// One problem with a config.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Finding {
    /// Dotted field path (`resources.slots`), or `(top level)`.
    pub field: String,
    /// What is wrong, and the fix.
    pub message: String,
}

impl fmt::Display for Finding {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "{}: {}", self.field, self.message)
    }
}
