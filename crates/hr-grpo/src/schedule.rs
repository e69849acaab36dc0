//! Learning-rate schedules: linear warm-up, then constant, cosine or linear decay to zero. A
//! pure function of the step, so resuming needs only the step.

use serde::{Deserialize, Serialize};

use crate::Decay;

/// A warm-up + decay schedule.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct LrSchedule {
    /// Peak learning rate.
    pub learning_rate: f64,
    /// Steps of linear warm-up (step s < warm-up uses `lr·(s+1)/warmup`).
    pub warmup_steps: u64,
    /// Decay after warm-up.
    pub decay: Decay,
    /// The last step of the run (the cosine reaches 0 there).
    pub total_steps: u64,
}

impl LrSchedule {
    /// The rate for 0-based optimiser step `step`.
    pub fn at(&self, step: u64) -> f64 {
        if step < self.warmup_steps {
            return self.learning_rate * (step + 1) as f64 / self.warmup_steps as f64;
        }
        match self.decay {
            Decay::Constant => self.learning_rate,
            Decay::Cosine => {
                let span = self.total_steps.saturating_sub(self.warmup_steps).max(1) as f64;
                let progress = ((step - self.warmup_steps) as f64 / span).min(1.0);
                self.learning_rate * 0.5 * (1.0 + (std::f64::consts::PI * progress).cos())
            }
            // transformers' `get_linear_schedule_with_warmup` after its warm-up:
            // `(total − step) / (total − warmup)`, never below 0.
            Decay::Linear => {
                let span = self.total_steps.saturating_sub(self.warmup_steps).max(1) as f64;
                let left = self.total_steps.saturating_sub(step) as f64;
                self.learning_rate * (left / span).min(1.0)
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn rates(decay: Decay) -> Vec<f64> {
        let s = LrSchedule {
            learning_rate: 1.0,
            warmup_steps: 2,
            decay,
            total_steps: 6,
        };
        (0..6).map(|step| s.at(step)).collect()
    }

    #[test]
    fn each_decay_follows_its_formula_after_the_same_warm_up() {
        assert_eq!(rates(Decay::Constant), [0.5, 1.0, 1.0, 1.0, 1.0, 1.0]);
        // transformers' linear schedule: (total − step) / (total − warm-up).
        assert_eq!(rates(Decay::Linear), [0.5, 1.0, 1.0, 0.75, 0.5, 0.25]);
        let cosine = rates(Decay::Cosine);
        let expected = [0.5, 1.0, 1.0, 0.853_553, 0.5, 0.146_447];
        assert!(
            cosine
                .iter()
                .zip(expected)
                .all(|(a, b)| (a - b).abs() < 1e-6),
            "{cosine:?}"
        );
    }
}
