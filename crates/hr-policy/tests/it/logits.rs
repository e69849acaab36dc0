//! The Burn model against the f64 reference, with and without LoRA.

use std::collections::HashMap;

use burn::tensor::Tensor;
use hr_policy::{Adapters, LoraConfig, PolicyRng, Target, host_f32, load_adapters};
use hr_tests::tiny_model::{TinySpec, VOCAB};
use safetensors::Dtype;
use safetensors::tensor::TensorView;

use crate::{Cpu, reference, tiny};

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
    let adapters = Adapters::<Cpu>::init(
        policy.config(),
        lora,
        &mut PolicyRng::from_seed(1),
        policy.device(),
    );
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
    let adapter_dir = dir.path().join("adapter");
    std::fs::create_dir(&adapter_dir)?;
    let mut stored: Vec<(String, Vec<usize>, Vec<u8>)> = Vec::new();
    let mut seed = 1u32;
    let mut next = || {
        seed = seed.wrapping_mul(1_103_515_245).wrapping_add(12345);
        (f64::from(seed >> 8) / f64::from(1u32 << 24) - 0.5) as f32 * 0.4
    };
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
    let views: Vec<(String, TensorView<'_>)> = stored
        .iter()
        .map(|(n, s, b)| {
            (
                n.clone(),
                TensorView::new(Dtype::F32, s.clone(), b).expect("view"),
            )
        })
        .collect();
    std::fs::write(
        adapter_dir.join("adapter_model.safetensors"),
        safetensors::serialize(views, Some(HashMap::new()))?,
    )?;
    std::fs::write(
        adapter_dir.join("adapter_config.json"),
        serde_json::to_vec(&serde_json::json!({
            "peft_type": "LORA", "task_type": "CAUSAL_LM", "r": r, "lora_alpha": alpha, "lora_dropout": 0.05,
            "target_modules": ["v_proj", "q_proj", "down_proj"], "bias": "none", "fan_in_fan_out": false,
            "use_dora": false, "use_rslora": false, "modules_to_save": null, "layers_to_transform": null,
        }))?,
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
