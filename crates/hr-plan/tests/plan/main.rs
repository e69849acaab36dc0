//! Plans: the example parses; bad values are refused naming the field (`plan/`: defaults,
//! refusals, PEFT's and TRL's spellings); no mutation makes the parser panic; docs/plan.md names
//! every field.

mod defaults;
mod refusals;
mod spellings;

use std::path::Path;

use hr_plan::{Plan, PlanError};
use proptest::strategy::Strategy;
use serde_json::{Value, json};

fn example() -> Value {
    json!({
        "schema_version": 1,
        "name": "native-tiny",
        "model": {"path": "model", "lora": {"rank": 4, "alpha": 8.0, "targets": ["q_proj", "v_proj"]}},
        "environment": {"backend": "fixture", "tasks": {"kind": "digits", "count": 8, "seed": 3}},
        "grpo": {"num_generations": 4, "max_completion_length": 8, "max_turn_tokens": 8},
        "optimizer": {"learning_rate": 0.05},
        "steps": 4,
        "seeds": {"sampling": 5, "adapter_init": 11, "task_order": 7}
    })
}

fn field_error(plan: &Value) -> (String, String) {
    match Plan::parse(Path::new("plan.json"), &plan.to_string()) {
        Err(PlanError::Field { field, message, .. }) => (field, message),
        other => panic!("expected a field error, got {other:?}"),
    }
}

proptest::proptest! {
    #![proptest_config(proptest::prelude::ProptestConfig::with_cases(3000))]
    /// A mutated plan parses or is refused with a field error; the parser never panics, and
    /// whatever parses passes its own checks again.
    #[test]
    fn any_mutation_of_a_plan_parses_or_is_refused_cleanly(
        edits in proptest::collection::vec(
            proptest::prelude::any::<(u8, usize, u8)>(),
            1..6,
        )
    ) {
        let text = hr_tests::mutate::mutate_text(&example().to_string(), &edits);
        if let Ok(plan) = Plan::parse(Path::new("plan.json"), &text) {
            let again = serde_json::to_string(&plan).expect("a plan serialises");
            proptest::prop_assert!(Plan::parse(Path::new("plan.json"), &again).is_ok());
        }
    }

    /// Any JSON value in any top-level or nested numeric field is parsed or refused, never a
    /// panic.
    #[test]
    fn any_value_in_any_field_is_parsed_or_refused(
        field in proptest::sample::select(vec![
            "/steps", "/grpo/num_generations", "/grpo/max_completion_length", "/grpo/beta",
            "/optimizer/learning_rate", "/model/lora/rank", "/model/lora/alpha",
            "/environment/tasks/count", "/seeds/sampling", "/checkpoints",
        ]),
        value in proptest::prop_oneof![
            proptest::prelude::any::<i64>().prop_map(Value::from),
            proptest::prelude::any::<f64>().prop_map(|f| json!(f)),
            ".{0,8}".prop_map(Value::from),
            proptest::prelude::Just(Value::Null),
        ],
    ) {
        let mut plan = example();
        if let Some(slot) = plan.pointer_mut(field) {
            *slot = value;
        } else if let Some(obj) = plan.as_object_mut() {
            obj.insert(field.trim_start_matches('/').to_owned(), value);
        }
        let _ = Plan::parse(Path::new("plan.json"), &plan.to_string());
    }
}

/// Every key path of `value`'s objects (arrays are not entered).
fn key_paths(value: &Value, prefix: &str, out: &mut Vec<String>) {
    if let Value::Object(map) = value {
        for (key, v) in map {
            let path = if prefix.is_empty() {
                key.clone()
            } else {
                format!("{prefix}.{key}")
            };
            key_paths(v, &path, out);
            out.push(path);
        }
    }
}

#[test]
fn docs_plan_md_names_every_field_a_plan_can_hold() -> anyhow::Result<()> {
    let doc =
        std::fs::read_to_string(Path::new(env!("CARGO_MANIFEST_DIR")).join("../../docs/plan.md"))?;
    // Every optional field set, once per environment backend.
    let mut full = example();
    full["model"]["hub_id"] = json!("HuggingFaceTB/SmolLM2-135M-Instruct");
    full["model"]["dtype"] = json!("bf16");
    full["model"]["lora"]["use_rslora"] = json!(true);
    full["model"]["lora"]["layers_to_transform"] = json!([0]);
    for (key, value) in [
        ("top_k", json!(50)),
        ("min_p", json!(0.05)),
        ("repetition_penalty", json!(1.1)),
        ("mask_truncated_completions", json!(true)),
        ("system_prompt", json!("Be brief.")),
        ("prompt_format", json!("chat")),
        ("importance_sampling_level", json!("sequence")),
        ("delta", json!(1.5)),
        ("use_bias_correction_kl", json!(false)),
        ("sapo_temperature_pos", json!(2.0)),
        ("sapo_temperature_neg", json!(2.0)),
        ("vespo_k_pos", json!(1.0)),
        ("vespo_lambda_pos", json!(1.0)),
        ("vespo_k_neg", json!(1.0)),
        ("vespo_lambda_neg", json!(1.0)),
        ("off_policy_mask_threshold", json!(0.5)),
        ("top_entropy_quantile", json!(0.2)),
        ("entropy_coef", json!(0.01)),
        ("use_adaptive_entropy", json!(true)),
        ("entropy_coef_min", json!(0.001)),
        ("entropy_coef_max", json!(0.1)),
        ("entropy_coef_delta", json!(0.002)),
        ("entropy_target", json!(0.3)),
    ] {
        full["grpo"][key] = value;
    }
    let mut openenv = full.clone();
    openenv["environment"] = json!({"backend": "openenv", "python": "/p", "env_root": "/e", "app": "my_env.server.app:app", "tasks": [{}]});
    let mut dataset = full.clone();
    dataset["environment"] = json!({"backend": "dataset", "train": "t.jsonl", "dev": "d.jsonl",
        "held_out": "h.jsonl", "rewards": [{"name": "n", "rule": "regex", "pattern": "x"}]});
    let mut nemo = full.clone();
    nemo["environment"] =
        json!({"backend": "nemo", "python": "/p", "server_dir": "/s", "tasks": [{}]});
    full["evaluation"] = json!({"checkpoints": [4], "dev": {"count": 1, "seed": 1},
        "held_out": {"tasks": [{"kind": "digits", "question": "q"}]}, "retention": false,
        "solved": {"at_least": 0.5}});
    dataset["evaluation"] = json!({"checkpoints": [4], "dev": {"count": 1, "seed": 1},
        "held_out": {"count": 1, "seed": 2}, "solved": {"reward": "n"}});
    let mut regex = full.clone();
    regex["model"]["lora"] = json!({"r": 2, "target_modules": r"model\.layers\.0\..*"});
    full["model"]["lora"]["use_dora"] = json!(true);
    full["model"]["lora"]["lora_dropout"] = json!(0.05);
    let mut paths = Vec::new();
    for plan in [full, openenv, nemo, dataset, regex] {
        let parsed = Plan::parse(Path::new("plan.json"), &plan.to_string())?;
        key_paths(&serde_json::to_value(&parsed)?, "", &mut paths);
    }
    let missing: Vec<&String> = paths
        .iter()
        .filter(|p| !p.starts_with("evaluation.dev.") && !p.starts_with("evaluation.held_out."))
        .filter(|p| !doc.contains(&format!("`{p}`")))
        .collect();
    assert!(missing.is_empty(), "docs/plan.md does not name {missing:?}");
    Ok(())
}
