//! Bad values are refused naming the field: out-of-range and unbounded sizes, service backends
//! without tasks, an evaluation that adopts unsaved steps, a dataset's rewards and the shards.

use std::path::Path;

use hr_plan::Plan;
use serde_json::{Value, json};

use crate::{example, field_error};

#[test]
fn bad_values_are_refused_naming_the_field() {
    type Breaker = fn(&mut Value);
    let cases: [(&str, Breaker); 11] = [
        ("grpo.beta", |p| p["grpo"]["beta"] = json!(-0.1)),
        ("grpo.num_generations", |p| {
            p["grpo"]["num_generations"] = json!(1)
        }),
        ("grpo.betaa", |p| p["grpo"]["betaa"] = json!(0.1)),
        ("model", |p| {
            _ = p.as_object_mut().map(|o| o.remove("model"))
        }),
        ("model.lora.targets", |p| {
            p["model"]["lora"]["targets"] = json!(["qkv"])
        }),
        ("environment.tasks.kind", |p| {
            p["environment"]["tasks"]["kind"] = json!("chess")
        }),
        ("steps", |p| p["steps"] = json!(0)),
        ("model.dtype", |p| p["model"]["dtype"] = json!("fp16")),
        ("grpo.min_p", |p| p["grpo"]["min_p"] = json!(1.0)),
        ("grpo.prompt_format", |p| {
            p["grpo"]["prompt_format"] = json!("plain");
            p["grpo"]["max_turns"] = json!(2);
        }),
        ("grpo.prompt_format", |p| {
            p["grpo"]["prompt_format"] = json!("plain");
            p["grpo"]["system_prompt"] = json!("Be brief.");
        }),
    ];
    for (field, break_it) in cases {
        let mut plan = example();
        break_it(&mut plan);
        let (named, message) = field_error(&plan);
        // A missing field is reported at its parent with the field in the message.
        assert!(
            named == field
                || message.contains(&format!("`{}`", field.rsplit('.').next().unwrap_or(field))),
            "{field}: got `{named}`: {message}"
        );
    }
}

#[test]
fn every_size_a_plan_sets_has_an_upper_bound_named_in_its_refusal() {
    use hr_plan::limits;
    let cases: [(&str, &str, Value); 10] = [
        (
            "grpo",
            "num_generations",
            json!(limits::MAX_GENERATIONS + 1),
        ),
        ("grpo", "tasks_per_step", json!(100_000_000)),
        ("grpo", "num_iterations", json!(1_000_000)),
        (
            "grpo",
            "max_completion_length",
            json!(limits::MAX_TOKENS + 1),
        ),
        ("grpo", "max_turn_tokens", json!(limits::MAX_TOKENS + 1)),
        ("grpo", "max_turns", json!(limits::MAX_TURNS + 1)),
        ("grpo", "gradient_accumulation_steps", json!(0)),
        ("grpo", "gradient_accumulation_steps", json!(17)),
        ("model.lora", "rank", json!(limits::MAX_LORA_RANK + 1)),
        ("optimizer", "learning_rate", json!(1e20)),
    ];
    for (section, key, value) in cases {
        let mut plan = example();
        let pointer = format!("/{}", section.replace('.', "/"));
        plan.pointer_mut(&pointer).expect("section")[key] = value.clone();
        let (field, message) = field_error(&plan);
        assert_eq!(field, format!("{section}.{key}"), "{value}: {message}");
    }
    let mut drawn = example();
    drawn["environment"]["tasks"]["count"] = json!(1_000_000_000);
    let (field, message) = field_error(&drawn);
    assert_eq!(field, "environment.tasks.count");
    assert!(
        message.contains(&limits::MAX_DRAWN_TASKS.to_string()),
        "{message}"
    );
    // The episodes of a step: each factor within its bound, their product not.
    let mut wide = example();
    wide["grpo"]["num_generations"] = json!(limits::MAX_GENERATIONS);
    wide["grpo"]["tasks_per_step"] = json!(limits::MAX_EPISODES / limits::MAX_GENERATIONS + 1);
    let (field, message) = field_error(&wide);
    assert_eq!(field, "grpo.tasks_per_step");
    assert!(message.contains("episodes a step"), "{message}");
    wide["grpo"]["tasks_per_step"] = json!(limits::MAX_EPISODES / limits::MAX_GENERATIONS);
    assert!(Plan::parse(Path::new("plan.json"), &wide.to_string()).is_ok());
}

#[test]
fn service_backends_parse_and_need_tasks() -> anyhow::Result<()> {
    let mut plan = example();
    plan["environment"] = json!({"backend": "nemo", "python": "/venv/bin/python", "server_dir": "/srv", "tasks": [{"responses_create_params": {}}]});
    let bare = Plan::parse(Path::new("plan.json"), &plan.to_string())?;
    // A server's own config fields are kept (and change the digest); the bridge's are refused.
    assert!(!serde_json::to_string(&bare)?.contains("server_config"));
    plan["environment"]["server_config"] = json!({"judge_model": "m", "data": "/d"});
    let judged = Plan::parse(Path::new("plan.json"), &plan.to_string())?;
    assert!(serde_json::to_string(&judged)?.contains(r#""judge_model":"m""#));
    assert_ne!(bare.sha256(), judged.sha256());
    plan["environment"]["server_config"] = json!({"port": 1});
    let (field, message) = field_error(&plan);
    assert_eq!(field, "environment.server_config");
    assert!(message.contains("`port` is set by the bridge"), "{message}");
    plan["environment"] = json!({"backend": "openenv", "python": "/venv/bin/python", "env_root": "/env", "tasks": [{}]});
    let parsed = Plan::parse(Path::new("plan.json"), &plan.to_string())?;
    assert!(
        matches!(parsed.environment, hr_plan::Environment::Openenv { max_sessions: 1, ref action_field, .. } if action_field == "message")
    );
    // The default app is left out of the serialised plan (old digests hold); another is kept.
    assert!(!serde_json::to_string(&parsed)?.contains("\"app\""));
    plan["environment"]["app"] = json!("counter_env.server.app:app");
    let counter = Plan::parse(Path::new("plan.json"), &plan.to_string())?;
    assert!(serde_json::to_string(&counter)?.contains(r#""app":"counter_env.server.app:app""#));
    plan["environment"]["app"] = json!("counter_env");
    assert_eq!(field_error(&plan).0, "environment.app");
    plan["environment"]["app"] = json!("counter_env.server.app:app");
    plan["environment"]["tasks"] = json!([]);
    assert_eq!(field_error(&plan).0, "environment.tasks");
    plan["environment"] = json!({"backend": "gym", "tasks": []});
    assert_eq!(field_error(&plan).0, "environment.backend");
    Ok(())
}

#[test]
fn an_evaluation_section_must_adopt_saved_steps_and_name_its_tasks() -> anyhow::Result<()> {
    let mut plan = example();
    plan["checkpoints"] = json!({"every": 2});
    plan["evaluation"] = json!({"checkpoints": [2, 4], "dev": {"count": 3, "seed": 1},
        "held_out": {"tasks": [{"kind": "digits", "question": "q"}]}});
    let parsed = Plan::parse(Path::new("plan.json"), &plan.to_string())?;
    let e = parsed.evaluation.expect("evaluation");
    assert_eq!((e.num_generations, e.retention_max_new_tokens), (4, 64));
    type Breaker = fn(&mut Value);
    let cases: [(&str, &str, Breaker); 6] = [
        ("evaluation.checkpoints", "not saved", |p| {
            p["evaluation"]["checkpoints"] = json!([3])
        }),
        ("evaluation.checkpoints", "ascending", |p| {
            p["evaluation"]["checkpoints"] = json!([4, 2])
        }),
        ("evaluation.held_out", "at least one", |p| {
            p["evaluation"]["held_out"] = json!({"tasks": []})
        }),
        ("evaluation.solved.reward", "only a dataset plan", |p| {
            p["evaluation"]["solved"] = json!({"reward": "correct"})
        }),
        ("evaluation.solved.threshold", "unknown field", |p| {
            p["evaluation"]["solved"] = json!({"threshold": 1})
        }),
        ("evaluation.dev", "fixture backend", |p| {
            p["environment"] = json!({"backend": "nemo", "python": "/p", "server_dir": "/s",
                "tasks": [{"responses_create_params": {}}]})
        }),
    ];
    for (field, words, break_it) in cases {
        let mut broken = plan.clone();
        break_it(&mut broken);
        let (named, message) = field_error(&broken);
        assert_eq!(named, field, "{message}");
        assert!(message.contains(words), "{field}: {message}");
    }
    Ok(())
}

#[test]
fn dataset_rewards_are_checked_naming_the_reward_and_setting() {
    let dataset = |rewards: Value| {
        let mut p = example();
        p["environment"] = json!({"backend": "dataset", "train": "t.jsonl", "rewards": rewards});
        p
    };
    let ok = json!({"name": "correct", "rule": "final_number", "column": "answer"});
    assert!(
        Plan::parse(
            Path::new("plan.json"),
            &dataset(json!([ok.clone()])).to_string()
        )
        .is_ok()
    );
    for (rewards, field) in [
        (json!([]), "environment.rewards"),
        (
            json!([ok.clone(), ok.clone()]),
            "environment.rewards[0].name",
        ),
        (
            json!([{"name": "a b", "rule": "tag", "tag": "x"}]),
            "environment.rewards[0].name",
        ),
        (
            json!([{"name": "c", "rule": "final_number"}]),
            "environment.rewards[0].column",
        ),
        (
            json!([{"name": "c", "rule": "tag", "tag": "x", "column": "y"}]),
            "environment.rewards[0].column",
        ),
        (
            json!([{"name": "c", "rule": "regex", "pattern": "("}]),
            "environment.rewards[0].pattern",
        ),
        (
            json!([{"name": "c", "rule": "length_penalty", "max_chars": 0}]),
            "environment.rewards[0].max_chars",
        ),
    ] {
        let (named, message) = field_error(&dataset(rewards.clone()));
        assert_eq!(named, field, "{rewards}: {message}");
    }
    // Inside the tagged `environment` serde names only the section; the message names the rest.
    let (_, message) = field_error(&dataset(json!([{"name": "c", "rule": "bleu"}])));
    assert!(
        message.contains("reward `rule` `bleu` is unknown: use one of exact_match"),
        "{message}"
    );
    // Drawn evaluation tasks need the split's file.
    let mut p = dataset(json!([ok]));
    p["evaluation"] = json!({"checkpoints": [4], "dev": {"count": 2, "seed": 1},
        "held_out": {"tasks": [{"prompt": "q", "answer": 1}]}});
    assert_eq!(field_error(&p).0, "evaluation.dev");
    p["environment"]["dev"] = json!("d.jsonl");
    assert!(Plan::parse(Path::new("plan.json"), &p.to_string()).is_ok());
}

#[test]
fn parallel_shards_are_a_power_of_two_dividing_the_tasks_and_leave_old_digests_alone()
-> anyhow::Result<()> {
    let plan = example();
    let one = Plan::parse(Path::new("plan.json"), &plan.to_string())?;
    assert!(!serde_json::to_string(&one)?.contains("parallel"));
    let mut sharded = plan.clone();
    sharded["grpo"]["tasks_per_step"] = json!(8);
    sharded["parallel"] = json!({"shards": 4});
    let four = Plan::parse(Path::new("plan.json"), &sharded.to_string())?;
    assert_eq!(four.parallel.shards, 4);
    let mut eight_tasks = plan.clone();
    eight_tasks["grpo"]["tasks_per_step"] = json!(8);
    let eight_tasks = Plan::parse(Path::new("plan.json"), &eight_tasks.to_string())?;
    assert_ne!(
        four.sha256(),
        eight_tasks.sha256(),
        "the shards are in the digest"
    );
    for (shards, accumulation, field) in [
        (3, 1, "parallel.shards"),
        (16, 1, "parallel.shards"),
        (hr_plan::limits::MAX_SHARDS * 2, 1, "parallel.shards"),
        (4, 2, "grpo.gradient_accumulation_steps"),
        (4, 6, "grpo.gradient_accumulation_steps"),
    ] {
        let mut bad = sharded.clone();
        bad["parallel"]["shards"] = json!(shards);
        bad["grpo"]["gradient_accumulation_steps"] = json!(accumulation);
        let (named, message) = field_error(&bad);
        assert_eq!(named, field, "{shards} shards, {accumulation}: {message}");
    }
    sharded["grpo"]["gradient_accumulation_steps"] = json!(8);
    assert!(Plan::parse(Path::new("plan.json"), &sharded.to_string()).is_ok());
    Ok(())
}
