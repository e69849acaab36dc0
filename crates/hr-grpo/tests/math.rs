//! Advantages and losses against hand-computed values, for every variant.

use burn::backend::{Autodiff, Flex};
use burn::tensor::{Tensor, TensorData};
use hr_grpo::{
    AdvantageConfig, LossConfig, LossInputs, LossOutput, LossType, ScaleRewards, Whole, advantages,
    grpo_loss,
};

type B = Autodiff<Flex>;

fn close(got: &[f64], want: &[f64]) {
    assert_eq!(got.len(), want.len(), "{got:?} vs {want:?}");
    for (g, w) in got.iter().zip(want) {
        assert!((g - w).abs() < 1e-6, "{got:?} vs {want:?}");
    }
}

fn config(scale_rewards: ScaleRewards, leave_one_out: bool) -> AdvantageConfig {
    AdvantageConfig {
        scale_rewards,
        leave_one_out,
        epsilon: 1e-4,
    }
}

#[test]
fn group_advantages_use_the_bessel_std_plus_epsilon() -> anyhow::Result<()> {
    // Group [1, 0]: mean 0.5, Bessel std √0.5 → ±0.5 / (√0.5 + 1e-4).
    let a = advantages(
        &[1.0, 0.0, 0.0, 1.0],
        2,
        &config(ScaleRewards::Group, false),
    )?;
    close(
        &a,
        &[
            0.707_006_795_326_683_4,
            -0.707_006_795_326_683_4,
            -0.707_006_795_326_683_4,
            0.707_006_795_326_683_4,
        ],
    );
    Ok(())
}

#[test]
fn an_unscorable_reward_is_left_out_of_its_group_and_gets_zero_advantage() -> anyhow::Result<()> {
    // TRL's NaN row: group [1, NaN, 0, 1] is centred and scaled on [1, 0, 1] alone.
    let nan = f64::NAN;
    let a = advantages(
        &[1.0, nan, 0.0, 1.0, nan, 2.0, nan, nan],
        4,
        &config(ScaleRewards::Group, false),
    )?;
    let (mean, std) = (2.0 / 3.0, (1.0f64 / 3.0).sqrt());
    let scaled = |r: f64| (r - mean) / (std + 1e-4);
    // The second group has one scored member: no spread to scale by, so no signal.
    close(
        &a,
        &[
            scaled(1.0),
            0.0,
            scaled(0.0),
            scaled(1.0),
            0.0,
            0.0,
            0.0,
            0.0,
        ],
    );
    let a = advantages(&[1.0, nan, 0.0, 1.0], 4, &config(ScaleRewards::None, true))?;
    // Leave-one-out over the other scored members: 1 − 0.5, 0 − 1, 1 − 0.5.
    close(&a, &[0.5, 0.0, -1.0, 0.5]);
    Ok(())
}

#[test]
fn a_zero_std_group_gets_zero_advantage() -> anyhow::Result<()> {
    for scale in [ScaleRewards::Group, ScaleRewards::Batch, ScaleRewards::None] {
        let a = advantages(&[1.0, 1.0, 1.0, 0.0, 0.0, 0.0], 3, &config(scale, false))?;
        close(&a, &[0.0; 6]);
    }
    Ok(())
}

#[test]
fn batch_scaling_divides_by_the_whole_batch_std() -> anyhow::Result<()> {
    // Batch [1, 0, 1, 1]: mean 0.75, Bessel variance 0.25, std 0.5.
    let a = advantages(
        &[1.0, 0.0, 1.0, 1.0],
        2,
        &config(ScaleRewards::Batch, false),
    )?;
    close(
        &a,
        &[0.999_800_039_992_001_6, -0.999_800_039_992_001_6, 0.0, 0.0],
    );
    Ok(())
}

#[test]
fn no_scaling_only_centres_and_leave_one_out_uses_the_others_mean() -> anyhow::Result<()> {
    close(
        &advantages(&[3.0, 1.0], 2, &config(ScaleRewards::None, false))?,
        &[1.0, -1.0],
    );
    // [1, 0, 0]: baselines 0, 0.5, 0.5.
    close(
        &advantages(&[1.0, 0.0, 0.0], 3, &config(ScaleRewards::None, true))?,
        &[1.0, -0.5, -0.5],
    );
    Ok(())
}

#[test]
fn bad_advantage_inputs_are_refused() {
    let cfg = AdvantageConfig::default();
    assert!(
        advantages(&[1.0, 0.0], 1, &cfg)
            .expect_err("G = 1")
            .to_string()
            .contains("num_generations")
    );
    assert!(
        advantages(&[1.0, 0.0, 1.0], 2, &cfg)
            .expect_err("partial group")
            .to_string()
            .contains("whole groups")
    );
    // NaN is an unscorable completion (see below); an infinite reward is refused.
    assert!(
        advantages(&[f64::INFINITY, 0.0], 2, &cfg)
            .expect_err("inf")
            .to_string()
            .contains("not finite")
    );
}

fn tensor(values: &[f32], rows: usize) -> Tensor<B, 2> {
    let cols = values.len() / rows;
    Tensor::from_data(
        TensorData::new(values.to_vec(), [rows, cols]),
        &Default::default(),
    )
}

fn host(t: Tensor<B, 1>) -> f64 {
    t.into_data()
        .convert::<f64>()
        .to_vec::<f64>()
        .expect("host")[0]
}

/// The loss of `logp` without entropies (the variants' own tests are the TRL parity suite).
fn loss(
    logp: Tensor<B, 2>,
    old_logp: Option<Tensor<B, 2>>,
    ref_logp: Option<Tensor<B, 2>>,
    advantages: &[f64],
    mask: &[Vec<bool>],
    config: &LossConfig,
    whole: Whole,
) -> Result<LossOutput<B>, hr_grpo::GrpoError> {
    grpo_loss(
        LossInputs {
            logp,
            old_logp,
            ref_logp,
            entropy: None,
            advantages,
            mask,
            entropy_mask: None,
        },
        config,
        whole,
    )
}

fn loss_config(loss_type: LossType) -> LossConfig {
    LossConfig {
        loss_type,
        max_completion_length: 4,
        ..LossConfig::default()
    }
}

/// μ = 1: ρ ≡ 1, so each token's loss is −A. Rows: A = 1 with 2 tokens, A = −0.5 with 1 token.
#[test]
fn each_aggregation_matches_its_formula() -> anyhow::Result<()> {
    let mask = vec![vec![true, true, false], vec![true, false, false]];
    let adv = [1.0, -0.5];
    let logp = || tensor(&[-1.0, -2.0, -3.0, -0.5, -0.7, -0.9], 2);
    // Masked sum of per-token losses: −1 −1 +0.5 = −1.5 over 3 active tokens.
    for (loss_type, dapo_tokens, want) in [
        (LossType::Grpo, None, (-1.0 + 0.5) / 2.0),
        (LossType::Bnpo, None, -1.5 / 3.0),
        (LossType::DrGrpo, None, -1.5 / (2.0 * 4.0)),
        (LossType::Dapo, None, -1.5 / 3.0),
        (LossType::Dapo, Some(6.0), -1.5 / 6.0),
    ] {
        let out = loss(
            logp(),
            None,
            None,
            &adv,
            &mask,
            &loss_config(loss_type),
            Whole {
                batch_active_tokens: dapo_tokens,
                ..Whole::default()
            },
        )?;
        close(&[host(out.loss)], &[want]);
        assert_eq!((out.clip_ratio_region, out.kl), (0.0, None));
    }
    // The gradient of the grpo loss is −A·mask / (len · n): −1/4 for row 0, +1/4 for row 1.
    let x = logp().require_grad();
    let out = loss(
        x.clone(),
        None,
        None,
        &adv,
        &mask,
        &loss_config(LossType::Grpo),
        Whole::default(),
    )?;
    let grads = out.loss.backward();
    let g = x
        .grad(&grads)
        .expect("grad")
        .into_data()
        .convert::<f64>()
        .to_vec::<f64>()?;
    close(&g, &[-0.25, -0.25, 0.0, 0.25, 0.0, 0.0]);
    Ok(())
}

/// ρ = [1.5, 0.5, 1.5, 0.5] with A = [1, −1, −1, 1], ε = 0.2: per-token losses
/// [−1.2 (clipped high), 0.8 (clipped low), 1.5, −0.5]; clipped tokens get no gradient.
#[test]
fn clipping_caps_the_ratio_where_the_advantage_says_and_is_counted() -> anyhow::Result<()> {
    let old = [-1.0f32, -1.0, -2.0, -2.0];
    let ratios = [1.5f64, 0.5, 1.5, 0.5];
    let new: Vec<f32> = old
        .iter()
        .zip(ratios)
        .map(|(o, r)| (f64::from(*o) + r.ln()) as f32)
        .collect();
    let x = tensor(&new, 4).require_grad();
    let mask = vec![vec![true]; 4];
    let out = loss(
        x.clone(),
        Some(tensor(&old, 4)),
        None,
        &[1.0, -1.0, -1.0, 1.0],
        &mask,
        &loss_config(LossType::Bnpo),
        Whole::default(),
    )?;
    assert_eq!(
        (
            out.clip_ratio_low,
            out.clip_ratio_high,
            out.clip_ratio_region
        ),
        (0.25, 0.25, 0.5)
    );
    let grads = out.loss.backward();
    close(&[host(out.loss.clone())], &[(-1.2 + 0.8 + 1.5 - 0.5) / 4.0]);
    let g = x
        .grad(&grads)
        .expect("grad")
        .into_data()
        .convert::<f64>()
        .to_vec::<f64>()?;
    // d(−ρA)/dlogp = −ρA, ÷ 4 tokens.
    close(&g, &[0.0, 0.0, 1.5 / 4.0, -0.5 / 4.0]);
    Ok(())
}

/// k3 KL: ref − logp = −0.5 gives e^−0.5 + 0.5 − 1; with A = 0 the loss is β·KL.
#[test]
fn the_k3_kl_term_is_weighted_by_beta() -> anyhow::Result<()> {
    let kl = 0.106_530_659_712_633_42;
    let cfg = LossConfig {
        beta: 0.1,
        ..loss_config(LossType::Bnpo)
    };
    let out = loss(
        tensor(&[-1.0, -1.0], 1),
        None,
        Some(tensor(&[-1.5, -1.5], 1)),
        &[0.0],
        &[vec![true, true]],
        &cfg,
        Whole::default(),
    )?;
    close(&[host(out.loss), out.kl.expect("kl")], &[0.1 * kl, kl]);
    let err = loss(
        tensor(&[-1.0], 1),
        None,
        None,
        &[0.0],
        &[vec![true]],
        &cfg,
        Whole::default(),
    )
    .expect_err("no reference");
    assert!(err.to_string().contains("`beta`"), "{err}");
    let bad = LossConfig { beta: -0.1, ..cfg };
    assert!(
        loss(
            tensor(&[-1.0], 1),
            None,
            None,
            &[0.0],
            &[vec![true]],
            &bad,
            Whole::default()
        )
        .expect_err("β < 0")
        .to_string()
        .contains("`beta`")
    );
    Ok(())
}

#[test]
fn chunks_of_a_micro_batch_sum_to_its_loss_for_every_aggregation() -> anyhow::Result<()> {
    let mask = vec![
        vec![true, true, false],
        vec![true, false, false],
        vec![true, true, true],
    ];
    let adv = [1.0, -0.5, 0.25];
    let values = [-1.0, -2.0, -3.0, -0.5, -0.7, -0.9, -0.2, -0.4, -0.6];
    for loss_type in [
        LossType::Grpo,
        LossType::Bnpo,
        LossType::DrGrpo,
        LossType::Dapo,
    ] {
        let cfg = loss_config(loss_type);
        let whole = loss(
            tensor(&values, 3),
            None,
            None,
            &adv,
            &mask,
            &cfg,
            Whole::default(),
        )?;
        let part = Whole {
            batch_active_tokens: Some(6.0),
            micro_batch: Some((3, 6.0)),
            ..Whole::default()
        };
        let first = loss(
            tensor(&values[..3], 1),
            None,
            None,
            &adv[..1],
            &mask[..1],
            &cfg,
            part,
        )?;
        let rest = loss(
            tensor(&values[3..], 2),
            None,
            None,
            &adv[1..],
            &mask[1..],
            &cfg,
            part,
        )?;
        close(&[host(first.loss) + host(rest.loss)], &[host(whole.loss)]);
    }
    Ok(())
}
