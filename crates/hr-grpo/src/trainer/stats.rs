//! The loss statistics of a step as TRL logs them: each micro-batch's value (what one TRL
//! `_compute_loss` call logs), from sums over its chunks so that how a micro-batch is chunked
//! changes nothing, then their mean over the step's micro-batches (TRL averages its calls).

use std::collections::BTreeMap;

use crate::LossConfig;

/// What one chunk adds to its micro-batch's statistics.
#[derive(Debug, Clone, Default, serde::Serialize, serde::Deserialize)]
pub(super) struct Sums {
    /// Low-, high- and either-way-clipped, and `cispo`-clipped, out of `counted` (active
    /// tokens; rows at sequence level).
    pub(super) low: f64,
    pub(super) high: f64,
    pub(super) region: f64,
    pub(super) cispo: f64,
    pub(super) counted: f64,
    /// Each row's share of low- and high-clipped (rows with something counted).
    pub(super) row_low: Vec<f64>,
    pub(super) row_high: Vec<f64>,
    /// The KL term summed over active tokens (β > 0), and the active tokens.
    pub(super) kl: Option<f64>,
    pub(super) active: f64,
    /// Entropy summed over active positions, and their count.
    pub(super) entropy: f64,
    pub(super) positions: f64,
    /// `vespo`'s φ summed over rows, and the rows.
    pub(super) phi: Option<f64>,
    pub(super) rows: f64,
    /// The chunk's part of the micro-batch's policy loss (with the entropy bonus on).
    pub(super) policy_loss: Option<f64>,
}

fn add_some(total: &mut Option<f64>, value: Option<f64>) {
    if let Some(v) = value {
        *total = Some(total.unwrap_or(0.0) + v);
    }
}

impl Sums {
    fn add(&mut self, other: Self) {
        self.low += other.low;
        self.high += other.high;
        self.region += other.region;
        self.cispo += other.cispo;
        self.counted += other.counted;
        self.row_low.extend(other.row_low);
        self.row_high.extend(other.row_high);
        add_some(&mut self.kl, other.kl);
        self.active += other.active;
        self.entropy += other.entropy;
        self.positions += other.positions;
        add_some(&mut self.phi, other.phi);
        self.rows += other.rows;
        add_some(&mut self.policy_loss, other.policy_loss);
    }

    /// The micro-batch's metrics under TRL's names.
    fn metrics(&self, loss: &LossConfig) -> Vec<(&'static str, f64)> {
        let share = |x: f64| x / self.counted.max(1.0);
        let mut out = vec![("entropy", self.entropy / self.positions.max(1.0))];
        if loss.loss_type.clips() {
            out.extend([
                ("clip_ratio/low_mean", share(self.low)),
                ("clip_ratio/high_mean", share(self.high)),
                ("clip_ratio/region_mean", share(self.region)),
            ]);
            // TRL's nanmin and nanmax over rows: none when no row counted anything.
            if let Some(min) = self.row_low.iter().copied().reduce(f64::min) {
                out.push(("clip_ratio/low_min", min));
            }
            if let Some(max) = self.row_high.iter().copied().reduce(f64::max) {
                out.push(("clip_ratio/high_max", max));
            }
        }
        if loss.loss_type == crate::LossType::Cispo {
            out.push(("cispo_clip_ratio", share(self.cispo)));
        }
        if let Some(kl) = self.kl {
            out.push(("kl", kl / self.active.max(1.0)));
        }
        if let Some(phi) = self.phi {
            out.push(("vespo/phi_seq_mean", phi / self.rows.max(1.0)));
        }
        if let Some(policy_loss) = self.policy_loss {
            out.extend([
                ("policy_loss", policy_loss),
                ("entropy_coef", loss.entropy_coef),
            ]);
        }
        out
    }
}

/// The step's loss statistics by micro-batch (first iteration).
#[derive(Default)]
pub(super) struct Totals {
    micros: BTreeMap<usize, Sums>,
}

impl Totals {
    /// Adds a chunk of micro-batch `micro`.
    pub(super) fn add(&mut self, micro: usize, sums: Sums) {
        self.micros.entry(micro).or_default().add(sums);
    }

    /// Writes each metric's mean over the micro-batches that have it.
    pub(super) fn record(self, loss: &LossConfig, metrics: &mut BTreeMap<String, f64>) {
        let mut means: BTreeMap<&str, (f64, f64)> = BTreeMap::new();
        for sums in self.micros.values() {
            for (key, value) in sums.metrics(loss) {
                let (total, count) = means.entry(key).or_default();
                *total += value;
                *count += 1.0;
            }
        }
        for (key, (total, count)) in means {
            metrics.insert(key.to_owned(), total / count);
        }
    }
}
