//! Checking a config file or value: Determined's schema (sanity phase, what the master applies to
//! a submitted config) plus our rules, each finding naming the field and the fix.

use std::path::Path;

use serde_json::Value;

use crate::{
    ConfigKind, Error, Finding, rules,
    schema::{COMMAND_SCHEMA, EXPERIMENT_SCHEMA, Phase, SchemaSet},
    yaml::parse_yaml,
};

/// Checks a config value of the given kind.
pub fn check_value(value: &Value, kind: ConfigKind) -> Result<Vec<Finding>, Error> {
    let schema = match kind {
        ConfigKind::Experiment => EXPERIMENT_SCHEMA,
        ConfigKind::Command | ConfigKind::Shell => COMMAND_SCHEMA,
    };
    let mut findings: Vec<Finding> = SchemaSet::embedded()
        .validate(schema, value, Phase::Sanity)?
        .into_iter()
        .map(|e| Finding {
            field: match e.path.strip_prefix('.') {
                Some(p) => p.to_owned(),
                None if e.path.is_empty() => "(top level)".to_owned(),
                None => e.path,
            },
            message: format!("{} (Determined 0.35 schema)", e.message),
            note: false,
        })
        .collect();
    findings.extend(rules::check(value, kind));
    // Problems first: a note never buries one.
    findings.sort_by_key(|f| f.note);
    Ok(findings)
}

/// Reads, parses and checks a config file; `kind` defaults to detection.
pub fn check_file(
    path: &Path,
    kind: Option<ConfigKind>,
) -> Result<(ConfigKind, Vec<Finding>), Error> {
    let text = std::fs::read_to_string(path).map_err(|source| Error::Read {
        path: path.to_owned(),
        source,
    })?;
    let value = parse_yaml(&text, &path.display().to_string())?;
    let kind = kind.unwrap_or_else(|| ConfigKind::detect_file(path, &value));
    Ok((kind, check_value(&value, kind)?))
}
