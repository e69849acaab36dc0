//! The Burn model against the f64 reference, with and without LoRA.

use std::collections::BTreeMap;
use std::path::{Path, PathBuf};

use burn::tensor::Tensor;
use hr_policy::{
    Adapters, LoraConfig, Policy, PolicyRng, Target, f32_safetensors, host_f32, load_adapters,
};
use hr_tests::tiny_model::{TinySpec, VOCAB};
use safetensors::Dtype;

use crate::{Cpu, reference, tiny};

/// Small values in ±0.2 from a fixed linear congruential stream: hand-written adapter weights.
fn small_values(mut seed: u32) -> impl FnMut() -> f32 {
    move || {
        seed = seed.wrapping_mul(1_103_515_245).wrapping_add(12345);
        (f64::from(seed >> 8) / f64::from(1u32 << 24) - 0.5) as f32 * 0.4
    }
}

/// Writes the PEFT adapter folder `dir/adapter` of f32 `tensors` `(name, shape, bytes)` and
/// `config`; returns it.
fn write_peft_adapter(
    dir: &Path,
    tensors: &[(String, Vec<usize>, Vec<u8>)],
    config: &serde_json::Value,
) -> anyhow::Result<PathBuf> {
    let out = dir.join("adapter");
    std::fs::create_dir(&out)?;
    std::fs::write(
        out.join("adapter_model.safetensors"),
        f32_safetensors(tensors)?,
    )?;
    std::fs::write(
        out.join("adapter_config.json"),
        serde_json::to_vec(&config)?,
    )?;
    Ok(out)
}

fn rows() -> Vec<Vec<u32>> {
    vec![
        vec![1, 40, 41, 42, 7, 200, 3, 9, 11],
        vec![5, 6, 260],
        vec![100, 101, 102, 103, 104, 105],
    ]
}

/// Max |burn − reference| over every real position, relative to the largest reference logit.
fn relative_error(
    logits: Tensor<Cpu, 3>,
    rows: &[Vec<u32>],
    reference: impl Fn(&[u32]) -> Vec<Vec<f64>>,
) -> f64 {
    let [_, width, vocab] = logits.dims();
    let values = host_f32(logits).expect("host");
    let (mut worst, mut scale) = (0.0f64, 0.0f64);
    for (b, row) in rows.iter().enumerate() {
        let pad = width - row.len();
        for (t, expected) in reference(row).iter().enumerate() {
            let got = &values[(b * width + pad + t) * vocab..(b * width + pad + t + 1) * vocab];
            for (g, e) in got.iter().zip(expected) {
                worst = worst.max((f64::from(*g) - e).abs());
                scale = scale.max(e.abs());
            }
        }
    }
    worst / scale
}

#[test]
fn logits_match_an_f64_reference_across_families_and_dtypes() -> anyhow::Result<()> {
    let specs = [
        TinySpec::default(),
        TinySpec {
            model_type: "qwen2",
            tie: true,
            dtype: Dtype::BF16,
            seed: 11,
            ..TinySpec::default()
        },
        TinySpec {
            kv_heads: 4,
            dtype: Dtype::F16,
            seed: 3,
            ..TinySpec::default()
        },
        TinySpec {
            model_type: "qwen3",
            kv_heads: 1,
            seed: 5,
            ..TinySpec::default()
        },
    ];
    for spec in specs {
        let dir = tempfile::tempdir()?;
        let (model, policy) = tiny(dir.path(), &spec)?;
        let rows = rows();
        let err = relative_error(policy.logits(None, &rows)?, &rows, |r| {
            reference::logits(&model.config, &model.tensors, r)
        });
        assert!(err < 1e-4, "{spec:?}: relative error {err}");
    }
    Ok(())
}

#[test]
fn lora_with_zero_b_gives_the_base_logits_exactly() -> anyhow::Result<()> {
    let dir = tempfile::tempdir()?;
    let (_, policy) = tiny(dir.path(), &TinySpec::default())?;
    let lora = LoraConfig::new(4, 8.0, Target::ALL.to_vec())?;
    let adapters =
        Adapters::<Cpu>::init(&policy, lora, &mut PolicyRng::from_seed(1), policy.device());
    let rows = rows();
    let base = host_f32(policy.logits(None, &rows)?)?;
    let with = host_f32(policy.logits(Some(&adapters), &rows)?)?;
    assert_eq!(base, with);
    Ok(())
}

/// PEFT adapters written by hand (PEFT's key names and `[r, in]`/`[out, r]` layout) change the
/// logits exactly as merging `W + (alpha/r)·B·A` into the reference does.
#[test]
fn peft_adapters_match_the_merged_reference() -> anyhow::Result<()> {
    let dir = tempfile::tempdir()?;
    let (mut model, policy) = tiny(dir.path(), &TinySpec::default())?;
    let (r, alpha) = (2usize, 6.0f64);
    let targets = ["q_proj", "v_proj", "down_proj"];
    let mut stored: Vec<(String, Vec<usize>, Vec<u8>)> = Vec::new();
    let mut next = small_values(1);
    for layer in 0..2 {
        for target in targets {
            let module = if target == "down_proj" {
                format!("mlp.{target}")
            } else {
                format!("self_attn.{target}")
            };
            let name = format!("model.layers.{layer}.{module}.weight");
            let (shape, w) = model.tensors.get_mut(&name).expect("weight");
            let (out, d_in) = (shape[0], shape[1]);
            let a: Vec<f32> = (0..r * d_in).map(|_| next()).collect();
            let b: Vec<f32> = (0..out * r).map(|_| next()).collect();
            for o in 0..out {
                for i in 0..d_in {
                    let delta: f64 = (0..r)
                        .map(|k| f64::from(b[o * r + k]) * f64::from(a[k * d_in + i]))
                        .sum();
                    w[o * d_in + i] =
                        (f64::from(w[o * d_in + i]) + alpha / r as f64 * delta) as f32;
                }
            }
            let key = format!("base_model.model.model.layers.{layer}.{module}");
            stored.push((
                format!("{key}.lora_A.weight"),
                vec![r, d_in],
                a.iter().flat_map(|x| x.to_le_bytes()).collect(),
            ));
            stored.push((
                format!("{key}.lora_B.weight"),
                vec![out, r],
                b.iter().flat_map(|x| x.to_le_bytes()).collect(),
            ));
        }
    }
    let adapter_dir = write_peft_adapter(
        dir.path(),
        &stored,
        &serde_json::json!({
            "peft_type": "LORA", "task_type": "CAUSAL_LM", "r": r, "lora_alpha": alpha, "lora_dropout": 0.05,
            "target_modules": ["v_proj", "q_proj", "down_proj"], "bias": "none", "fan_in_fan_out": false,
            "use_dora": false, "use_rslora": false, "modules_to_save": null, "layers_to_transform": null,
        }),
    )?;
    let adapters = load_adapters::<Cpu>(policy.config(), &adapter_dir, policy.device())?;
    let rows = rows();
    let err = relative_error(policy.logits(Some(&adapters), &rows)?, &rows, |r| {
        reference::logits(&model.config, &model.tensors, r)
    });
    assert!(err < 1e-4, "relative error {err}");
    assert!(rows.iter().flatten().all(|t| (*t as usize) < VOCAB));
    Ok(())
}

/// Phi-3 stores q/k/v as one `qkv_proj` and gate/up as one `gate_up_proj`, and PEFT adapts those
/// fused matrices: the same weights fused, with a PEFT adapter on them, give the logits of the
/// weights stored apart with the update `W + s·B·A` merged in and cut by rows (the f64 reference).
#[test]
fn phi3_fused_projections_and_their_adapters_match_the_split_merged_reference() -> anyhow::Result<()>
{
    let dir = tempfile::tempdir()?;
    let (mut model, _) = tiny(&dir.path().join("llama"), &TinySpec::default())?;
    let layers = model.config["num_hidden_layers"].as_u64().unwrap_or(0) as usize;
    let stacked = |tensors: &BTreeMap<String, (Vec<usize>, Vec<f32>)>, names: &[String]| {
        let width = tensors[&names[0]].0[1];
        let rows: Vec<usize> = names.iter().map(|n| tensors[n].0[0]).collect();
        let values: Vec<f32> = names.iter().flat_map(|n| tensors[n].1.clone()).collect();
        (rows, width, values)
    };
    let fused_names = |layer: usize| {
        let p = format!("model.layers.{layer}");
        [
            (
                format!("{p}.self_attn.qkv_proj"),
                ["q", "k", "v"]
                    .map(|x| format!("{p}.self_attn.{x}_proj.weight"))
                    .to_vec(),
            ),
            (
                format!("{p}.mlp.gate_up_proj"),
                ["gate", "up"]
                    .map(|x| format!("{p}.mlp.{x}_proj.weight"))
                    .to_vec(),
            ),
        ]
    };
    // The Phi-3 checkpoint: the same tensors, q/k/v and gate/up stacked by rows.
    let phi3 = dir.path().join("phi3");
    std::fs::create_dir(&phi3)?;
    let mut fused: BTreeMap<String, (Vec<usize>, Vec<f32>)> = model.tensors.clone();
    for layer in 0..layers {
        for (module, parts) in fused_names(layer) {
            let (rows, width, values) = stacked(&model.tensors, &parts);
            parts.iter().for_each(|n| {
                fused.remove(n);
            });
            fused.insert(
                format!("{module}.weight"),
                (vec![rows.iter().sum(), width], values),
            );
        }
    }
    let stored: Vec<(String, Vec<usize>, Vec<u8>)> = fused
        .iter()
        .map(|(n, (shape, v))| {
            (
                n.clone(),
                shape.clone(),
                v.iter().flat_map(|x| x.to_le_bytes()).collect(),
            )
        })
        .collect();
    std::fs::write(phi3.join("model.safetensors"), f32_safetensors(&stored)?)?;
    let mut config = model.config.clone();
    config["model_type"] = serde_json::json!("phi3");
    config["architectures"] = serde_json::json!(["Phi3ForCausalLM"]);
    std::fs::write(phi3.join("config.json"), serde_json::to_vec(&config)?)?;
    std::fs::copy(
        dir.path().join("llama/tokenizer.json"),
        phi3.join("tokenizer.json"),
    )?;
    let policy = Policy::<Cpu>::load(&phi3, &Default::default())?;
    let rows = rows();
    let base = |model: &hr_tests::tiny_model::TinyModel| {
        let (config, tensors) = (model.config.clone(), model.tensors.clone());
        move |r: &[u32]| reference::logits(&config, &tensors, r)
    };
    let err = relative_error(policy.logits(None, &rows)?, &rows, base(&model));
    assert!(err < 1e-4, "base: relative error {err}");

    // A PEFT adapter on both fused matrices of every layer, merged into the split reference.
    let (r, alpha) = (2usize, 6.0f64);
    let mut next = small_values(7);
    let mut adapter = Vec::new();
    for layer in 0..layers {
        for (module, parts) in fused_names(layer) {
            let (part_rows, d_in, _) = stacked(&model.tensors, &parts);
            let out: usize = part_rows.iter().sum();
            let a: Vec<f32> = (0..r * d_in).map(|_| next()).collect();
            let b: Vec<f32> = (0..out * r).map(|_| next()).collect();
            let mut row = 0;
            for (part, n) in parts.iter().zip(part_rows) {
                let w = &mut model.tensors.get_mut(part).expect("weight").1;
                for o in 0..n {
                    for i in 0..d_in {
                        let delta: f64 = (0..r)
                            .map(|k| f64::from(b[(row + o) * r + k]) * f64::from(a[k * d_in + i]))
                            .sum();
                        w[o * d_in + i] =
                            (f64::from(w[o * d_in + i]) + alpha / r as f64 * delta) as f32;
                    }
                }
                row += n;
            }
            let key = format!("base_model.model.{module}");
            let bytes = |v: &[f32]| v.iter().flat_map(|x| x.to_le_bytes()).collect();
            adapter.push((format!("{key}.lora_A.weight"), vec![r, d_in], bytes(&a)));
            adapter.push((format!("{key}.lora_B.weight"), vec![out, r], bytes(&b)));
        }
    }
    let adapter_dir = write_peft_adapter(
        dir.path(),
        &adapter,
        &serde_json::json!({
            "peft_type": "LORA", "r": r, "lora_alpha": alpha,
            "target_modules": ["qkv_proj", "gate_up_proj"],
        }),
    )?;
    let adapters = load_adapters::<Cpu>(policy.config(), &adapter_dir, policy.device())?;
    let err = relative_error(policy.logits(Some(&adapters), &rows)?, &rows, base(&model));
    assert!(err < 1e-4, "adapted: relative error {err}");
    // Negative control: the adapter moved the logits.
    let off = relative_error(policy.logits(None, &rows)?, &rows, base(&model));
    assert!(off > 1e-2, "the adapter changed nothing: {off}");
    Ok(())
}

/// DoRA as PEFT computes it: fresh adapters (B = 0, m = ‖W‖) leave the logits exactly as they
/// were, and a PEFT DoRA adapter written by hand gives the logits of the reference with each
/// adapted weight replaced by `m · (W + s·B·A) / ‖W + s·B·A‖` (row norms); the sampling path,
/// which folds that into the weights, gives them too; the files round-trip.
#[test]
fn dora_matches_the_rescaled_reference_and_starts_at_the_base() -> anyhow::Result<()> {
    let dir = tempfile::tempdir()?;
    let (mut model, policy) = tiny(&dir.path().join("model"), &TinySpec::default())?;
    let rows = rows();
    let fresh = Adapters::<Cpu>::init(
        &policy,
        LoraConfig::new(2, 4.0, Target::ALL.to_vec())?.with_dora(true),
        &mut PolicyRng::from_seed(1),
        policy.device(),
    );
    assert_eq!(
        host_f32(policy.logits(None, &rows)?)?,
        host_f32(policy.logits(Some(&fresh), &rows)?)?
    );

    let (r, alpha) = (2usize, 6.0f64);
    let mut next = small_values(3);
    let mut stored = Vec::new();
    let bytes = |v: &[f32]| -> Vec<u8> { v.iter().flat_map(|x| x.to_le_bytes()).collect() };
    for layer in 0..2 {
        for module in ["self_attn.k_proj", "mlp.up_proj"] {
            let name = format!("model.layers.{layer}.{module}.weight");
            let (shape, w) = model.tensors.get_mut(&name).expect("weight");
            let (out, d_in) = (shape[0], shape[1]);
            let a: Vec<f32> = (0..r * d_in).map(|_| next()).collect();
            let b: Vec<f32> = (0..out * r).map(|_| next()).collect();
            let m: Vec<f32> = (0..out).map(|_| 1.0 + next()).collect();
            for o in 0..out {
                let row: Vec<f64> = (0..d_in)
                    .map(|i| {
                        let delta: f64 = (0..r)
                            .map(|k| f64::from(b[o * r + k]) * f64::from(a[k * d_in + i]))
                            .sum();
                        f64::from(w[o * d_in + i]) + alpha / r as f64 * delta
                    })
                    .collect();
                let norm = row.iter().map(|x| x * x).sum::<f64>().sqrt();
                for (i, x) in row.iter().enumerate() {
                    w[o * d_in + i] = (f64::from(m[o]) * x / norm) as f32;
                }
            }
            let key = format!("base_model.model.model.layers.{layer}.{module}");
            stored.push((format!("{key}.lora_A.weight"), vec![r, d_in], bytes(&a)));
            stored.push((format!("{key}.lora_B.weight"), vec![out, r], bytes(&b)));
            stored.push((format!("{key}.lora_magnitude_vector"), vec![out], bytes(&m)));
        }
    }
    let adapter_dir = write_peft_adapter(
        dir.path(),
        &stored,
        &serde_json::json!({
            "peft_type": "LORA", "r": r, "lora_alpha": alpha, "use_dora": true,
            "target_modules": ["k_proj", "up_proj"],
        }),
    )?;
    let adapters = load_adapters::<Cpu>(policy.config(), &adapter_dir, policy.device())?;
    assert!(adapters.config().dora);
    let reference = |r: &[u32]| reference::logits(&model.config, &model.tensors, r);
    let err = relative_error(policy.logits(Some(&adapters), &rows)?, &rows, reference);
    assert!(err < 1e-4, "relative error {err}");
    let off = relative_error(policy.logits(None, &rows)?, &rows, reference);
    assert!(off > 1e-2, "the adapter changed nothing: {off}");
    // Greedy sampling folds the adapter into the weights: its log-probs are the reference's.
    let sampling = crate::generation::sampling(0.0, 1.0);
    let prompt = vec![rows[0].clone()];
    let g = policy.generate(
        Some(&adapters),
        &prompt,
        &sampling,
        &mut PolicyRng::from_seed(1),
        true,
    )?;
    let full: Vec<u32> = prompt[0].iter().chain(&g.tokens[0]).copied().collect();
    let logits = reference(&full);
    for (k, token) in g.tokens[0].iter().enumerate() {
        let at = &logits[prompt[0].len() - 1 + k];
        let top = at.iter().copied().fold(f64::MIN, f64::max);
        let lse = top + at.iter().map(|l| (l - top).exp()).sum::<f64>().ln();
        let theirs = at[*token as usize] - lse;
        let ours = g.logprobs[0][k];
        assert!(
            (ours - theirs).abs() <= 1e-4 * theirs.abs().max(1.0),
            "{ours} vs {theirs}"
        );
    }
    // Saved and loaded, the same bytes.
    hr_policy::save_adapters(&adapters, "tiny", &dir.path().join("again"))?;
    let again = load_adapters::<Cpu>(policy.config(), &dir.path().join("again"), policy.device())?;
    assert_eq!(
        host_f32(policy.logits(Some(&again), &rows)?)?,
        host_f32(policy.logits(Some(&adapters), &rows)?)?
    );
    Ok(())
}
