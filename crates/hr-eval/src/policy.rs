//! Policies: what answers the tasks. The CPU demo uses [`FixturePolicy`], whose scripted answers
//! (`fixtures/fixture-policy.jsonl`) include deliberate mistakes so the scores are not trivially
//! perfect; a trained checkpoint answers through the same trait.

use std::collections::HashMap;

use serde::Deserialize;

use crate::{Error, Task, suite::parse_lines};

/// Anything that answers a task with text.
pub trait Policy {
    /// A short name for reports.
    fn name(&self) -> &str;
    /// The answer to `task`.
    fn respond(&mut self, task: &Task) -> Result<String, Error>;
    /// The answers to `tasks`, in order; a model policy answers them in one batch.
    fn respond_all(&mut self, tasks: &[Task]) -> Result<Vec<String>, Error> {
        tasks.iter().map(|t| self.respond(t)).collect()
    }
}

/// The deterministic scripted policy of the demo.
#[derive(Debug, Clone)]
pub struct FixturePolicy {
    responses: HashMap<String, String>,
}

#[derive(Deserialize)]
#[serde(deny_unknown_fields)]
struct Line {
    id: String,
    response: String,
}

const SCRIPT: &str = include_str!("../fixtures/fixture-policy.jsonl");

impl FixturePolicy {
    /// The built-in script.
    pub fn builtin() -> Result<Self, Error> {
        Self::from_jsonl("fixtures/fixture-policy.jsonl", SCRIPT)
    }

    /// A script from JSONL lines `{"id": ..., "response": ...}`; duplicate ids are rejected.
    pub fn from_jsonl(file: &str, text: &str) -> Result<Self, Error> {
        let mut responses = HashMap::new();
        for (line, l) in parse_lines::<Line>(file, text)? {
            if responses.insert(l.id.clone(), l.response).is_some() {
                return Err(Error::Data {
                    file: file.to_owned(),
                    line,
                    message: format!("duplicate response for task {}", l.id),
                });
            }
        }
        Ok(Self { responses })
    }
}

impl Policy for FixturePolicy {
    fn name(&self) -> &str {
        "fixture"
    }

    fn respond(&mut self, task: &Task) -> Result<String, Error> {
        self.responses
            .get(&task.id)
            .cloned()
            .ok_or_else(|| Error::NoResponse(task.id.clone()))
    }
}
