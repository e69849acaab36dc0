//! Half-precision base weights (`model.dtype`): the matrices are held in f16 or bf16, everything
//! else is f32, so the model equals the f64 reference of its rounded weights, and its
//! log-probabilities stay within the stated tolerance of the f32 model's.

use burn::backend::Autodiff;
use burn::tensor::{DType, FloatDType};
use hr_policy::{Adapters, LoraConfig, Policy, PolicyRng, Target, host_f32};
use hr_tests::tiny_model::{TinySpec, write_tiny_model};

use crate::{Cpu, reference};

/// The stated tolerance: the largest |log p(f32 base) − log p(half base)| allowed on the tiny
/// model's scored tokens (measured: 1.9e-3 for f16, 1.4e-2 for bf16).
const TOLERANCE: [(FloatDType, f64); 2] = [(FloatDType::F16, 5e-3), (FloatDType::BF16, 3e-2)];

fn rows() -> (Vec<Vec<u32>>, Vec<Vec<u32>>) {
    (
        vec![vec![1, 40, 41, 42, 7], vec![5, 6], vec![100, 101, 102]],
        vec![
            vec![200, 3, 9, 11, 12],
            vec![260, 17],
            vec![103, 104, 105, 106],
        ],
    )
}

/// `x` rounded to `dtype` and back.
fn rounded(x: f32, dtype: FloatDType) -> f32 {
    match dtype {
        FloatDType::F16 => half::f16::from_f32(x).to_f32(),
        FloatDType::BF16 => half::bf16::from_f32(x).to_f32(),
        _ => x,
    }
}

#[test]
fn a_half_base_is_the_f32_model_of_its_rounded_matrices() -> anyhow::Result<()> {
    for (dtype, spec) in [
        (FloatDType::F16, TinySpec::default()),
        (
            FloatDType::BF16,
            TinySpec {
                model_type: "qwen2",
                tie: true,
                seed: 11,
                ..TinySpec::default()
            },
        ),
    ] {
        let dir = tempfile::tempdir()?;
        let mut model = write_tiny_model(dir.path(), &spec);
        let policy = Policy::<Cpu>::load_as(dir.path(), dtype, &Default::default())?;
        let base = policy.base();
        assert_eq!(base.embed.val().dtype(), DType::from(dtype));
        if let Some(head) = &base.lm_head {
            assert_eq!(head.val().dtype(), DType::from(dtype));
        }
        assert_eq!(base.blocks[1].mlp.down.val().dtype(), DType::from(dtype));
        assert_eq!(base.norm.val().dtype(), DType::F32, "norms stay f32");
        // The reference sees the matrices rounded as the policy holds them (norms and biases,
        // the 1-d tensors, exactly).
        for (shape, values) in model.tensors.values_mut() {
            if shape.len() == 2 {
                values.iter_mut().for_each(|v| *v = rounded(*v, dtype));
            }
        }
        let row = vec![1, 40, 41, 42, 7, 200, 3, 9, 11];
        let logits = host_f32(policy.logits(None, std::slice::from_ref(&row))?)?;
        let expected = reference::logits(&model.config, &model.tensors, &row);
        let scale = expected
            .iter()
            .flatten()
            .fold(0.0f64, |m, e| m.max(e.abs()));
        let worst = expected
            .iter()
            .flatten()
            .zip(&logits)
            .map(|(e, g)| (f64::from(*g) - e).abs())
            .fold(0.0f64, f64::max);
        assert!(
            worst / scale < 1e-4,
            "{dtype:?}: relative error {} against the rounded reference",
            worst / scale
        );
    }
    Ok(())
}

#[test]
fn half_base_log_probabilities_stay_within_the_stated_tolerance() -> anyhow::Result<()> {
    let dir = tempfile::tempdir()?;
    write_tiny_model(dir.path(), &TinySpec::default());
    let (prompts, completions) = rows();
    let score = |dtype| -> anyhow::Result<Vec<f32>> {
        let policy = Policy::<Cpu>::load_as(dir.path(), dtype, &Default::default())?;
        Ok(host_f32(policy.score(
            None,
            &prompts,
            &completions,
            1.0,
        )?)?)
    };
    let full = score(FloatDType::F32)?;
    for (dtype, tolerance) in TOLERANCE {
        let worst = full
            .iter()
            .zip(score(dtype)?)
            .map(|(a, b)| f64::from((a - b).abs()))
            .fold(0.0, f64::max);
        assert!(worst > 0.0, "{dtype:?} rounds the weights");
        assert!(
            worst <= tolerance,
            "{dtype:?}: log-probabilities differ by {worst:e} (> {tolerance:e})"
        );
    }
    Ok(())
}

#[test]
fn adapters_over_a_half_base_train_in_f32() -> anyhow::Result<()> {
    type Train = Autodiff<Cpu>;
    let dir = tempfile::tempdir()?;
    write_tiny_model(dir.path(), &TinySpec::default());
    let grad = |dtype| -> anyhow::Result<Vec<f32>> {
        let policy = Policy::<Train>::load_as(dir.path(), dtype, &Default::default())?;
        let lora = LoraConfig::new(2, 4.0, vec![Target::VProj])?;
        let adapters =
            Adapters::<Train>::init(&policy, lora, &mut PolicyRng::from_seed(3), policy.device());
        let logp = policy.score(Some(&adapters), &[vec![3, 4, 5]], &[vec![6, 7, 8]], 1.0)?;
        let grads = logp.sum().backward();
        assert!(policy.base().blocks[0].attn.v.grad(&grads).is_none());
        let b = &adapters.layers[0].slots[2].as_ref().expect("v_proj").b;
        let g = b.grad(&grads).expect("grad of B");
        assert_eq!(
            g.dtype(),
            DType::F32,
            "{dtype:?}: adapter gradients are f32"
        );
        Ok(host_f32(g)?)
    };
    let (full, half) = (grad(FloatDType::F32)?, grad(FloatDType::BF16)?);
    let scale = full.iter().fold(0.0f32, |m, g| m.max(g.abs()));
    let worst = full
        .iter()
        .zip(&half)
        .fold(0.0f32, |m, (a, b)| m.max((a - b).abs()));
    assert!(scale > 0.0 && worst / scale < 0.05, "{worst} of {scale}");
    Ok(())
}

#[test]
fn a_dtype_other_than_f32_f16_or_bf16_is_refused() -> anyhow::Result<()> {
    let dir = tempfile::tempdir()?;
    write_tiny_model(dir.path(), &TinySpec::default());
    let err = Policy::<Cpu>::load_as(dir.path(), FloatDType::F64, &Default::default())
        .expect_err("f64 weights are refused");
    assert_eq!(
        err.to_string(),
        "this device cannot hold f64 weights; it can hold f32, f16, bf16"
    );
    Ok(())
}
