//! Group-relative advantages, as TRL's `_generate_and_score_completions` computes them.

use serde::{Deserialize, Serialize};

use crate::{GrpoError, ScaleRewards};

/// How advantages are computed.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct AdvantageConfig {
    /// Standard-deviation scaling.
    pub scale_rewards: ScaleRewards,
    /// Centre each reward on the mean of the *other* G − 1 rewards of its group (RLOO /
    /// NeMo-RL) instead of the group mean.
    pub leave_one_out: bool,
    /// Added to the standard deviation before dividing (TRL: 1e-4).
    pub epsilon: f64,
}

impl Default for AdvantageConfig {
    fn default() -> Self {
        Self {
            scale_rewards: ScaleRewards::Group,
            leave_one_out: false,
            epsilon: 1e-4,
        }
    }
}

/// The mean of the values that are not NaN (torch's `nanmean`; NaN when there are none).
pub(crate) fn mean(xs: &[f64]) -> f64 {
    let scored = || xs.iter().filter(|x| !x.is_nan());
    scored().sum::<f64>() / scored().count() as f64
}

/// Bessel-corrected standard deviation of the values that are not NaN (TRL's `nanstd`; NaN
/// for fewer than two).
pub(crate) fn std(xs: &[f64]) -> f64 {
    let m = mean(xs);
    let scored = || xs.iter().filter(|x| !x.is_nan());
    let squares: f64 = scored().map(|x| (x - m).powi(2)).sum();
    (squares / (scored().count() as f64 - 1.0)).sqrt()
}

/// Advantages of `rewards`, laid out as consecutive groups of `group_size` completions of one
/// task each. A group whose rewards are all equal gets advantage 0 for every member. A NaN
/// reward is an unscorable completion (no reward function applied to it, TRL's NaN row): it is
/// left out of its group's mean and standard deviation (and the batch's) and gets advantage 0.
pub fn advantages(
    rewards: &[f64],
    group_size: usize,
    config: &AdvantageConfig,
) -> Result<Vec<f64>, GrpoError> {
    if group_size < 2 {
        return Err(GrpoError::Config {
            field: "num_generations",
            message: format!("must be at least 2, got {group_size}"),
        });
    }
    if rewards.is_empty() || !rewards.len().is_multiple_of(group_size) {
        return Err(GrpoError::Shape(format!(
            "{} rewards do not form whole groups of {group_size}",
            rewards.len()
        )));
    }
    if let Some(bad) = rewards.iter().find(|r| r.is_infinite()) {
        return Err(GrpoError::Shape(format!("reward {bad} is not finite")));
    }
    if !(config.epsilon.is_finite() && config.epsilon >= 0.0) {
        return Err(GrpoError::Config {
            field: "epsilon",
            message: format!("must be ≥ 0, got {}", config.epsilon),
        });
    }
    let batch_std = std(rewards);
    let mut out = Vec::with_capacity(rewards.len());
    for group in rewards.chunks(group_size) {
        let scored = || group.iter().filter(|r| !r.is_nan());
        let (sum, g) = (scored().sum::<f64>(), scored().count() as f64);
        let scale = match config.scale_rewards {
            ScaleRewards::Group => std(group) + config.epsilon,
            ScaleRewards::Batch => batch_std + config.epsilon,
            ScaleRewards::None => 1.0,
        };
        for r in group {
            let baseline = if config.leave_one_out {
                (sum - r) / (g - 1.0)
            } else {
                sum / g
            };
            // NaN (unscorable, or a group too small to centre or scale) carries no signal.
            let a = (r - baseline) / scale;
            out.push(if a.is_nan() { 0.0 } else { a });
        }
    }
    Ok(out)
}
