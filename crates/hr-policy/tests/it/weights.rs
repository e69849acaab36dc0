//! Loading errors name the file, the tensor or the field, and the fix.

use std::collections::BTreeMap;

use hr_policy::{ChatTokenizer, Message, ModelConfig, Policy, PolicyError, RopeScaling, host_f32};
use hr_tests::tiny_model::{EOS, TinySpec, write_tiny_model};
use safetensors::Dtype;
use safetensors::tensor::TensorView;

use crate::Cpu;

fn write_weights(
    path: &std::path::Path,
    tensors: &BTreeMap<String, (Vec<usize>, Vec<f32>)>,
) -> anyhow::Result<()> {
    let bytes: BTreeMap<&String, Vec<u8>> = tensors
        .iter()
        .map(|(n, (_, v))| (n, v.iter().flat_map(|x| x.to_le_bytes()).collect()))
        .collect();
    let views: Vec<(String, TensorView<'_>)> = tensors
        .iter()
        .map(|(n, (s, _))| {
            (
                n.clone(),
                TensorView::new(Dtype::F32, s.clone(), &bytes[n]).expect("view"),
            )
        })
        .collect();
    std::fs::write(path, safetensors::serialize(views, None)?)?;
    Ok(())
}

fn load_err(dir: &std::path::Path) -> String {
    match Policy::<Cpu>::load(dir, &Default::default()) {
        Ok(_) => panic!("load should fail"),
        Err(e) => e.to_string(),
    }
}

#[test]
fn a_missing_wrong_shaped_or_unknown_tensor_is_named() -> anyhow::Result<()> {
    let dir = tempfile::tempdir()?;
    let model = write_tiny_model(dir.path(), &TinySpec::default());
    let path = dir.path().join("model.safetensors");

    let mut missing = model.tensors.clone();
    missing.remove("model.layers.1.mlp.up_proj.weight");
    write_weights(&path, &missing)?;
    let err = load_err(dir.path());
    assert!(
        err.contains("model.layers.1.mlp.up_proj.weight") && err.contains("missing"),
        "{err}"
    );

    let mut wrong = model.tensors.clone();
    wrong.insert(
        "model.layers.0.self_attn.k_proj.weight".into(),
        (vec![8, 32], vec![0.0; 256]),
    );
    write_weights(&path, &wrong)?;
    let err = load_err(dir.path());
    assert!(
        err.contains("model.layers.0.self_attn.k_proj.weight") && err.contains("[8, 32]"),
        "{err}"
    );

    let mut extra = model.tensors.clone();
    extra.insert(
        "model.layers.0.self_attn.q_proj.bias".into(),
        (vec![32], vec![0.0; 32]),
    );
    write_weights(&path, &extra)?;
    let err = load_err(dir.path());
    assert!(
        err.contains("model.layers.0.self_attn.q_proj.bias")
            && err.contains("not a tensor of this model"),
        "{err}"
    );

    // Files are read tensor by tensor, so their headers are checked against the file itself:
    // a truncated or padded file, or a header that lies about its length, is refused.
    write_weights(&path, &model.tensors)?;
    let whole = std::fs::read(&path)?;
    for (what, bytes) in [
        ("truncated", whole[..whole.len() - 4].to_vec()),
        ("padded", [whole.as_slice(), &[0; 4]].concat()),
        (
            "header length",
            [&u64::MAX.to_le_bytes()[..], &whole[8..]].concat(),
        ),
        ("short", whole[..5].to_vec()),
    ] {
        std::fs::write(&path, bytes)?;
        let err = load_err(dir.path());
        assert!(
            err.contains("not a valid safetensors file"),
            "{what}: {err}"
        );
    }
    std::fs::write(&path, b"not safetensors")?;
    assert!(load_err(dir.path()).contains("not a valid safetensors file"));
    Ok(())
}

#[test]
fn a_config_whose_layer_count_the_weights_do_not_hold_is_refused_before_loading_them()
-> anyhow::Result<()> {
    let dir = tempfile::tempdir()?;
    write_tiny_model(dir.path(), &TinySpec::default());
    let path = dir.path().join("config.json");
    let mut config: serde_json::Value = serde_json::from_str(&std::fs::read_to_string(&path)?)?;
    // Within the config's own bound, but not what the two-layer weights hold.
    config["num_hidden_layers"] = serde_json::json!(1000);
    std::fs::write(&path, config.to_string())?;
    let err = load_err(dir.path());
    assert!(
        err.contains("num_hidden_layers")
            && err.contains("1000 but the weights hold 2 decoder layers"),
        "{err}"
    );
    Ok(())
}

#[test]
fn sharded_weights_load_like_a_single_file() -> anyhow::Result<()> {
    let dir = tempfile::tempdir()?;
    let model = write_tiny_model(dir.path(), &TinySpec::default());
    let single = Policy::<Cpu>::load(dir.path(), &Default::default())?;
    let expected = host_f32(single.logits(None, &[vec![3, 4, 5, 6]])?)?;

    std::fs::remove_file(dir.path().join("model.safetensors"))?;
    let (first, second): (BTreeMap<_, _>, BTreeMap<_, _>) = model
        .tensors
        .into_iter()
        .partition(|(n, _)| n.contains("layers.0") || n.contains("embed"));
    write_weights(&dir.path().join("model-00001-of-00002.safetensors"), &first)?;
    write_weights(
        &dir.path().join("model-00002-of-00002.safetensors"),
        &second,
    )?;
    let mut map = serde_json::Map::new();
    for name in first.keys() {
        map.insert(name.clone(), "model-00001-of-00002.safetensors".into());
    }
    for name in second.keys() {
        map.insert(name.clone(), "model-00002-of-00002.safetensors".into());
    }
    std::fs::write(
        dir.path().join("model.safetensors.index.json"),
        serde_json::to_vec(&serde_json::json!({"metadata": {}, "weight_map": map}))?,
    )?;
    let sharded = Policy::<Cpu>::load(dir.path(), &Default::default())?;
    assert_eq!(
        expected,
        host_f32(sharded.logits(None, &[vec![3, 4, 5, 6]])?)?
    );
    Ok(())
}

#[test]
fn bad_configs_name_the_field() -> anyhow::Result<()> {
    let base = serde_json::json!({
        "model_type": "llama", "vocab_size": 64, "hidden_size": 32, "intermediate_size": 64,
        "num_hidden_layers": 2, "num_attention_heads": 4, "num_key_value_heads": 2,
    });
    let path = std::path::Path::new("config.json");
    assert!(ModelConfig::from_json(path, &base.to_string()).is_ok());
    for (field, value) in [
        ("model_type", serde_json::json!("gpt2")),
        ("num_key_value_heads", serde_json::json!(3)),
        ("hidden_size", serde_json::json!(-1)),
        (
            "rope_scaling.type",
            serde_json::json!({"type": "yarn", "factor": 2.0}),
        ),
        ("rope_scaling.factor", serde_json::json!({"type": "linear"})),
        (
            "rope_scaling.high_freq_factor",
            serde_json::json!({"rope_type": "llama3", "factor": 8.0, "low_freq_factor": 4.0,
                "high_freq_factor": 1.0, "original_max_position_embeddings": 8192}),
        ),
        ("rope_scaling", serde_json::json!("linear")),
        ("partial_rotary_factor", serde_json::json!(0.5)),
        ("layer_types", serde_json::json!(["full_attention"])),
        ("bos_token_id", serde_json::json!(-1)),
        ("hidden_act", serde_json::json!("gelu")),
        ("eos_token_id", serde_json::json!(999)),
        (
            "rope_parameters.rope_type",
            serde_json::json!({"rope_type": "yarn", "rope_theta": 10000.0}),
        ),
        (
            "rope_parameters.rope_theta",
            serde_json::json!({"rope_type": "default", "rope_theta": -1.0}),
        ),
        ("rope_parameters", serde_json::json!(5)),
        // Sizes far beyond any published model are refused before anything is sized by them.
        ("num_hidden_layers", serde_json::json!(1_000_000_000)),
        ("vocab_size", serde_json::json!(1_u64 << 40)),
        ("intermediate_size", serde_json::json!(1_u64 << 32)),
        ("num_attention_heads", serde_json::json!(1_000_000)),
    ] {
        let key = field.split('.').next().unwrap_or(field);
        let mut bad = base.clone();
        bad[key] = value;
        match ModelConfig::from_json(path, &bad.to_string()) {
            Err(PolicyError::Config { field: named, .. }) => assert_eq!(named, field),
            other => panic!("{field}: expected a config error, got {other:?}"),
        }
    }
    // transformers 5 writes RoPE's base as `rope_parameters.rope_theta`.
    let mut v5 = base.clone();
    v5["rope_parameters"] = serde_json::json!({"rope_type": "default", "rope_theta": 500000.0});
    let config = ModelConfig::from_json(path, &v5.to_string())?;
    assert_eq!(config.rope_theta, 500000.0);
    // A valid id may be 0.
    let mut bos0 = base.clone();
    bos0["bos_token_id"] = serde_json::json!(0);
    assert_eq!(
        ModelConfig::from_json(path, &bos0.to_string())?.bos_token_id,
        Some(0)
    );
    let mut missing = base;
    missing
        .as_object_mut()
        .expect("object")
        .remove("vocab_size");
    let err = ModelConfig::from_json(path, &missing.to_string()).expect_err("missing field");
    assert!(
        err.to_string().contains("`vocab_size`: is missing"),
        "{err}"
    );
    Ok(())
}

#[test]
fn families_rope_scaling_and_windows_read_in_both_spellings() -> anyhow::Result<()> {
    let path = std::path::Path::new("config.json");
    let parse = |v: &serde_json::Value| ModelConfig::from_json(path, &v.to_string());
    let base = serde_json::json!({
        "model_type": "llama", "vocab_size": 64, "hidden_size": 32, "intermediate_size": 64,
        "num_hidden_layers": 2, "num_attention_heads": 4, "num_key_value_heads": 2,
        "head_dim": 16, "rope_theta": 500000.0,
    });
    // Llama 3.1's scaling as the Hub writes it and as transformers 5 writes it.
    let llama3 = serde_json::json!({"rope_type": "llama3", "factor": 8.0, "low_freq_factor": 1.0,
        "high_freq_factor": 4.0, "original_max_position_embeddings": 8192});
    let mut hub = base.clone();
    hub["rope_scaling"] = llama3.clone();
    let mut v5 = base.clone();
    v5.as_object_mut().expect("object").remove("rope_theta");
    v5["rope_parameters"] = llama3;
    v5["rope_parameters"]["rope_theta"] = serde_json::json!(500000.0);
    let (hub, v5) = (parse(&hub)?, parse(&v5)?);
    assert_eq!(hub, v5);
    assert_eq!(hub.head_dim, 16, "head_dim need not be hidden / heads");
    let plain = parse(&base)?.rope_inv_freq(0);
    let scaled = hub.rope_inv_freq(0);
    // transformers' `_compute_llama3_parameters`: wavelengths under 8192/4 = 2048 are kept,
    // over 8192 divided by 8, between interpolated.
    for (f, s) in plain.iter().zip(&scaled) {
        let wavelen = 2.0 * std::f64::consts::PI / f;
        if wavelen < 2048.0 {
            assert_eq!(s, f);
        } else if wavelen > 8192.0 {
            assert_eq!(*s, f / 8.0);
        } else {
            let smooth = (8192.0 / wavelen - 1.0) / 3.0;
            assert!((s - ((1.0 - smooth) * f / 8.0 + smooth * f)).abs() < 1e-15);
            assert!(*s < *f && *s > f / 8.0);
        }
    }
    assert!(scaled.iter().zip(&plain).any(|(s, f)| s != f));
    let mut linear = base.clone();
    linear["rope_scaling"] = serde_json::json!({"type": "linear", "factor": 4.0});
    let linear = parse(&linear)?.rope_inv_freq(0);
    assert!(linear.iter().zip(&plain).all(|(l, p)| *l == p / 4.0));

    // Qwen3: q/k norms, biases only with attention_bias; Mistral: every layer windowed.
    let mut qwen3 = base.clone();
    qwen3["model_type"] = serde_json::json!("qwen3");
    let q = parse(&qwen3)?;
    assert!(q.qk_norm && !q.qkv_bias && !q.o_bias);
    assert_eq!(q.family, hr_policy::Family::Qwen3);
    qwen3["use_sliding_window"] = serde_json::json!(true);
    qwen3["sliding_window"] = serde_json::json!(4);
    qwen3["max_window_layers"] = serde_json::json!(1);
    assert_eq!(parse(&qwen3)?.sliding_windows, vec![None, Some(4)]);
    qwen3["layer_types"] = serde_json::json!(["sliding_attention", "full_attention"]);
    assert_eq!(parse(&qwen3)?.sliding_windows, vec![Some(4), None]);
    qwen3["use_sliding_window"] = serde_json::json!(false);
    assert_eq!(parse(&qwen3)?.sliding_windows, vec![None, None]);
    let mut mistral = base.clone();
    mistral["model_type"] = serde_json::json!("mistral");
    mistral["sliding_window"] = serde_json::json!(3);
    let m = parse(&mistral)?;
    assert_eq!(m.sliding_windows, vec![Some(3), Some(3)]);
    assert!(!m.qk_norm && !m.qkv_bias);
    mistral["sliding_window"] = serde_json::Value::Null;
    assert_eq!(parse(&mistral)?.sliding_windows, vec![None, None]);
    assert_eq!(parse(&base)?.rope_scaling, RopeScaling::None);
    Ok(())
}

#[test]
fn gemma_configs_read_transformers_defaults_and_both_spellings() -> anyhow::Result<()> {
    use hr_policy::{Activation, Family};
    let path = std::path::Path::new("config.json");
    let parse = |v: &serde_json::Value| ModelConfig::from_json(path, &v.to_string());
    let gemma2 = serde_json::json!({
        "model_type": "gemma2", "vocab_size": 64, "hidden_size": 32, "intermediate_size": 64,
        "num_hidden_layers": 4, "num_attention_heads": 4, "num_key_value_heads": 2,
        "head_dim": 8, "hidden_act": "gelu_pytorch_tanh", "hidden_activation": "gelu_pytorch_tanh",
    });
    let g = parse(&gemma2)?;
    assert_eq!(g.family, Family::Gemma2);
    assert_eq!(g.activation, Activation::GeluTanh);
    // transformers' Gemma2Config defaults: soft caps 50 and 30, query_pre_attn_scalar 256, a
    // 4096 window on layers 0, 2, ..., tied embeddings.
    assert_eq!((g.attn_softcap, g.final_softcap), (Some(50.0), Some(30.0)));
    assert_eq!(g.attn_scale, 1.0 / 16.0);
    assert_eq!(g.sliding_windows, vec![Some(4096), None, Some(4096), None]);
    assert!(g.tie_word_embeddings && g.norm_offset && g.sandwich_norms && !g.qk_norm);
    assert_eq!(g.embed_scale, Some(32f64.sqrt()));
    assert_eq!(g.sliding_rope_theta, None);
    assert_eq!(g.rope_inv_freq(0), g.rope_inv_freq(1));
    let mut uncapped = gemma2.clone();
    uncapped["attn_logit_softcapping"] = serde_json::Value::Null;
    uncapped["final_logit_softcapping"] = serde_json::json!(12.5);
    let u = parse(&uncapped)?;
    assert_eq!((u.attn_softcap, u.final_softcap), (None, Some(12.5)));

    // Gemma 3 as the Hub writes it and as transformers 5 does.
    let mut hub = gemma2.clone();
    hub["model_type"] = serde_json::json!("gemma3_text");
    hub["num_hidden_layers"] = serde_json::json!(3);
    hub["sliding_window"] = serde_json::json!(5);
    hub["sliding_window_pattern"] = serde_json::json!(3);
    hub["rope_theta"] = serde_json::json!(1e6);
    hub["rope_local_base_freq"] = serde_json::json!(1e4);
    hub["rope_scaling"] = serde_json::json!({"rope_type": "linear", "factor": 8.0});
    let mut v5 = hub.clone();
    for key in [
        "rope_theta",
        "rope_local_base_freq",
        "rope_scaling",
        "sliding_window_pattern",
    ] {
        v5.as_object_mut().expect("object").remove(key);
    }
    v5["layer_types"] =
        serde_json::json!(["sliding_attention", "sliding_attention", "full_attention"]);
    v5["rope_parameters"] = serde_json::json!({
        "full_attention": {"rope_type": "linear", "factor": 8.0, "rope_theta": 1e6},
        "sliding_attention": {"rope_type": "default", "rope_theta": 1e4},
    });
    let (hub, v5) = (parse(&hub)?, parse(&v5)?);
    assert_eq!(hub, v5);
    assert_eq!(hub.family, Family::Gemma3);
    assert!(hub.qk_norm && hub.attn_softcap.is_none() && hub.final_softcap.is_none());
    assert_eq!(hub.sliding_windows, vec![Some(5), Some(5), None]);
    // Window layers rotate with the local base, unscaled; the full layer with the scaled global.
    let local = hub.rope_inv_freq(0);
    let global = hub.rope_inv_freq(2);
    assert_eq!(local[1], 1e4f64.powf(-2.0 / 8.0));
    assert_eq!(global[1], 1e6f64.powf(-2.0 / 8.0) / 8.0);

    for (field, key, value) in [
        (
            "hidden_activation",
            "hidden_activation",
            serde_json::json!("gelu"),
        ),
        ("sliding_window", "sliding_window", serde_json::Value::Null),
        (
            "final_logit_softcapping",
            "final_logit_softcapping",
            serde_json::json!(-1.0),
        ),
        (
            "use_bidirectional_attention",
            "use_bidirectional_attention",
            serde_json::json!(true),
        ),
        (
            "rope_parameters.sliding_attention.rope_type",
            "rope_parameters",
            serde_json::json!({"full_attention": {"rope_theta": 1e6},
                "sliding_attention": {"rope_type": "linear", "factor": 2.0}}),
        ),
    ] {
        let mut bad = gemma2.clone();
        bad["model_type"] = serde_json::json!("gemma3_text");
        bad[key] = value;
        match ModelConfig::from_json(path, &bad.to_string()) {
            Err(PolicyError::Config { field: named, .. }) => assert_eq!(named, field),
            other => panic!("{field}: expected a config error, got {other:?}"),
        }
    }
    // As transformers reads them: Gemma ignores `hidden_act`, Gemma 3 its attention soft cap; a
    // config without head sizes gets the Gemma classes' 4 key/value heads of width 256.
    let mut lenient = gemma2.clone();
    lenient["model_type"] = serde_json::json!("gemma3_text");
    lenient["hidden_act"] = serde_json::json!("gelu");
    lenient["attn_logit_softcapping"] = serde_json::json!(50.0);
    for key in ["hidden_activation", "head_dim", "num_key_value_heads"] {
        lenient.as_object_mut().expect("object").remove(key);
    }
    let l = parse(&lenient)?;
    assert_eq!(l.activation, Activation::GeluTanh);
    assert_eq!((l.attn_softcap, l.num_kv_heads, l.head_dim), (None, 4, 256));
    assert_eq!(l.max_position_embeddings, 131_072);
    // Per-layer-type RoPE is Gemma 3's; elsewhere it is refused, not read as unscaled.
    let mut llama = gemma2;
    llama["model_type"] = serde_json::json!("llama");
    llama.as_object_mut().expect("object").remove("hidden_act");
    llama["rope_parameters"] = serde_json::json!({"full_attention": {"rope_theta": 1e6}});
    match ModelConfig::from_json(path, &llama.to_string()) {
        Err(PolicyError::Config { field, .. }) => assert_eq!(field, "rope_parameters"),
        other => panic!("expected a config error, got {other:?}"),
    }
    Ok(())
}

#[test]
fn phi3_reads_its_defaults_and_lora_adapts_its_fused_projections() -> anyhow::Result<()> {
    use hr_policy::{Family, LoraConfig, Target};
    let path = std::path::Path::new("config.json");
    let parse = |v: &serde_json::Value| ModelConfig::from_json(path, &v.to_string());
    let mut phi3 = serde_json::json!({
        "model_type": "phi3", "vocab_size": 64, "hidden_size": 32, "intermediate_size": 64,
        "num_hidden_layers": 2, "num_attention_heads": 4, "num_key_value_heads": 2,
        "sliding_window": 7, "rope_scaling": null,
    });
    let p = parse(&phi3)?;
    assert_eq!(p.family, Family::Phi3);
    // transformers' Phi3Config: RMSNorm eps 1e-5, untied, no biases, the window on every layer.
    assert_eq!(p.rms_norm_eps, 1e-5);
    assert!(!p.tie_word_embeddings && !p.qkv_bias && !p.o_bias && !p.qk_norm);
    assert_eq!(p.sliding_windows, vec![Some(7), Some(7)]);
    // Phi-3.5's and Phi-4-mini's long-context RoPE is refused, naming the field.
    phi3["rope_scaling"] = serde_json::json!({"type": "longrope", "short_factor": [1.0, 1.0],
        "long_factor": [1.0, 1.0], "original_max_position_embeddings": 16});
    let err = parse(&phi3).expect_err("longrope").to_string();
    assert!(
        err.contains("rope_scaling.type") && err.contains("longrope"),
        "{err}"
    );

    // LoRA adapts what the family has: `all-linear` (every name) keeps Phi-3's four, and names
    // only another family's projections are refused, naming Phi-3's.
    let all = LoraConfig::new(4, 8.0, Target::ALL.to_vec())?.fit(&p)?;
    assert_eq!(
        all.targets,
        [
            Target::OProj,
            Target::DownProj,
            Target::QkvProj,
            Target::GateUpProj
        ]
    );
    assert_eq!(Target::QkvProj.dims(&p), (32, 32 + 2 * 16));
    assert_eq!(Target::GateUpProj.dims(&p), (32, 128));
    let err = LoraConfig::new(4, 8.0, vec![Target::QProj, Target::VProj])?
        .fit(&p)
        .expect_err("q_proj on phi3")
        .to_string();
    assert!(
        err.contains("a `phi3` model has qkv_proj, o_proj, gate_up_proj, down_proj"),
        "{err}"
    );
    let regex = LoraConfig::new(4, 8.0, vec![Target::QProj])?
        .with_pattern(r".*\.(qkv|v)_proj")?
        .fit(&p)?;
    assert_eq!(
        regex.adapted(2),
        [(0, Target::QkvProj), (1, Target::QkvProj)]
    );
    let err = LoraConfig::new(4, 8.0, vec![Target::QProj])?
        .with_pattern(r".*(qkv_proj|resid_attn_dropout)")?
        .fit(&p)
        .expect_err("a dropout module")
        .to_string();
    assert!(err.contains("resid_attn_dropout"), "{err}");
    Ok(())
}

#[test]
fn the_tokenizer_reads_tokenizer_json_and_formats_chatml() -> anyhow::Result<()> {
    let dir = tempfile::tempdir()?;
    write_tiny_model(dir.path(), &TinySpec::default());
    let tok = ChatTokenizer::from_file(&dir.path().join("tokenizer.json"))?;
    let ids = tok.encode_chat(&[Message::new("user", "so the answer is 42")])?;
    assert_eq!(ids[0], 1, "<|im_start|> is one special token");
    assert!(ids.contains(&EOS), "<|im_end|> closes the user turn");
    assert!(
        ids.contains(&tok.token_id("Ġthe").expect("merged token")),
        "BPE merges apply: {ids:?}"
    );
    let text_ids = tok.encode("héllo wörld")?;
    assert_eq!(tok.decode(&text_ids)?, "héllo wörld");
    assert_eq!(
        tok.chat_prompt(&[Message::new("system", "S"), Message::new("user", "U")])?,
        "<|im_start|>system\nS<|im_end|>\n<|im_start|>user\nU<|im_end|>\n<|im_start|>assistant\n"
    );
    let err = ChatTokenizer::from_file(&dir.path().join("nope.json")).expect_err("missing file");
    assert!(err.to_string().contains("nope.json"));

    // A model that ships its own template gets that template, and the template's end-of-turn
    // token ends completions.
    let template = "{% for m in messages %}<|im_start|>[{{ m.role | upper }}] {{ m.content }}\
        <|im_end|>{% endfor %}{% if add_generation_prompt %}<|im_start|>[ASSISTANT] {% endif %}";
    std::fs::write(
        dir.path().join("tokenizer_config.json"),
        serde_json::json!({"chat_template": template, "eos_token": "<|im_end|>"}).to_string(),
    )?;
    let tok = ChatTokenizer::from_file(&dir.path().join("tokenizer.json"))?;
    assert_eq!(
        tok.chat_prompt(&[Message::new("user", "U")])?,
        "<|im_start|>[USER] U<|im_end|><|im_start|>[ASSISTANT] "
    );
    assert_eq!(tok.stop_token_ids(), vec![EOS]);
    // The turn after an environment reply, as the template writes it; a turn that stopped on
    // the end-of-turn token does not get a second one.
    let reply = Message::new("user", "R");
    let after = tok.encode_continuation(&[Message::new("user", "U")], &reply, None)?;
    assert_eq!(tok.decode(&after)?, "[USER] R[ASSISTANT] ");
    assert_eq!(
        tok.decode_with_special(&after)?,
        "<|im_end|><|im_start|>[USER] R<|im_end|><|im_start|>[ASSISTANT] ",
        "the prompt as the model reads it"
    );
    assert_eq!(after[0], EOS, "the open turn is closed first");
    let stopped = tok.encode_continuation(&[Message::new("user", "U")], &reply, Some(EOS))?;
    assert_eq!(stopped, after[1..]);
    Ok(())
}
