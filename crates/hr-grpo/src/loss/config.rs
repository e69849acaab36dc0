//! The loss's hyper-parameters under TRL's names and defaults ([`LossConfig`], `vespo`'s
//! [`Vespo`]), and the checks a start makes on them.

use serde::{Deserialize, Serialize};

use crate::entropy_control::AdaptiveEntropy;
use crate::{GrpoError, ImportanceSamplingLevel, LossType};

/// The loss hyper-parameters, under TRL's names and with its defaults.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct LossConfig {
    /// Lower clip ε (TRL `epsilon`, 0.2).
    pub epsilon_low: f64,
    /// Upper clip ε (TRL `epsilon_high`; DAPO recommends 0.28; `cispo`'s ε_max, 5 recommended).
    pub epsilon_high: f64,
    /// KL weight β; 0 (TRL's default) skips the reference entirely.
    pub beta: f64,
    /// The objective and its aggregation.
    pub loss_type: LossType,
    /// The completion length cap, the `dr_grpo` denominator.
    pub max_completion_length: usize,
    /// Per-token or per-sequence importance weights.
    pub importance_sampling_level: ImportanceSamplingLevel,
    /// Two-sided clipping (INTELLECT-2): the unclipped weight is capped at δ (> 1 + ε_high).
    pub delta: Option<f64>,
    /// Multiply the KL term by the importance weight (DeepSeek-V3.2's unbiased estimator).
    pub use_bias_correction_kl: bool,
    /// `sapo`'s gate temperature for tokens with positive advantage.
    pub sapo_temperature_pos: f64,
    /// `sapo`'s gate temperature for the others.
    pub sapo_temperature_neg: f64,
    /// `vespo`'s Gamma weighting: power k and decay λ for A ≥ 0 and for A < 0.
    pub vespo: Vespo,
    /// Off-policy sequence masking (DeepSeek-V3.2): a sequence with A < 0 whose mean
    /// `logπ_old − logπ` exceeds this is left out of the loss.
    pub off_policy_mask_threshold: Option<f64>,
    /// Keep only the top `ρ` quantile of tokens by entropy in the loss (1 keeps all).
    pub top_entropy_quantile: f64,
    /// Weight of the entropy bonus (0: none); under adaptive control, the coefficient this
    /// update applies ([`crate::EntropyControl::applied`]).
    pub entropy_coef: f64,
    /// Adaptive entropy control's settings: the bonus is then on even while its coefficient is
    /// 0, so `policy_loss` is reported, as TRL reports it.
    #[serde(default)]
    pub adaptive_entropy: Option<AdaptiveEntropy>,
}

/// `vespo`'s Gamma weighting `φ(w) = e^λ·w^k·e^{−λw}`, its parameters by the advantage's sign.
#[derive(Debug, Clone, Copy, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct Vespo {
    /// k for A ≥ 0.
    pub k_pos: f64,
    /// λ for A ≥ 0.
    pub lambda_pos: f64,
    /// k for A < 0.
    pub k_neg: f64,
    /// λ for A < 0.
    pub lambda_neg: f64,
}

impl Default for Vespo {
    fn default() -> Self {
        Self {
            k_pos: 2.0,
            lambda_pos: 3.0,
            k_neg: 3.0,
            lambda_neg: 2.0,
        }
    }
}

impl Default for LossConfig {
    fn default() -> Self {
        Self {
            epsilon_low: 0.2,
            epsilon_high: 0.2,
            beta: 0.0,
            loss_type: LossType::Dapo,
            max_completion_length: 256,
            importance_sampling_level: ImportanceSamplingLevel::Token,
            delta: None,
            use_bias_correction_kl: true,
            sapo_temperature_pos: 1.0,
            sapo_temperature_neg: 1.05,
            vespo: Vespo::default(),
            off_policy_mask_threshold: None,
            top_entropy_quantile: 1.0,
            entropy_coef: 0.0,
            adaptive_entropy: None,
        }
    }
}

impl LossConfig {
    /// Checks ranges, naming the field.
    pub fn validate(&self) -> Result<(), GrpoError> {
        let check = |field: &'static str, v: f64, ok: bool, accepted: &str| {
            if ok && v.is_finite() {
                Ok(())
            } else {
                Err(GrpoError::Config {
                    field,
                    message: format!("{v} is out of range: {accepted}"),
                })
            }
        };
        let (low, high) = (self.epsilon_low, self.epsilon_high);
        check("epsilon_low", low, low > 0.0 && low < 1.0, "0 < ε_low < 1")?;
        check("epsilon_high", high, high > 0.0, "ε_high > 0")?;
        check("beta", self.beta, self.beta >= 0.0, "β ≥ 0")?;
        if let Some(delta) = self.delta {
            check(
                "delta",
                delta,
                delta > 1.0,
                "δ > 1 (TRL recommends δ > 1 + ε_high)",
            )?;
        }
        for (field, t) in [
            ("sapo_temperature_pos", self.sapo_temperature_pos),
            ("sapo_temperature_neg", self.sapo_temperature_neg),
        ] {
            check(field, t, t > 0.0, "> 0")?;
        }
        let v = self.vespo;
        for (field, x) in [
            ("vespo_k_pos", v.k_pos),
            ("vespo_lambda_pos", v.lambda_pos),
            ("vespo_k_neg", v.k_neg),
            ("vespo_lambda_neg", v.lambda_neg),
        ] {
            check(field, x, x >= 0.0, "≥ 0")?;
        }
        if let Some(t) = self.off_policy_mask_threshold {
            check("off_policy_mask_threshold", t, t > 0.0, "> 0 (e.g. 0.5)")?;
        }
        let q = self.top_entropy_quantile;
        check(
            "top_entropy_quantile",
            q,
            (0.0..=1.0).contains(&q),
            "0 ≤ ρ ≤ 1",
        )?;
        check(
            "entropy_coef",
            self.entropy_coef,
            self.entropy_coef >= 0.0,
            "≥ 0",
        )?;
        if self.max_completion_length == 0 {
            return Err(GrpoError::Config {
                field: "max_completion_length",
                message: "must be at least 1".to_owned(),
            });
        }
        Ok(())
    }
}
