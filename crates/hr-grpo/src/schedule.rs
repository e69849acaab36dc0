//! Learning-rate schedules: linear warm-up, then constant or cosine decay to zero. A pure
//! function of the step, so resuming needs only the step.

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
        }
    }
}
