//! The GRPO loss as TRL's `compute_loss` defines it, per token:
//! `ℓ = −min(ρ·A, clip(ρ, 1−ε_low, 1+ε_high)·A) + β·KL`, with `ρ = exp(logπ − logπ_old)` and
//! `KL = exp(ref − logπ) − (ref − logπ) − 1` (k3), then aggregated over the completion mask.

use burn::tensor::backend::Backend;
use burn::tensor::{Tensor, TensorData};
use serde::{Deserialize, Serialize};

use crate::{GrpoError, LossType};

/// The loss hyper-parameters.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct LossConfig {
    /// Lower clip ε (TRL `epsilon`, 0.2).
    pub epsilon_low: f64,
    /// Upper clip ε (TRL `epsilon_high`; DAPO recommends 0.28).
    pub epsilon_high: f64,
    /// KL weight β; 0 (TRL's default) skips the reference entirely.
    pub beta: f64,
    /// Aggregation.
    pub loss_type: LossType,
    /// The completion length cap, the `dr_grpo` denominator.
    pub max_completion_length: usize,
}

impl Default for LossConfig {
    fn default() -> Self {
        Self {
            epsilon_low: 0.2,
            epsilon_high: 0.2,
            beta: 0.0,
            loss_type: LossType::Dapo,
            max_completion_length: 256,
        }
    }
}

impl LossConfig {
    /// Checks ranges, naming the field.
    pub fn validate(&self) -> Result<(), GrpoError> {
        let range = |field: &'static str, v: f64, ok: bool, accepted: &str| {
            if ok && v.is_finite() {
                Ok(())
            } else {
                Err(GrpoError::Config {
                    field,
                    message: format!("{v} is out of range: {accepted}"),
                })
            }
        };
        range(
            "epsilon_low",
            self.epsilon_low,
            self.epsilon_low > 0.0 && self.epsilon_low < 1.0,
            "0 < ε_low < 1",
        )?;
        range(
            "epsilon_high",
            self.epsilon_high,
            self.epsilon_high > 0.0,
            "ε_high > 0",
        )?;
        range("beta", self.beta, self.beta >= 0.0, "β ≥ 0")?;
        if self.max_completion_length == 0 {
            return Err(GrpoError::Config {
                field: "max_completion_length",
                message: "must be at least 1".to_owned(),
            });
        }
        Ok(())
    }
}

/// The loss and the statistics TRL logs with it.
#[derive(Debug, Clone)]
pub struct LossOutput<B: Backend> {
    /// The scalar loss, differentiable through the policy log-probs.
    pub loss: Tensor<B, 1>,
    /// Share of active tokens with ρ < 1 − ε_low and A < 0 (`clip_ratio/low_mean`).
    pub clip_ratio_low: f64,
    /// Share of active tokens with ρ > 1 + ε_high and A > 0 (`clip_ratio/high_mean`).
    pub clip_ratio_high: f64,
    /// Share clipped either way (`clip_ratio/region_mean`).
    pub clip_ratio_region: f64,
    /// Mean k3 KL over active tokens, when β > 0 (`kl`).
    pub kl: Option<f64>,
}

fn host<B: Backend, const D: usize>(t: Tensor<B, D>) -> Vec<f64> {
    t.into_data()
        .convert::<f64>()
        .to_vec::<f64>()
        .unwrap_or_default()
}

/// The denominators of a loss over rows that are part of a larger batch, so that the parts'
/// losses sum to the whole's: each defaults to the rows' own.
#[derive(Debug, Clone, Copy, Default, PartialEq)]
pub struct Whole {
    /// `dapo`: the active tokens of the whole accumulated batch (all micro-batches).
    pub batch_active_tokens: Option<f64>,
    /// `grpo`, `bnpo`, `dr_grpo`: the rows and active tokens of the micro-batch these rows are a
    /// chunk of (the trainer back-propagates a micro-batch in chunks to bound its memory).
    pub micro_batch: Option<(usize, f64)>,
}

/// The GRPO loss of `logp` (`[n, t]`, log-probs of the sampled tokens under the policy being
/// trained). `old_logp` defaults to `logp` detached (μ = 1); `ref_logp` is needed when β > 0.
/// `mask` marks the completion tokens that count (environment tokens and padding are 0).
/// `whole` names the denominators when these rows are part of a larger batch (defaults: these
/// rows' own).
pub fn grpo_loss<B: Backend>(
    logp: Tensor<B, 2>,
    old_logp: Option<Tensor<B, 2>>,
    ref_logp: Option<Tensor<B, 2>>,
    advantages: &[f64],
    mask: &[Vec<bool>],
    config: &LossConfig,
    whole: Whole,
) -> Result<LossOutput<B>, GrpoError> {
    config.validate()?;
    let [n, t] = logp.dims();
    if advantages.len() != n || mask.len() != n || mask.iter().any(|m| m.len() != t) {
        return Err(GrpoError::Shape(format!(
            "log-probs are [{n}, {t}] but there are {} advantages and a {}-row mask",
            advantages.len(),
            mask.len()
        )));
    }
    if config.beta > 0.0 && ref_logp.is_none() {
        return Err(GrpoError::Config {
            field: "beta",
            message: "β > 0 needs reference log-probs".to_owned(),
        });
    }
    let device = logp.device();
    let mask_values: Vec<f32> = mask
        .iter()
        .flatten()
        .map(|m| if *m { 1.0 } else { 0.0 })
        .collect();
    let active: f64 = mask_values.iter().map(|m| f64::from(*m)).sum();
    let mask_t: Tensor<B, 2> = Tensor::from_data(TensorData::new(mask_values, [n, t]), &device);
    let adv: Tensor<B, 2> = Tensor::from_data(
        TensorData::new(
            advantages.iter().map(|a| *a as f32).collect::<Vec<_>>(),
            [n, 1],
        ),
        &device,
    );
    let old = old_logp.unwrap_or_else(|| logp.clone().detach());
    let ratio = (logp.clone() - old).exp();
    let clipped = ratio
        .clone()
        .clamp(1.0 - config.epsilon_low, 1.0 + config.epsilon_high);
    let surrogate = (ratio.clone() * adv.clone()).min_pair(clipped * adv);
    let mut per_token = surrogate.neg();
    let mut kl_mean = None;
    if config.beta > 0.0
        && let Some(reference) = ref_logp
    {
        let diff = reference - logp;
        let kl = diff.clone().exp() - diff - 1.0;
        let kl_host = host(kl.clone().detach() * mask_t.clone());
        kl_mean = Some(kl_host.iter().sum::<f64>() / active.max(1.0));
        per_token = per_token + kl.mul_scalar(config.beta);
    }
    let masked = per_token * mask_t.clone();
    let (micro_rows, micro_active) = whole.micro_batch.unwrap_or((n, active));
    let loss = match config.loss_type {
        LossType::Grpo => {
            let per_seq = masked.sum_dim(1) / mask_t.sum_dim(1).clamp_min(1.0);
            match whole.micro_batch {
                None => per_seq.mean().reshape([1]),
                Some(_) => per_seq.sum().div_scalar(micro_rows as f64).reshape([1]),
            }
        }
        LossType::Bnpo => masked.sum().div_scalar(micro_active.max(1.0)),
        LossType::DrGrpo => masked
            .sum()
            .div_scalar((micro_rows * config.max_completion_length) as f64),
        LossType::Dapo => masked
            .sum()
            .div_scalar(whole.batch_active_tokens.unwrap_or(active).max(1.0)),
    };
    let (mut low, mut high) = (0.0, 0.0);
    let ratios = host(ratio.detach());
    for (i, (row, a)) in mask.iter().zip(advantages).enumerate() {
        for (j, on) in row.iter().enumerate() {
            let r = ratios[i * t + j];
            if *on && r < 1.0 - config.epsilon_low && *a < 0.0 {
                low += 1.0;
            }
            if *on && r > 1.0 + config.epsilon_high && *a > 0.0 {
                high += 1.0;
            }
        }
    }
    let denom = active.max(1.0);
    Ok(LossOutput {
        loss,
        clip_ratio_low: low / denom,
        clip_ratio_high: high / denom,
        clip_ratio_region: (low + high) / denom,
        kl: kl_mean,
    })
}
