//! Determined's expconf JSON schemas (draft-07 plus Determined's custom keywords), embedded in
//! the crate, and a validator that reproduces the master's two phases: *sanity* (applied to raw
//! user input) and *completeness* (applied after cluster defaults; adds `eventuallyRequired` and
//! `eventually`). Errors are rendered the way the master renders them: `<config>.a.b[0]: message`.

mod validate;

use std::{collections::HashMap, fmt, sync::LazyLock};

use serde_json::Value;

use crate::Error;

/// `$id` of Determined's experiment config schema.
pub const EXPERIMENT_SCHEMA: &str = "http://determined.ai/schemas/expconf/v0/experiment.json";
/// `$id` of our schema for command configs (Determined 0.35 has none; ours mirrors its Go struct).
pub const COMMAND_SCHEMA: &str = "http://hessian-recipes/schemas/determined-0.35/command.json";

include!(concat!(env!("OUT_DIR"), "/embedded_schemas.rs"));

/// Which of the master's two validation phases to apply.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Phase {
    /// Raw user input: `eventuallyRequired` and `eventually` are not enforced yet.
    Sanity,
    /// After defaults: everything, including `eventuallyRequired` and `eventually`.
    Completeness,
}

/// One leaf validation error: where in the instance, and what is wrong.
#[derive(Debug, Clone, PartialEq, Eq, PartialOrd, Ord)]
pub struct SchemaError {
    /// Rendered instance path such as `.resources.slots` or `.bind_mounts[0]`; empty for the root.
    pub path: String,
    /// The message, e.g. `expected integer, but got string`.
    pub message: String,
}

impl fmt::Display for SchemaError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "<config>{}: {}", self.path, self.message)
    }
}

/// A set of schema documents addressed by their `$id`.
#[derive(Debug)]
pub struct SchemaSet {
    by_id: HashMap<String, Value>,
}

static EMBEDDED_SET: LazyLock<SchemaSet> = LazyLock::new(|| {
    SchemaSet::from_documents(EMBEDDED.iter().map(|(path, text)| {
        serde_json::from_str(text).unwrap_or_else(|e| panic!("embedded schema {path}: {e}"))
    }))
    .unwrap_or_else(|e| panic!("embedded schemas: {e}"))
});

impl SchemaSet {
    /// Determined 0.35's expconf schemas plus our command schema, embedded at build time.
    pub fn embedded() -> &'static SchemaSet {
        &EMBEDDED_SET
    }

    /// Builds a set from parsed documents; each must carry a string `$id`.
    pub fn from_documents(docs: impl IntoIterator<Item = Value>) -> Result<Self, Error> {
        let mut by_id = HashMap::new();
        for doc in docs {
            let id = doc
                .get("$id")
                .and_then(Value::as_str)
                .ok_or_else(|| Error::InvalidSchema("a schema document has no string $id".into()))?
                .to_owned();
            by_id.insert(id, doc);
        }
        Ok(Self { by_id })
    }

    /// Whether a schema with this `$id` is in the set.
    pub fn contains(&self, id: &str) -> bool {
        self.by_id.contains_key(id)
    }

    /// Validates `instance` against the schema `id` in the given phase. Returns the leaf errors,
    /// sorted, or an empty list when the instance is valid.
    pub fn validate(
        &self,
        id: &str,
        instance: &Value,
        phase: Phase,
    ) -> Result<Vec<SchemaError>, Error> {
        let schema = self.get(id)?;
        let mut errors =
            validate::Validator { set: self, phase }.check(schema, instance, &mut Vec::new());
        errors.sort();
        errors.dedup();
        Ok(errors)
    }

    fn get(&self, id: &str) -> Result<&Value, Error> {
        self.by_id
            .get(id)
            .ok_or_else(|| Error::UnknownSchema(id.to_owned()))
    }
}
