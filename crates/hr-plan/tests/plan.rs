//! Plans: the example parses; bad values are refused naming the field.

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

#[test]
fn the_example_parses_with_trl_defaults_for_what_it_omits() -> anyhow::Result<()> {
    let plan = Plan::parse(Path::new("plan.json"), &example().to_string())?;
    assert_eq!(plan.grpo.num_generations, 4);
    assert_eq!(
        (
            plan.grpo.epsilon_low,
            plan.grpo.beta,
            plan.grpo.num_iterations
        ),
        (0.2, 0.0, 1)
    );
    assert_eq!(plan.optimizer.max_grad_norm, Some(1.0));
    assert_eq!(plan.checkpoints.every, 1);
    assert_eq!(plan.grpo.prompt_format, hr_plan::PromptFormat::Chat);
    // The default format is left out when the plan is written back, so a plan's digest does
    // not change with the field's introduction; `plain` is written.
    assert!(!serde_json::to_string(&plan)?.contains("prompt_format"));
    let mut plain = example();
    plain["grpo"]["prompt_format"] = json!("plain");
    let plan = Plan::parse(Path::new("plan.json"), &plain.to_string())?;
    assert!(serde_json::to_string(&plan)?.contains(r#""prompt_format":"plain""#));
    Ok(())
}

#[test]
fn the_base_dtype_defaults_to_f32_and_is_written_only_when_it_is_not() -> anyhow::Result<()> {
    let plan = Plan::parse(Path::new("plan.json"), &example().to_string())?;
    assert_eq!(plan.model.dtype, hr_plan::Dtype::F32);
    assert!(!serde_json::to_string(&plan)?.contains("dtype"));
    for (word, dtype) in [("f16", hr_plan::Dtype::F16), ("bf16", hr_plan::Dtype::Bf16)] {
        let mut half = example();
        half["model"]["dtype"] = json!(word);
        let plan = Plan::parse(Path::new("plan.json"), &half.to_string())?;
        assert_eq!(plan.model.dtype, dtype);
        assert_eq!(word.parse::<hr_plan::Dtype>(), Ok(dtype));
        assert!(serde_json::to_string(&plan)?.contains(&format!(r#""dtype":"{word}""#)));
    }
    let mut wrong = example();
    wrong["model"]["dtype"] = json!("float16");
    let (field, message) = field_error(&wrong);
    assert_eq!(field, "model.dtype");
    assert!(message.contains("`bf16`"), "{message}");
    assert_eq!(
        "fp8".parse::<hr_plan::Dtype>(),
        Err("unknown dtype `fp8`; use f32, f16 or bf16".to_owned())
    );
    Ok(())
}

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

#[test]
fn peft_and_trl_spellings_mean_exactly_the_plans_own() -> anyhow::Result<()> {
    let parse = |v: &Value| Plan::parse(Path::new("plan.json"), &v.to_string());
    let own = parse(&example())?;
    // PEFT's LoraConfig names: the same plan, field for field (so the same digest).
    let mut peft = example();
    peft["model"]["lora"] =
        json!({"r": 4, "lora_alpha": 8.0, "target_modules": ["q_proj", "v_proj"]});
    assert_eq!(parse(&peft)?, own);
    // A partial LoraConfig takes PEFT's defaults for the rest (alpha 8, q and v).
    peft["model"]["lora"] = json!({"r": 4});
    assert_eq!(parse(&peft)?, own);
    peft["model"]["lora"] = json!({"r": 16});
    let lora = parse(&peft)?.model.lora;
    assert_eq!((lora.rank, lora.alpha), (16, 8.0));
    let mut selected = peft.clone();
    // PEFT's layer subset (one index is a list of one) and regular-expression target_modules.
    selected["model"]["lora"] =
        json!({"r": 4, "target_modules": ["q_proj"], "layers_to_transform": 1});
    assert_eq!(
        parse(&selected)?.model.lora.layers_to_transform,
        Some(vec![1])
    );
    selected["model"]["lora"] = json!({"r": 4, "target_modules": r"model\.layers\.0\..*_proj"});
    let lora = parse(&selected)?.model.lora;
    assert_eq!(
        (lora.target_regex.as_deref(), lora.targets.len()),
        (Some(r"model\.layers\.0\..*_proj"), 0)
    );
    for (lora, field) in [
        (
            json!({"target_modules": "(?<=x)q_proj"}),
            "model.lora.target_regex",
        ),
        (
            json!({"target_modules": "q.*", "layers_to_transform": [0]}),
            "model.lora.layers_to_transform",
        ),
        (
            json!({"target_regex": "q.*", "targets": ["q_proj"]}),
            "model.lora.target_regex",
        ),
        (
            json!({"layers_to_transform": []}),
            "model.lora.layers_to_transform",
        ),
    ] {
        selected["model"]["lora"] = lora;
        assert_eq!(field_error(&selected).0, field);
    }
    // `all-linear`, alone or in a list, is every projection of every family (a model adapts
    // those it has).
    let all: Vec<String> = [
        "q_proj",
        "k_proj",
        "v_proj",
        "o_proj",
        "gate_proj",
        "up_proj",
        "down_proj",
        "qkv_proj",
        "gate_up_proj",
    ]
    .map(str::to_owned)
    .into();
    for targets in [
        json!("all-linear"),
        json!(["all-linear"]),
        json!(["q_proj", "all-linear"]),
    ] {
        let mut p = example();
        p["model"]["lora"]["targets"] = targets.clone();
        assert_eq!(parse(&p)?.model.lora.targets, all, "{targets}");
    }
    // PEFT's use_rslora and use_dora: written only when on, so other plans keep their digest.
    type Read = fn(&Plan) -> bool;
    let flags: [(&str, Read); 2] = [
        ("use_rslora", |p| p.model.lora.use_rslora),
        ("use_dora", |p| p.model.lora.use_dora),
    ];
    for (flag, read) in flags {
        assert!(!read(&own) && !serde_json::to_string(&own)?.contains(flag));
        let mut on = example();
        on["model"]["lora"][flag] = json!(true);
        let on = parse(&on)?;
        assert!(read(&on));
        assert!(serde_json::to_string(&on)?.contains(&format!(r#""{flag}":true"#)));
    }
    // TRL's top_k and min_p reach the sampler; off, they are left out of the written plan.
    assert!(!serde_json::to_string(&own)?.contains("top_k"));
    assert!(!serde_json::to_string(&own)?.contains("min_p"));
    let mut cut = example();
    cut["grpo"]["top_k"] = json!(50);
    cut["grpo"]["min_p"] = json!(0.05);
    let cut = parse(&cut)?;
    assert_eq!((cut.grpo.top_k, cut.grpo.min_p), (50, 0.05));
    assert!(!serde_json::to_string(&own)?.contains("repetition_penalty"));
    let mut penalised = example();
    penalised["grpo"]["repetition_penalty"] = json!(1.1);
    assert_eq!(parse(&penalised)?.grpo.repetition_penalty, 1.1);
    penalised["grpo"]["repetition_penalty"] = json!(0.0);
    assert_eq!(field_error(&penalised).0, "grpo.repetition_penalty");
    // TRL's mask_truncated_completions reaches the trainer (hr-grpo's train tests show its
    // effect); off, it is left out.
    assert!(!serde_json::to_string(&own)?.contains("mask_truncated"));
    let mut masked = example();
    masked["grpo"]["mask_truncated_completions"] = json!(true);
    assert!(parse(&masked)?.grpo.mask_truncated_completions);
    // TRL's adam_beta1 / adam_beta2 are the optimizer's beta1 / beta2.
    let (mut trl, mut ours) = (example(), example());
    trl["optimizer"]["adam_beta1"] = json!(0.8);
    trl["optimizer"]["adam_beta2"] = json!(0.99);
    ours["optimizer"]["beta1"] = json!(0.8);
    ours["optimizer"]["beta2"] = json!(0.99);
    assert_eq!(parse(&trl)?, parse(&ours)?);
    assert_ne!(parse(&trl)?, own);
    // TRL's boolean scale_rewards: true is `group`, false is `none`.
    for (flag, word) in [(true, "group"), (false, "none")] {
        let (mut a, mut b) = (example(), example());
        a["grpo"]["scale_rewards"] = json!(flag);
        b["grpo"]["scale_rewards"] = json!(word);
        assert_eq!(parse(&a)?, parse(&b)?, "{flag}");
    }
    let mut bad = example();
    bad["grpo"]["scale_rewards"] = json!("std");
    let (field, message) = field_error(&bad);
    assert_eq!(field, "grpo.scale_rewards");
    assert!(message.contains("true (group)"), "{message}");
    // transformers' linear schedule, TRL's default.
    let mut linear = example();
    linear["optimizer"]["decay"] = json!("linear");
    assert_eq!(parse(&linear)?.optimizer.decay, hr_plan::Decay::Linear);
    // The same field twice under two names is refused.
    peft["model"]["lora"]["rank"] = json!(4);
    let (field, message) = field_error(&peft);
    assert_eq!(field, "model.lora");
    assert!(message.contains("duplicate field `rank`"), "{message}");
    Ok(())
}

#[test]
fn trl_names_that_need_more_than_a_rename_mean_what_trl_means() -> anyhow::Result<()> {
    let parse = |v: &Value| Plan::parse(Path::new("plan.json"), &v.to_string());
    let with = |edit: &dyn Fn(&mut Value)| {
        let mut p = example();
        edit(&mut p);
        p
    };
    // max_steps is steps.
    let trl = with(&|p| {
        let steps = p
            .as_object_mut()
            .and_then(|o| o.remove("steps"))
            .expect("steps");
        p["max_steps"] = steps;
    });
    assert_eq!(parse(&trl)?, parse(&example())?);
    // save_steps is checkpoints.every; lora_dropout 0 is no dropout.
    let g = parse(&with(&|p| p["save_steps"] = json!(2)))?;
    assert_eq!(g.checkpoints.every, 2);
    let mut own_every = example();
    own_every["checkpoints"] = json!({"every": 2});
    assert_eq!(g, parse(&own_every)?);
    // save_total_limit is checkpoints.keep_last (None, keep all, is 0), outside the digest.
    let limited = parse(&with(&|p| p["save_total_limit"] = json!(5)))?;
    assert_eq!(limited.checkpoints.keep_last, 5);
    assert_eq!(limited.sha256(), parse(&example())?.sha256());
    let all = parse(&with(&|p| p["save_total_limit"] = Value::Null))?;
    assert_eq!(all.checkpoints.keep_last, 0);
    assert_eq!(
        parse(&with(&|p| p["model"]["lora"]["lora_dropout"] = json!(0.0)))?,
        parse(&example())?
    );
    // PEFT's lora_dropout is dropout, written only when on (so other plans keep their digest).
    let dropped = parse(&with(&|p| p["model"]["lora"]["lora_dropout"] = json!(0.05)))?;
    assert_eq!(dropped.model.lora.dropout, 0.05);
    assert!(serde_json::to_string(&dropped)?.contains(r#""dropout":0.05"#));
    assert!(!serde_json::to_string(&parse(&example())?)?.contains("dropout"));
    // epsilon sets both clip bounds, unless epsilon_high is given.
    let g = parse(&with(&|p| p["grpo"]["epsilon"] = json!(0.3)))?.grpo;
    assert_eq!((g.epsilon_low, g.epsilon_high), (0.3, 0.3));
    let g = parse(&with(&|p| {
        p["grpo"]["epsilon"] = json!(0.3);
        p["grpo"]["epsilon_high"] = json!(0.28);
    }))?
    .grpo;
    assert_eq!((g.epsilon_low, g.epsilon_high), (0.3, 0.28));
    // lr_scheduler_type is decay; warmup_ratio counts warm-up steps as transformers does.
    let o = parse(&with(&|p| {
        p["optimizer"]["lr_scheduler_type"] = json!("linear");
        p["optimizer"]["warmup_ratio"] = json!(0.3);
    }))?
    .optimizer;
    assert_eq!(
        (o.decay, o.warmup_steps),
        (hr_plan::Decay::Linear, 2),
        "ceil(0.3 · 4)"
    );
    let o = parse(&with(&|p| {
        p["optimizer"]["lr_scheduler_type"] = json!("constant_with_warmup");
        p["optimizer"]["warmup_steps"] = json!(1);
    }))?
    .optimizer;
    assert_eq!((o.decay, o.warmup_steps), (hr_plan::Decay::Constant, 1));
    // Refusals name the TRL field.
    for (edit, field) in [
        (
            &(|p: &mut Value| p["max_steps"] = json!(4)) as &dyn Fn(&mut Value),
            "max_steps",
        ),
        (
            &|p: &mut Value| {
                p["grpo"]["epsilon"] = json!(0.3);
                p["grpo"]["epsilon_low"] = json!(0.2);
            },
            "grpo.epsilon",
        ),
        (
            &|p: &mut Value| {
                p["optimizer"]["lr_scheduler_type"] = json!("constant");
                p["optimizer"]["warmup_steps"] = json!(1);
            },
            "optimizer.lr_scheduler_type",
        ),
        (
            &|p: &mut Value| p["optimizer"]["lr_scheduler_type"] = json!("polynomial"),
            "optimizer.lr_scheduler_type",
        ),
        (
            &|p: &mut Value| p["optimizer"]["warmup_ratio"] = json!(1.5),
            "optimizer.warmup_ratio",
        ),
        (
            &|p: &mut Value| p["model"]["lora"]["lora_dropout"] = json!(1.0),
            "model.lora.dropout",
        ),
        (
            &|p: &mut Value| {
                p["save_steps"] = json!(2);
                p["checkpoints"] = json!({"every": 1});
            },
            "save_steps",
        ),
    ] {
        assert_eq!(field_error(&with(edit)).0, field);
    }
    Ok(())
}

#[test]
fn trl_fields_not_offered_pass_at_their_harmless_value_and_are_refused_otherwise()
-> anyhow::Result<()> {
    let parse = |v: &Value| Plan::parse(Path::new("plan.json"), &v.to_string());
    let with = |key: &str, value: Value| {
        let mut p = example();
        p["grpo"][key] = value;
        p
    };
    let episodes = {
        let g = parse(&example())?.grpo;
        g.tasks_per_step * g.num_generations
    };
    for (key, harmless) in [
        ("sync_ref_model", json!(false)),
        ("ref_model_sync_steps", json!(512)),
        ("generation_batch_size", json!(episodes)),
        ("steps_per_generation", json!(1)),
        ("multi_objective_aggregation", json!("sum_then_normalize")),
    ] {
        assert_eq!(parse(&with(key, harmless))?, parse(&example())?, "{key}");
    }
    for (key, value, instead) in [
        ("sync_ref_model", json!(true), "grpo.beta"),
        (
            "generation_batch_size",
            json!(episodes * 2),
            "num_iterations",
        ),
        ("steps_per_generation", json!(4), "num_iterations"),
        (
            "multi_objective_aggregation",
            json!("normalize_then_sum"),
            "sum_then_normalize",
        ),
    ] {
        let (field, message) = field_error(&with(key, value));
        assert_eq!(field, format!("grpo.{key}"));
        assert!(message.contains(instead), "{key}: {message}");
    }
    for (key, value) in [
        ("delta", json!(0.9)),
        ("sapo_temperature_neg", json!(0.0)),
        ("vespo_k_pos", json!(-1.0)),
        ("off_policy_mask_threshold", json!(0.0)),
        ("top_entropy_quantile", json!(1.5)),
        ("entropy_coef", json!(-0.1)),
        // Read only with adaptive control.
        ("entropy_target", json!(0.5)),
        ("entropy_coef_delta", json!(0.01)),
        ("importance_sampling_level", json!("episode")),
        ("loss_type", json!("ppo")),
    ] {
        assert!(field_error(&with(key, value)).0.contains(key), "{key}");
    }
    // With adaptive control on, the settings are ranges checked.
    let mut adaptive = example();
    adaptive["grpo"]["use_adaptive_entropy"] = json!(true);
    adaptive["grpo"]["entropy_target"] = json!(0.5);
    let parsed = parse(&adaptive)?.grpo;
    assert!(parsed.use_adaptive_entropy && parsed.entropy_target == 0.5);
    adaptive["grpo"]["entropy_coef_min"] = json!(2.0);
    assert_eq!(field_error(&adaptive).0, "grpo.entropy_coef_max");
    Ok(())
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
