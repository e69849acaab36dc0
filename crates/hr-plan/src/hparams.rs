//! A plan as a Determined trial's hyperparameters vary it: the sections a search may vary
//! ([`SEARCHABLE`]) and a trial's values written over the plan's fields, the result checked as a
//! plan file is.

use std::path::Path;

use serde_json::Value;

use crate::{Plan, PlanError};

/// The plan sections a search may vary: their hyperparameter names and their places in a plan.
pub const SEARCHABLE: [(&str, &str); 3] = [
    ("grpo", "/grpo"),
    ("optimizer", "/optimizer"),
    ("lora", "/model/lora"),
];

impl Plan {
    /// The plan with `hparams` (a trial's hyperparameter values) written over it: each
    /// [`SEARCHABLE`] section's object sets the fields it names; every other hyperparameter is
    /// left alone; fields are named as a plan writes them (`rank`, not PEFT's `r`: another
    /// spelling is a duplicate field). The result is parsed and checked as a plan file is
    /// (`path` names it in errors), so a value the plan refuses is refused naming its field.
    pub fn with_hparams(&self, hparams: &Value, path: &Path) -> Result<Plan, PlanError> {
        let mut value = serde_json::to_value(self).expect("a plan serialises");
        for (name, pointer) in SEARCHABLE {
            let Some(Value::Object(fields)) = hparams.get(name) else {
                continue;
            };
            let Some(Value::Object(section)) = value.pointer_mut(pointer) else {
                continue;
            };
            for (field, v) in fields {
                section.insert(field.clone(), v.clone());
            }
        }
        Plan::parse(path, &value.to_string())
    }
}

#[cfg(test)]
mod tests {
    use serde_json::json;

    use super::*;

    fn plan() -> Plan {
        let text = r#"{"schema_version": 1, "name": "p", "model": {"path": "/m"},
            "environment": {"backend": "fixture", "tasks": {"kind": "digits", "count": 2, "seed": 1}},
            "steps": 4, "seeds": {"sampling": 1, "adapter_init": 2, "task_order": 3}}"#;
        Plan::parse(Path::new("plan.json"), text).expect("plan")
    }

    #[test]
    fn a_trials_values_set_their_fields_and_bad_ones_name_them() {
        let p = plan();
        let hp = json!({"optimizer": {"learning_rate": 3e-5}, "lora": {"rank": 4},
            "grpo": {"beta": 0.1}, "steps": 99, "other": 1});
        let varied = p
            .with_hparams(&hp, Path::new("plan.json"))
            .expect("applied");
        assert_eq!(varied.optimizer.learning_rate, 3e-5);
        assert_eq!(varied.model.lora.rank, 4);
        assert_eq!(varied.grpo.beta, 0.1);
        assert_eq!(varied.steps, 4, "only the searchable sections are varied");
        assert_ne!(varied.sha256(), p.sha256(), "the digest records the values");
        // Nothing to vary: the same plan.
        assert_eq!(
            p.with_hparams(&json!({}), Path::new("plan.json"))
                .expect("same"),
            p
        );
        for (bad, field) in [
            (
                json!({"optimizer": {"learning_rate": -1.0}}),
                "optimizer.learning_rate",
            ),
            (json!({"grpo": {"no_such_field": 1}}), "grpo"),
            // A field by another spelling than the plan's own (PEFT's `r` for `rank`).
            (json!({"lora": {"r": 4}}), "duplicate field `rank`"),
        ] {
            let err = p
                .with_hparams(&bad, Path::new("plan.json"))
                .expect_err("refused")
                .to_string();
            assert!(err.contains(field), "{bad}: {err}");
        }
    }
}
