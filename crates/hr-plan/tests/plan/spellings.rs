//! PEFT's and TRL's spellings: plain renames, the TRL names that need computing, and the TRL
//! fields not offered, accepted at their harmless value and refused otherwise.

use std::path::Path;

use hr_plan::Plan;
use serde_json::{Value, json};

use crate::{example, field_error};

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
