//! YAML parsing with positions, and rendering of typed configs.

use serde::{Serialize, de::DeserializeOwned};
use serde_json::Value;

use crate::Error;

/// Parses YAML text into a JSON value (the form the schemas validate), reporting the line and
/// column of a syntax error.
pub fn parse_yaml(text: &str, source_name: &str) -> Result<Value, Error> {
    serde_saphyr::from_str::<Value>(text).map_err(|e| {
        let (line, column) = e
            .location()
            .map_or((0, 0), |l| (to_usize(l.line()), to_usize(l.column())));
        Error::Yaml {
            source_name: source_name.to_owned(),
            line,
            column,
            message: e.to_string(),
        }
    })
}

fn to_usize(n: u64) -> usize {
    usize::try_from(n).unwrap_or(usize::MAX)
}

/// A typed config that renders to YAML and parses back (unknown fields rejected).
pub trait YamlConfig: Serialize + DeserializeOwned {
    /// Renders the config as YAML.
    fn to_yaml(&self) -> Result<String, Error> {
        // Plain scalars, never folded (`>-`): templates are read and edited by people.
        let options = serde_saphyr::ser_options! { prefer_block_scalars: false };
        serde_saphyr::to_string_with_options(self, options)
            .map_err(|e| Error::Encoding(e.to_string()))
    }

    /// Parses a config rendered by [`Self::to_yaml`].
    fn from_yaml(text: &str) -> Result<Self, Error> {
        serde_json::from_value(parse_yaml(text, "<config>")?)
            .map_err(|e| Error::Encoding(e.to_string()))
    }

    /// The config as the JSON value the schemas validate.
    fn to_value(&self) -> Result<Value, Error> {
        serde_json::to_value(self).map_err(|e| Error::Encoding(e.to_string()))
    }
}

impl YamlConfig for crate::ExperimentConfig {}
impl YamlConfig for crate::CommandConfig {}
