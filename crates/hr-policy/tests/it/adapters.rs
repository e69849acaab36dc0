//! PEFT adapter files: byte-exact round trips and errors that name the tensor or field.

use hr_policy::{
    ADAPTER_CONFIG, ADAPTER_WEIGHTS, Adapters, LoraConfig, PolicyRng, Target, host_f32,
    load_adapters, save_adapters,
};
use hr_tests::tiny_model::TinySpec;
use safetensors::SafeTensors;

use crate::{Cpu, tiny};

fn files(dir: &std::path::Path) -> anyhow::Result<(Vec<u8>, Vec<u8>)> {
    Ok((
        std::fs::read(dir.join(ADAPTER_WEIGHTS))?,
        std::fs::read(dir.join(ADAPTER_CONFIG))?,
    ))
}

#[test]
fn save_load_save_gives_identical_bytes_with_peft_names() -> anyhow::Result<()> {
    let dir = tempfile::tempdir()?;
    let (_, policy) = tiny(&dir.path().join("model"), &TinySpec::default())?;
    let lora = LoraConfig::new(
        4,
        16.0,
        vec![Target::QProj, Target::VProj, Target::GateProj],
    )?;
    let mut adapters =
        Adapters::<Cpu>::init(&policy, lora, &mut PolicyRng::from_seed(8), policy.device());
    // Give B non-zero values so the round trip covers both matrices.
    let pair = adapters.layers[1].slots[0].take().expect("q_proj adapter");
    adapters.layers[1].slots[0] = Some(hr_policy::LoraPair {
        b: pair.b.map(|b| b.add_scalar(0.25)),
        a: pair.a,
        magnitude: pair.magnitude,
    });
    save_adapters(&adapters, "tiny", &dir.path().join("one"))?;
    let loaded = load_adapters::<Cpu>(policy.config(), &dir.path().join("one"), policy.device())?;
    save_adapters(&loaded, "tiny", &dir.path().join("two"))?;
    assert_eq!(
        files(&dir.path().join("one"))?,
        files(&dir.path().join("two"))?
    );

    let (weights, _) = files(&dir.path().join("one"))?;
    let parsed = SafeTensors::deserialize(&weights)?;
    let a = parsed.tensor("base_model.model.model.layers.1.self_attn.q_proj.lora_A.weight")?;
    assert_eq!(a.shape(), [4, 32]);
    let b = parsed.tensor("base_model.model.model.layers.0.mlp.gate_proj.lora_B.weight")?;
    assert_eq!(b.shape(), [64, 4]);
    assert_eq!(parsed.len(), 2 * 3 * 2);
    let config: serde_json::Value =
        serde_json::from_slice(&std::fs::read(dir.path().join("one").join(ADAPTER_CONFIG))?)?;
    assert_eq!(
        config["target_modules"],
        serde_json::json!(["q_proj", "v_proj", "gate_proj"])
    );
    assert_eq!(
        (config["r"].as_u64(), config["lora_alpha"].as_f64()),
        (Some(4), Some(16.0))
    );

    let again = save_adapters(&loaded, "tiny", &dir.path().join("one")).expect_err("no overwrite");
    assert!(
        again.to_string().contains("refusing to overwrite"),
        "{again}"
    );
    Ok(())
}

#[test]
fn a_wrong_shape_missing_tensor_or_unsupported_option_is_named() -> anyhow::Result<()> {
    let dir = tempfile::tempdir()?;
    let (_, policy) = tiny(&dir.path().join("model"), &TinySpec::default())?;
    let lora = LoraConfig::new(2, 4.0, vec![Target::KProj])?;
    let adapters =
        Adapters::<Cpu>::init(&policy, lora, &mut PolicyRng::from_seed(8), policy.device());
    let out = dir.path().join("adapter");
    save_adapters(&adapters, "tiny", &out)?;
    let load_err = || {
        load_adapters::<Cpu>(policy.config(), &out, policy.device())
            .expect_err("refused")
            .to_string()
    };

    // The same files claim rank 3: every tensor has the wrong shape.
    let config_path = out.join(ADAPTER_CONFIG);
    let original = std::fs::read_to_string(&config_path)?;
    std::fs::write(&config_path, original.replace("\"r\": 2", "\"r\": 3"))?;
    let err = load_err();
    assert!(
        err.contains("base_model.model.model.layers.0.self_attn.k_proj.lora_A.weight")
            && err.contains("[2, 32]"),
        "{err}"
    );

    // Claiming an extra target: its tensors are missing.
    std::fs::write(
        &config_path,
        original.replace("\"k_proj\"", "\"k_proj\", \"o_proj\""),
    )?;
    let err = load_err();
    assert!(
        err.contains("self_attn.o_proj.lora_A.weight") && err.contains("missing"),
        "{err}"
    );

    std::fs::write(
        &config_path,
        original.replace("\"use_dora\": false", "\"use_dora\": true"),
    )?;
    // DoRA claimed without its magnitudes: the missing tensor is named.
    let err = load_err();
    assert!(err.contains(".lora_magnitude_vector`: missing"), "{err}");
    std::fs::write(&config_path, original.replace("\"k_proj\"", "\"qkv\""))?;
    assert!(load_err().contains("`qkv` is not one of"));
    Ok(())
}

#[test]
fn mutated_adapter_files_load_or_fail_with_a_typed_error() -> anyhow::Result<()> {
    use proptest::prelude::*;
    use proptest::test_runner::{Config, TestRunner};
    let dir = tempfile::tempdir()?;
    let (_, policy) = tiny(&dir.path().join("model"), &TinySpec::default())?;
    let lora = LoraConfig::new(2, 4.0, vec![Target::QProj, Target::VProj])?;
    let adapters =
        Adapters::<Cpu>::init(&policy, lora, &mut PolicyRng::from_seed(8), policy.device());
    let files = hr_policy::adapter_files(&adapters, "tiny")?;
    let edits = prop::collection::vec(any::<(u8, usize, u8)>(), 1..6);
    let mut runner = TestRunner::new(Config::with_cases(1500));
    runner
        .run(&(any::<bool>(), edits), |(in_config, edits)| {
            let mut broken = files.clone();
            if in_config {
                hr_tests::mutate::mutate(&mut broken.config, &edits);
            } else {
                hr_tests::mutate::mutate(&mut broken.weights, &edits);
            }
            // Either outcome is fine; a panic fails the test.
            let _ = hr_policy::adapters_from_files::<Cpu>(
                policy.config(),
                &broken,
                std::path::Path::new("fuzzed"),
                policy.device(),
            );
            let _ =
                hr_policy::read_f32_safetensors(std::path::Path::new("fuzzed"), &broken.weights);
            Ok(())
        })
        .map_err(|e| anyhow::anyhow!("{e}"))?;
    Ok(())
}

#[test]
fn rslora_scales_by_alpha_over_the_root_of_the_rank_and_its_files_say_so() -> anyhow::Result<()> {
    let dir = tempfile::tempdir()?;
    let (_, policy) = tiny(&dir.path().join("model"), &TinySpec::default())?;
    let (rank, alpha) = (4, 8.0);
    let adapters = |lora: LoraConfig| {
        let mut a =
            Adapters::<Cpu>::init(&policy, lora, &mut PolicyRng::from_seed(8), policy.device());
        let pair = a.layers[0].slots[2].take().expect("v_proj adapter");
        a.layers[0].slots[2] = Some(hr_policy::LoraPair {
            b: pair.b.map(|b| b.add_scalar(0.5)),
            a: pair.a,
            magnitude: pair.magnitude,
        });
        a
    };
    let rs = adapters(LoraConfig::new(rank, alpha, vec![Target::VProj])?.with_rslora(true));
    assert_eq!(rs.scale(), 4.0, "alpha / sqrt(r)");
    // The same update as plain LoRA with alpha·√r (scale alpha·√r / r = alpha / √r).
    let plain = adapters(LoraConfig::new(rank, alpha * 2.0, vec![Target::VProj])?);
    assert_eq!(plain.scale(), rs.scale());
    let rows = [vec![1, 40, 41, 42, 7]];
    let (a, b) = (
        host_f32(policy.logits(Some(&rs), &rows)?)?,
        host_f32(policy.logits(Some(&plain), &rows)?)?,
    );
    assert_eq!(a, b);
    let base = host_f32(policy.logits(None, &rows)?)?;
    assert_ne!(a, base, "the adapters change the logits");
    // PEFT's use_rslora is written, and read back.
    let out = dir.path().join("rs");
    save_adapters(&rs, "tiny", &out)?;
    let config: serde_json::Value =
        serde_json::from_slice(&std::fs::read(out.join(ADAPTER_CONFIG))?)?;
    assert_eq!(config["use_rslora"], true);
    let loaded = load_adapters::<Cpu>(policy.config(), &out, policy.device())?;
    assert!(loaded.config().rslora);
    assert_eq!(host_f32(policy.logits(Some(&loaded), &rows)?)?, a);
    Ok(())
}

#[test]
fn an_adapter_holding_a_nan_is_refused_naming_the_tensor() -> anyhow::Result<()> {
    let dir = tempfile::tempdir()?;
    let (_, policy) = tiny(&dir.path().join("model"), &TinySpec::default())?;
    let mut adapters = Adapters::<Cpu>::init(
        &policy,
        LoraConfig::new(2, 4.0, vec![Target::VProj])?,
        &mut PolicyRng::from_seed(8),
        policy.device(),
    );
    let pair = adapters.layers[1].slots[2].take().expect("v_proj adapter");
    adapters.layers[1].slots[2] = Some(hr_policy::LoraPair {
        b: pair.b.map(|b| b.add_scalar(f32::NAN)),
        a: pair.a,
        magnitude: pair.magnitude,
    });
    let out = dir.path().join("nan");
    save_adapters(&adapters, "tiny", &out)?;
    let Err(err) = load_adapters::<Cpu>(policy.config(), &out, policy.device()) else {
        panic!("a NaN is refused");
    };
    let err = err.to_string();
    assert!(
        err.contains("layers.1.self_attn.v_proj.lora_B") && err.contains("NaN"),
        "{err}"
    );
    Ok(())
}

#[test]
fn a_layer_subset_or_a_regular_expression_adapts_what_peft_would_and_round_trips()
-> anyhow::Result<()> {
    let dir = tempfile::tempdir()?;
    let (_, policy) = tiny(&dir.path().join("model"), &TinySpec::default())?;
    let layers = policy.config().num_layers;
    assert!(layers >= 2, "the tiny model has {layers} layers");
    let subset = LoraConfig::new(2, 4.0, vec![Target::QProj, Target::DownProj])?
        .with_layers(Some(vec![1, 1]));
    assert_eq!(
        subset.adapted(layers),
        [(1, Target::QProj), (1, Target::DownProj)]
    );
    let regex = LoraConfig::new(2, 4.0, vec![Target::QProj])?
        .with_pattern(r"model\.layers\.0\.(self_attn\.v|mlp\.up)_proj")?;
    assert_eq!(
        regex.adapted(layers),
        [(0, Target::VProj), (0, Target::UpProj)]
    );
    for (name, lora) in [("subset", subset), ("regex", regex)] {
        let adapters = Adapters::<Cpu>::init(
            &policy,
            lora.clone(),
            &mut PolicyRng::from_seed(1),
            policy.device(),
        );
        let present: usize = adapters
            .layers
            .iter()
            .map(|l| l.slots.iter().flatten().count())
            .sum();
        assert_eq!(present, 2, "{name}");
        save_adapters(&adapters, "tiny", &dir.path().join(name))?;
        let back = load_adapters::<Cpu>(policy.config(), &dir.path().join(name), policy.device())?;
        assert_eq!(back.config(), adapters.config(), "{name}");
        save_adapters(&back, "tiny", &dir.path().join(format!("{name}-again")))?;
        assert_eq!(
            files(&dir.path().join(name))?,
            files(&dir.path().join(format!("{name}-again")))?,
            "{name}"
        );
    }
    // A layer the model lacks, an expression that selects nothing, and one this cannot read.
    let outside = LoraConfig::new(2, 4.0, vec![Target::QProj])?.with_layers(Some(vec![layers]));
    assert!(outside.fit(policy.config()).is_err());
    let nothing = LoraConfig::new(2, 4.0, vec![Target::QProj])?.with_pattern("model.q_proj")?;
    assert!(nothing.fit(policy.config()).is_err());
    // PEFT would adapt the LM head too: refused, naming it.
    let more = LoraConfig::new(2, 4.0, vec![Target::QProj])?.with_pattern(r".*q_proj|lm_head")?;
    let err = more.fit(policy.config()).expect_err("lm_head").to_string();
    assert!(err.contains("also matches `lm_head`"), "{err}");
    assert!(
        LoraConfig::new(2, 4.0, vec![Target::QProj])?
            .with_pattern("(?<=a)b")
            .is_err()
    );
    Ok(())
}
