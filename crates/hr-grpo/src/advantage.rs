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

fn mean(xs: &[f64]) -> f64 {
    xs.iter().sum::<f64>() / xs.len() as f64
}

/// Bessel-corrected standard deviation (torch's `std`, TRL's `nanstd`).
fn std(xs: &[f64]) -> f64 {
    let m = mean(xs);
    (xs.iter().map(|x| (x - m).powi(2)).sum::<f64>() / (xs.len() as f64 - 1.0)).sqrt()
}

/// Advantages of `rewards`, laid out as consecutive groups of `group_size` completions of one
/// task each. A group whose rewards are all equal gets advantage 0 for every member.
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
    if let Some(bad) = rewards.iter().find(|r| !r.is_finite()) {
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
        let sum: f64 = group.iter().sum();
        let g = group.len() as f64;
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
            out.push((r - baseline) / scale);
        }
    }
    Ok(out)
}
