//! Adaptive entropy control as TRL 1.16's `GRPOTrainer` runs it (`use_adaptive_entropy`,
//! Skywork-OR1): the entropy bonus's coefficient moves after every optimiser step, up by `delta`
//! when the step's mean token entropy was at most the target and down otherwise, within
//! `[min, max]`; the bonus applies only while the last step's entropy was at most the target (not
//! before any step, when TRL's last entropy is infinite). The state is two numbers, kept in
//! `trainer_state.json` so a resumed run continues it exactly.

use serde::{Deserialize, Serialize};

/// The controller's settings (TRL's `entropy_coef_min`, `_max`, `_delta`, `entropy_target`).
#[derive(Debug, Clone, Copy, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct AdaptiveEntropy {
    /// The coefficient's floor.
    pub coef_min: f64,
    /// The coefficient's ceiling.
    pub coef_max: f64,
    /// The coefficient's step.
    pub coef_delta: f64,
    /// The mean token entropy (nats) aimed at.
    pub target: f64,
}

/// Where the controller stands: the coefficient and the last step's mean entropy over the tokens
/// the bonus acts on (`None` before the first step: TRL's `inf`, which JSON cannot hold).
#[derive(Debug, Clone, Copy, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct EntropyControl {
    /// The current coefficient (the plan's `entropy_coef` before the first step).
    pub coef: f64,
    /// The last optimiser step's mean token entropy.
    pub last_world_entropy: Option<f64>,
}

impl EntropyControl {
    /// The state before the first step, starting from `coef`.
    pub fn new(coef: f64) -> Self {
        Self {
            coef,
            last_world_entropy: None,
        }
    }

    /// The coefficient the next step's micro-batches all apply: the current one while the last
    /// step's entropy was at most the target, else 0.
    pub fn applied(&self, settings: &AdaptiveEntropy) -> f64 {
        match self.last_world_entropy {
            Some(entropy) if entropy <= settings.target => self.coef,
            _ => 0.0,
        }
    }

    /// After an optimiser step whose tokens had mean entropy `world_entropy`.
    pub fn update(&mut self, settings: &AdaptiveEntropy, world_entropy: f64) {
        self.coef = if world_entropy <= settings.target {
            (self.coef + settings.coef_delta).min(settings.coef_max)
        } else {
            (self.coef - settings.coef_delta).max(settings.coef_min)
        };
        self.last_world_entropy = Some(world_entropy);
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    const SETTINGS: AdaptiveEntropy = AdaptiveEntropy {
        coef_min: 0.0,
        coef_max: 0.012,
        coef_delta: 0.005,
        target: 0.2,
    };

    #[test]
    fn the_coefficient_applies_only_below_target_and_moves_within_its_bounds() {
        let mut control = EntropyControl::new(0.004);
        // Before any step TRL's last entropy is infinite: nothing applies.
        assert_eq!(control.applied(&SETTINGS), 0.0);
        control.update(&SETTINGS, 0.1);
        assert_eq!(control.coef, 0.004 + 0.005);
        assert_eq!(control.applied(&SETTINGS), control.coef);
        control.update(&SETTINGS, 0.2);
        assert_eq!(control.coef, 0.012, "capped at coef_max");
        control.update(&SETTINGS, 0.5);
        assert_eq!(control.coef, 0.012 - 0.005);
        assert_eq!(control.applied(&SETTINGS), 0.0, "entropy above target");
        control.update(&SETTINGS, 0.5);
        control.update(&SETTINGS, 0.5);
        assert_eq!(control.coef, 0.0, "floored at coef_min");
        let json = serde_json::to_string(&control).expect("serialises");
        assert_eq!(
            serde_json::from_str::<EntropyControl>(&json).ok(),
            Some(control)
        );
    }
}
