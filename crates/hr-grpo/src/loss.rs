//! The GRPO loss as TRL 1.16's `GRPOTrainer._compute_loss` defines it, checked against that code
//! by `cargo xtask conformance loss`.
//!
//! Per token, with `w = exp(logπ − logπ_old)` (or, at `sequence` level, `exp` of the sequence's
//! mean active log-ratio, shared by its tokens) and advantage `A`:
//! - the clipped surrogate (`grpo`, `bnpo`, `dr_grpo`, `dapo`, `luspo`):
//!   `−min(w'·A, clip(w, 1−ε_low, 1+ε_high)·A)`, `w' = min(w, δ)` when `delta` is set;
//! - `cispo`: `−sg(min(w, ε_high))·A·logπ`; `sapo`: `−σ(τ(w−1))·4/τ·A`, τ by the sign of `A`;
//!   `vespo`: `−sg(φ(w_seq))·A·logπ` with the Gamma weighting φ;
//! - times the off-policy sequence mask and the high-entropy token mask when they are on, plus
//!   `β·KL` with `KL = exp(ref − logπ) − (ref − logπ) − 1` (k3), times `w` when
//!   `use_bias_correction_kl` (TRL's default);
//!
//! then aggregated over the completion mask as the loss type says, minus
//! `entropy_coef` × the mean entropy of the tokens the loss acts on.

use burn::tensor::activation::sigmoid;
use burn::tensor::backend::Backend;
use burn::tensor::{Tensor, TensorData};

use crate::{GrpoError, ImportanceSamplingLevel, LossType};

mod config;

pub use config::{LossConfig, Vespo};

/// What the loss is computed from, for `n` rows of `t` completion positions.
#[derive(Debug, Clone)]
pub struct LossInputs<'a, B: Backend> {
    /// Log-probs `[n, t]` of the sampled tokens under the policy being trained.
    pub logp: Tensor<B, 2>,
    /// The sampling policy's; `logp` detached (w = 1) when absent.
    pub old_logp: Option<Tensor<B, 2>>,
    /// The reference policy's; needed when β > 0.
    pub ref_logp: Option<Tensor<B, 2>>,
    /// Per-token entropies `[n, t]`, needed for the bonus (differentiable there).
    pub entropy: Option<Tensor<B, 2>>,
    /// One advantage per row.
    pub advantages: &'a [f64],
    /// The completion tokens that count (environment tokens and padding are false).
    pub mask: &'a [Vec<bool>],
    /// The tokens the high-entropy mask keeps ([`high_entropy_mask`]), when
    /// `top_entropy_quantile` < 1.
    pub entropy_mask: Option<&'a [Vec<bool>]>,
}

/// The loss and the statistics TRL logs with it.
#[derive(Debug, Clone)]
pub struct LossOutput<B: Backend> {
    /// The scalar loss, differentiable through the policy log-probs (and the entropies when the
    /// bonus is on).
    pub loss: Tensor<B, 1>,
    /// With the entropy bonus on (when TRL logs it): the policy term alone, before the bonus
    /// (TRL's `policy_loss`; for `grpo`, `bnpo`,
    /// `dr_grpo`, `sapo` and `luspo` not yet divided by the accumulation steps, as TRL logs it).
    pub policy_loss: Option<f64>,
    /// Share of active tokens with w < 1 − ε_low and A < 0 (`clip_ratio/low_mean`; at sequence
    /// level a share of rows).
    pub clip_ratio_low: f64,
    /// What the clip ratios are shares of: the active tokens, or the rows at sequence level.
    pub clip_counted: f64,
    /// Share with w > 1 + ε_high and A > 0 (`clip_ratio/high_mean`).
    pub clip_ratio_high: f64,
    /// Share clipped either way (`clip_ratio/region_mean`).
    pub clip_ratio_region: f64,
    /// Each row's share of low-clipped active tokens, `None` for a row without any
    /// (`clip_ratio/low_min` is their least).
    pub row_clip_low: Vec<Option<f64>>,
    /// Each row's share of high-clipped active tokens (`clip_ratio/high_max` is their greatest).
    pub row_clip_high: Vec<Option<f64>>,
    /// `cispo`: share of active tokens with w > ε_high and A > 0 (`cispo_clip_ratio`).
    pub cispo_clip_ratio: Option<f64>,
    /// `vespo`: the mean of φ over rows (`vespo/phi_seq_mean`).
    pub vespo_phi_mean: Option<f64>,
    /// Mean KL term over active tokens (bias-corrected when that is on), when β > 0 (`kl`).
    pub kl: Option<f64>,
}

/// The denominators of a loss over rows that are part of a larger batch, so that the parts'
/// losses sum to the whole's: each defaults to the rows' own.
#[derive(Debug, Clone, Copy, Default, PartialEq)]
pub struct Whole {
    /// `dapo`, `cispo`, `vespo`: the active tokens of the whole accumulated batch (all
    /// micro-batches).
    pub batch_active_tokens: Option<f64>,
    /// The rows and active tokens of the micro-batch these rows are a chunk of (the trainer
    /// back-propagates a micro-batch in chunks to bound its memory).
    pub micro_batch: Option<(usize, f64)>,
    /// The tokens of that micro-batch the entropy bonus averages over (its active tokens, or
    /// those the entropy mask keeps).
    pub entropy_tokens: Option<f64>,
    /// The micro-batches accumulated into one optimiser step (TRL's
    /// `gradient_accumulation_steps`; 0 counts as 1): the per-micro-batch means are divided by
    /// it.
    pub accumulation: usize,
}

/// The active positions `(row, column)` of `mask`, row by row: the tokens the step's statistics
/// and the adaptive entropy controller average over.
pub fn active_positions(mask: &[Vec<bool>]) -> Vec<(usize, usize)> {
    mask.iter()
        .enumerate()
        .flat_map(|(i, row)| {
            row.iter()
                .enumerate()
                .filter(|(_, on)| **on)
                .map(move |(j, _)| (i, j))
        })
        .collect()
}

/// The tokens of `entropy` (`[n][t]`) at or above the `1 − quantile` quantile of the active
/// ones (TRL's `get_high_entropy_mask`, `torch.quantile`'s linear interpolation in f32), and
/// active.
pub fn high_entropy_mask(
    entropy: &[Vec<f32>],
    mask: &[Vec<bool>],
    quantile: f64,
) -> Vec<Vec<bool>> {
    let mut active: Vec<f32> = entropy
        .iter()
        .zip(mask)
        .flat_map(|(e, m)| e.iter().zip(m).filter(|(_, on)| **on).map(|(v, _)| *v))
        .collect();
    if active.is_empty() {
        return mask.iter().map(|m| vec![false; m.len()]).collect();
    }
    active.sort_by(f32::total_cmp);
    let rank = (1.0 - quantile) as f32 * (active.len() - 1) as f32;
    let (below, above) = (rank.floor(), rank.ceil());
    let (start, end) = (active[below as usize], active[above as usize]);
    let weight = rank - below;
    // torch.lerp's two branches, for the same rounding.
    let threshold = if weight < 0.5 {
        start + weight * (end - start)
    } else {
        end - (end - start) * (1.0 - weight)
    };
    entropy
        .iter()
        .zip(mask)
        .map(|(e, m)| {
            e.iter()
                .zip(m)
                .map(|(v, on)| *on && *v >= threshold)
                .collect()
        })
        .collect()
}

fn host<B: Backend, const D: usize>(t: Tensor<B, D>) -> Vec<f32> {
    t.into_data()
        .convert::<f32>()
        .to_vec::<f32>()
        .unwrap_or_default()
}

fn rows_of<B: Backend>(values: Vec<f32>, device: &B::Device) -> Tensor<B, 2> {
    let n = values.len();
    Tensor::from_data(TensorData::new(values, [n, 1]), device)
}

fn masks_of<B: Backend>(rows: &[Vec<bool>], t: usize, device: &B::Device) -> Tensor<B, 2> {
    let values: Vec<f32> = rows
        .iter()
        .flatten()
        .map(|m| f32::from(u8::from(*m)))
        .collect();
    Tensor::from_data(TensorData::new(values, [rows.len(), t]), device)
}

/// The GRPO loss of `inputs` under `config`; `whole` names the denominators when these rows are
/// part of a larger batch (defaults: these rows' own).
pub fn grpo_loss<B: Backend>(
    inputs: LossInputs<'_, B>,
    config: &LossConfig,
    whole: Whole,
) -> Result<LossOutput<B>, GrpoError> {
    config.validate()?;
    let LossInputs {
        logp,
        old_logp,
        ref_logp,
        entropy,
        advantages,
        mask,
        entropy_mask,
    } = inputs;
    let [n, t] = logp.dims();
    check_inputs(
        config,
        [n, t],
        advantages.len(),
        (mask, entropy_mask),
        ref_logp.is_some(),
        entropy.is_some(),
    )?;
    let device = logp.device();
    let mask_t = masks_of::<B>(mask, t, &device);
    let lengths: Vec<f32> = mask
        .iter()
        .map(|r| r.iter().filter(|m| **m).count() as f32)
        .collect();
    let active: f64 = lengths.iter().map(|l| f64::from(*l)).sum();
    let adv32: Vec<f32> = advantages.iter().map(|a| *a as f32).collect();
    let old = old_logp.unwrap_or_else(|| logp.clone().detach());
    let log_ratio = logp.clone() - old;
    let sequence = config.importance_sampling_level == ImportanceSamplingLevel::Sequence;
    let log_weights = if sequence {
        (log_ratio.clone() * mask_t.clone()).sum_dim(1) / mask_t.clone().sum_dim(1).clamp_min(1.0)
    } else {
        log_ratio.clone()
    };
    let weights = log_weights.exp();
    // Read back once, only for what needs it on the host (each read waits for the device).
    let log_ratio_host = (config.loss_type == LossType::Vespo
        || config.off_policy_mask_threshold.is_some())
    .then(|| host(log_ratio.clone().detach()));
    let kl = (config.beta > 0.0).then(|| {
        let diff = ref_logp
            .clone()
            .map(|r| r - logp.clone())
            .unwrap_or_else(|| logp.zeros_like());
        let kl = diff.clone().exp() - diff - 1.0;
        if config.use_bias_correction_kl {
            kl * weights.clone()
        } else {
            kl
        }
    });
    let (mut per_token, vespo_phi) = surrogate(
        config,
        &weights,
        &logp,
        &adv32,
        log_ratio_host.as_deref(),
        mask,
    );
    if let Some(threshold) = config.off_policy_mask_threshold {
        let kept = off_policy_mask(
            log_ratio_host.as_deref().unwrap_or_default(),
            mask,
            &adv32,
            threshold,
        );
        per_token = per_token * rows_of::<B>(kept, &device);
    }
    let entropy_mask_t = entropy_mask.map(|m| masks_of::<B>(m, t, &device));
    if let Some(m) = &entropy_mask_t {
        per_token = per_token * m.clone();
    }
    if let Some(kl) = &kl {
        per_token = per_token + kl.clone().mul_scalar(config.beta);
    }
    // A sequence-level term is [n, 1] until here; the mask broadcasts it over the row.
    let masked = per_token * mask_t.clone();
    let (micro_rows, micro_active) = whole.micro_batch.unwrap_or((n, active));
    let accumulation = whole.accumulation.max(1) as f64;
    let window = whole.batch_active_tokens.unwrap_or(active).max(1.0);
    let lengths_t = rows_of::<B>(lengths.iter().map(|l| l.max(1.0)).collect(), &device);
    let policy = match config.loss_type {
        LossType::Grpo | LossType::Sapo => (masked.sum_dim(1) / lengths_t)
            .sum()
            .div_scalar(micro_rows as f64),
        LossType::Luspo => masked.sum().div_scalar(micro_rows as f64),
        LossType::Bnpo => masked.sum().div_scalar(micro_active.max(1.0)),
        LossType::DrGrpo => masked
            .sum()
            .div_scalar((micro_rows * config.max_completion_length) as f64),
        LossType::Dapo | LossType::Cispo | LossType::Vespo => masked.sum().div_scalar(window),
    };
    let logged_divisor = if config.loss_type.per_micro_batch() {
        accumulation
    } else {
        1.0
    };
    // Read back only when it is logged: each read waits for the device.
    let policy_loss = (config.entropy_coef > 0.0 || config.adaptive_entropy.is_some())
        .then(|| f64::from(host(policy.clone().detach())[0]));
    let mut loss = policy.div_scalar(logged_divisor);
    if config.entropy_coef > 0.0
        && let Some(entropy) = entropy
    {
        let kept = entropy_mask_t.unwrap_or(mask_t.clone()) * mask_t.clone();
        let tokens = match whole.entropy_tokens {
            Some(tokens) => tokens,
            None => f64::from(host(kept.clone().sum())[0]),
        };
        let bonus = (entropy * kept)
            .sum()
            .div_scalar(tokens.max(1.0) * accumulation);
        loss = loss - bonus.mul_scalar(config.entropy_coef);
    }
    // TRL counts clipping on the weight after δ's cap (a cap at 1 + ε_high hides high clips).
    let counted_weights = match config.delta {
        Some(delta) if config.loss_type.clips() => weights.clamp_max(delta),
        _ => weights,
    };
    let stats = Stats::of(
        &host(counted_weights.detach()),
        if sequence { 1 } else { t },
        mask,
        &adv32,
        config,
    );
    // One value read back, not the whole [n, t] term.
    let kl_mean = kl.map(|kl| f64::from(host((kl * mask_t).sum().detach())[0]) / active.max(1.0));
    Ok(LossOutput {
        loss,
        policy_loss,
        clip_ratio_low: stats.low,
        clip_counted: stats.counted,
        clip_ratio_high: stats.high,
        clip_ratio_region: stats.region,
        row_clip_low: stats.row_low,
        row_clip_high: stats.row_high,
        cispo_clip_ratio: stats.cispo,
        vespo_phi_mean: vespo_phi
            .map(|phi| phi.iter().map(|v| f64::from(*v)).sum::<f64>() / (n.max(1) as f64)),
        kl: kl_mean,
    })
}

/// The inputs' shapes agree (`n` rows of `t` tokens: as many advantages and mask rows) and
/// the config's terms have their inputs: reference log-probs for β > 0, the high-entropy mask
/// for ρ < 1, the entropies for a bonus.
fn check_inputs(
    config: &LossConfig,
    [n, t]: [usize; 2],
    advantages: usize,
    (mask, entropy_mask): (&[Vec<bool>], Option<&[Vec<bool>]>),
    has_ref: bool,
    has_entropy: bool,
) -> Result<(), GrpoError> {
    let shaped = |m: &[Vec<bool>]| m.len() == n && m.iter().all(|r| r.len() == t);
    if advantages != n || !shaped(mask) || entropy_mask.is_some_and(|m| !shaped(m)) {
        return Err(GrpoError::Shape(format!(
            "log-probs are [{n}, {t}] but there are {advantages} advantages and a {}-row mask",
            mask.len()
        )));
    }
    if config.beta > 0.0 && !has_ref {
        return Err(GrpoError::Config {
            field: "beta",
            message: "β > 0 needs reference log-probs".to_owned(),
        });
    }
    if config.top_entropy_quantile < 1.0 && entropy_mask.is_none() {
        return Err(GrpoError::Config {
            field: "top_entropy_quantile",
            message: "ρ < 1 needs the high-entropy mask".to_owned(),
        });
    }
    if config.entropy_coef > 0.0 && !has_entropy {
        return Err(GrpoError::Config {
            field: "entropy_coef",
            message: "an entropy bonus needs the entropies".to_owned(),
        });
    }
    Ok(())
}

/// The loss type's per-token surrogate (`[n, t]`, or `[n, 1]` for a sequence-level weight)
/// from the importance `weights`, and `vespo`'s φ per row.
fn surrogate<B: Backend>(
    config: &LossConfig,
    weights: &Tensor<B, 2>,
    logp: &Tensor<B, 2>,
    adv32: &[f32],
    log_ratio_host: Option<&[f32]>,
    mask: &[Vec<bool>],
) -> (Tensor<B, 2>, Option<Vec<f32>>) {
    let mut vespo_phi = None;
    let device = logp.device();
    let adv = rows_of::<B>(adv32.to_vec(), &device);
    let per_token = match config.loss_type {
        LossType::Cispo => {
            let capped = weights.clone().clamp_max(config.epsilon_high).detach();
            (capped * adv.clone() * logp.clone()).neg()
        }
        LossType::Sapo => {
            let temps: Vec<f32> = adv32
                .iter()
                .map(|a| {
                    let t = if *a > 0.0 {
                        config.sapo_temperature_pos
                    } else {
                        config.sapo_temperature_neg
                    };
                    t as f32
                })
                .collect();
            let temps = rows_of::<B>(temps, &device);
            let gate = sigmoid((weights.clone() - 1.0) * temps.clone()) * 4.0 / temps;
            (gate * adv.clone()).neg()
        }
        LossType::Vespo => {
            let phi = gamma_weights(log_ratio_host.unwrap_or_default(), mask, adv32, config);
            let phi_t = rows_of::<B>(phi.clone(), &device);
            vespo_phi = Some(phi);
            (phi_t * adv.clone() * logp.clone()).neg()
        }
        LossType::Grpo | LossType::Bnpo | LossType::DrGrpo | LossType::Dapo | LossType::Luspo => {
            let clipped = weights
                .clone()
                .clamp(1.0 - config.epsilon_low, 1.0 + config.epsilon_high);
            let unclipped = match config.delta {
                Some(delta) => weights.clone().clamp_max(delta),
                None => weights.clone(),
            };
            (unclipped * adv.clone())
                .min_pair(clipped * adv.clone())
                .neg()
        }
    };
    (per_token, vespo_phi)
}

/// `vespo`'s φ per row, as TRL's `get_gamma_weights` (in f32, detached): from the sum of the
/// row's active log-ratios clamped to ±20, `log w` clamped to [ln 1e-8, 20].
fn gamma_weights(
    log_ratio: &[f32],
    mask: &[Vec<bool>],
    adv: &[f32],
    config: &LossConfig,
) -> Vec<f32> {
    let t = mask.first().map_or(0, Vec::len);
    let lower = 1e-8f32.ln();
    mask.iter()
        .zip(adv)
        .enumerate()
        .map(|(i, (row, a))| {
            let sum: f32 = row
                .iter()
                .enumerate()
                .map(|(j, on)| log_ratio[i * t + j].clamp(-20.0, 20.0) * f32::from(u8::from(*on)))
                .sum();
            let log_w = sum.clamp(lower, 20.0);
            let (k, lambda) = if *a >= 0.0 {
                (config.vespo.k_pos, config.vespo.lambda_pos)
            } else {
                (config.vespo.k_neg, config.vespo.lambda_neg)
            };
            let (k, lambda) = (k as f32, (lambda as f32).max(1e-4));
            let phi = (lambda + k * log_w - lambda * log_w.exp()).exp();
            if phi.is_finite() { phi } else { 0.0 }
        })
        .collect()
}

/// The off-policy sequence mask (TRL's `get_off_policy_mask`): 1 for a row with A ≥ 0 or whose
/// mean active `logπ_old − logπ` is at most `threshold`, else 0.
fn off_policy_mask(log_ratio: &[f32], mask: &[Vec<bool>], adv: &[f32], threshold: f64) -> Vec<f32> {
    let t = mask.first().map_or(0, Vec::len);
    mask.iter()
        .zip(adv)
        .enumerate()
        .map(|(i, (row, a))| {
            let (mut sum, mut count) = (0.0f32, 0.0f32);
            for (j, on) in row.iter().enumerate() {
                let kl = -log_ratio[i * t + j];
                let kl = if kl.is_nan() { 0.0 } else { kl };
                sum += kl * f32::from(u8::from(*on));
                count += f32::from(u8::from(*on));
            }
            let mean = sum / count.max(1.0);
            f32::from(u8::from(*a >= 0.0 || mean <= threshold as f32))
        })
        .collect()
}

/// The clip statistics TRL logs, from the importance weights (`[n, width]`, width 1 at sequence
/// level, where a share counts rows).
struct Stats {
    low: f64,
    high: f64,
    region: f64,
    row_low: Vec<Option<f64>>,
    row_high: Vec<Option<f64>>,
    cispo: Option<f64>,
    counted: f64,
}

impl Stats {
    fn of(
        weights: &[f32],
        width: usize,
        mask: &[Vec<bool>],
        adv: &[f32],
        config: &LossConfig,
    ) -> Self {
        let (lo, hi) = (
            1.0 - config.epsilon_low as f32,
            1.0 + config.epsilon_high as f32,
        );
        let cap = config.epsilon_high as f32;
        let (mut low, mut high, mut region, mut cispo, mut counted) = (0.0, 0.0, 0.0, 0.0, 0.0);
        let (mut row_low, mut row_high) = (Vec::new(), Vec::new());
        for (i, (row, a)) in mask.iter().zip(adv).enumerate() {
            let (mut l, mut h, mut c) = (0.0, 0.0, 0.0);
            for (j, on) in row.iter().enumerate() {
                if width > 1 && !*on {
                    continue;
                }
                let w = weights[i * width + j.min(width - 1)];
                let is_low = w < lo && *a < 0.0;
                let is_high = w > hi && *a > 0.0;
                l += f64::from(u8::from(is_low));
                h += f64::from(u8::from(is_high));
                region += f64::from(u8::from(is_low || is_high));
                cispo += f64::from(u8::from(w > cap && *a > 0.0));
                c += 1.0;
                if width == 1 {
                    break;
                }
            }
            low += l;
            high += h;
            counted += c;
            row_low.push((c > 0.0).then(|| l / c));
            row_high.push((c > 0.0).then(|| h / c));
        }
        let share = |x: f64| x / f64::max(counted, 1.0);
        let clips = config.loss_type.clips();
        Self {
            low: if clips { share(low) } else { 0.0 },
            high: if clips { share(high) } else { 0.0 },
            region: if clips { share(region) } else { 0.0 },
            row_low,
            row_high,
            cispo: (config.loss_type == LossType::Cispo).then(|| share(cispo)),
            counted,
        }
    }
}
