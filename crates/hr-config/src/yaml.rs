//! YAML parsing with positions, and rendering of typed configs.

use serde::Serialize;
use serde_json::Value;

use crate::Error;

/// Parses YAML text into a JSON value (the form the schemas validate), reporting the line and
/// column of a syntax error.
pub fn parse_yaml(text: &str, source_name: &str) -> Result<Value, Error> {
    serde_yaml_ng::from_str::<Value>(text).map_err(|e| {
        let (line, column) = e.location().map_or((0, 0), |l| (l.line(), l.column()));
        Error::Yaml {
            source_name: source_name.to_owned(),
            line,
            column,
            message: e.to_string(),
        }
    })
}

/// Renders a typed config as YAML.
pub(crate) fn to_yaml<T: Serialize>(value: &T) -> Result<String, Error> {
    serde_yaml_ng::to_string(value).map_err(|e| Error::Encoding(e.to_string()))
}

/// Converts a typed config to the JSON value the schemas validate.
pub(crate) fn to_value<T: Serialize>(value: &T) -> Result<Value, Error> {
    serde_json::to_value(value).map_err(|e| Error::Encoding(e.to_string()))
}
