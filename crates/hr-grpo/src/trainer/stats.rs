//! The loss statistics of a step: what each back-propagated chunk contributes and how they
//! add up to the metrics TRL logs.

use std::collections::BTreeMap;

use crate::LossConfig;

/// Loss statistics that add up over a step's chunks: each chunk's weighted by its share (of
/// the step's active tokens, or of its rows and micro-batches).
#[derive(Debug, Clone, Copy, Default)]
pub(super) struct Shares {
    pub(super) low: f64,
    pub(super) high: f64,
    pub(super) region: f64,
    pub(super) kl: Option<f64>,
    pub(super) cispo: Option<f64>,
    pub(super) vespo_phi: Option<f64>,
    pub(super) policy_loss: Option<f64>,
}

impl Shares {
    pub(super) fn add(&mut self, other: Self) {
        let sum = |total: &mut Option<f64>, v: Option<f64>| {
            if let Some(v) = v {
                *total = Some(total.unwrap_or(0.0) + v);
            }
        };
        self.low += other.low;
        self.high += other.high;
        self.region += other.region;
        sum(&mut self.kl, other.kl);
        sum(&mut self.cispo, other.cispo);
        sum(&mut self.vespo_phi, other.vespo_phi);
        sum(&mut self.policy_loss, other.policy_loss);
    }
}

/// A chunk's loss statistics: its shares, its rows' clip shares, and the entropy of each of its
/// active positions in row order.
pub(super) struct ChunkStats {
    pub(super) shares: Shares,
    pub(super) row_low: Vec<Option<f64>>,
    pub(super) row_high: Vec<Option<f64>>,
    pub(super) entropy: Vec<f64>,
}

/// The step's loss statistics, summed over its chunks (first iteration).
#[derive(Default)]
pub(super) struct Totals {
    pub(super) shares: Shares,
    pub(super) low_min: Option<f64>,
    pub(super) high_max: Option<f64>,
    pub(super) entropy: f64,
    pub(super) counted: f64,
}

impl Totals {
    pub(super) fn add(&mut self, stats: ChunkStats) {
        self.shares.add(stats.shares);
        for v in stats.row_low.into_iter().flatten() {
            self.low_min = Some(self.low_min.map_or(v, |m| m.min(v)));
        }
        for v in stats.row_high.into_iter().flatten() {
            self.high_max = Some(self.high_max.map_or(v, |m| m.max(v)));
        }
        for e in stats.entropy {
            self.entropy += e;
            self.counted += 1.0;
        }
    }

    /// Writes TRL's metric names: the clip ratios for the clipped objectives (`low_min` and
    /// `high_max` over every row of the step), `cispo_clip_ratio`, `vespo/phi_seq_mean`, `kl`,
    /// `entropy`, and `policy_loss` with `entropy_coef` when the bonus is on.
    pub(super) fn record(self, loss: &LossConfig, metrics: &mut BTreeMap<String, f64>) {
        if loss.loss_type.clips() {
            for (key, value) in [
                ("clip_ratio/low_mean", Some(self.shares.low)),
                ("clip_ratio/high_mean", Some(self.shares.high)),
                ("clip_ratio/region_mean", Some(self.shares.region)),
                ("clip_ratio/low_min", self.low_min),
                ("clip_ratio/high_max", self.high_max),
            ] {
                if let Some(value) = value {
                    metrics.insert(key.to_owned(), value);
                }
            }
        }
        for (key, value) in [
            ("cispo_clip_ratio", self.shares.cispo),
            ("vespo/phi_seq_mean", self.shares.vespo_phi),
            ("kl", self.shares.kl),
        ] {
            if let Some(value) = value {
                metrics.insert(key.to_owned(), value);
            }
        }
        if let Some(policy_loss) = self.shares.policy_loss {
            metrics.insert("policy_loss".to_owned(), policy_loss);
            metrics.insert("entropy_coef".to_owned(), loss.entropy_coef);
        }
        metrics.insert("entropy".to_owned(), self.entropy / self.counted.max(1.0));
    }
}
