//! Choosing the next token on the host from one row of logits: temperature, top-p (nucleus) and
//! an inverse-CDF draw from [`PolicyRng`], all in f64 so the choice does not depend on the backend
//! beyond the logits themselves.

use crate::{PolicyError, PolicyRng};

/// How completions are sampled.
#[derive(Debug, Clone, PartialEq)]
pub struct SamplingConfig {
    /// Softmax temperature; 0 means greedy (argmax, no randomness consumed).
    pub temperature: f64,
    /// Nucleus mass in `(0, 1]`; 1 disables top-p.
    pub top_p: f64,
    /// Most tokens generated per completion.
    pub max_new_tokens: usize,
    /// Tokens that end a completion (kept as its last token).
    pub stop_tokens: Vec<u32>,
}

impl SamplingConfig {
    /// Checks the values, naming the bad one.
    pub fn validate(&self) -> Result<(), PolicyError> {
        if !(self.temperature.is_finite() && self.temperature >= 0.0) {
            return Err(PolicyError::Request(format!(
                "temperature must be a finite number ≥ 0 (0 = greedy), got {}",
                self.temperature
            )));
        }
        if !(self.top_p > 0.0 && self.top_p <= 1.0) {
            return Err(PolicyError::Request(format!(
                "top_p must be in (0, 1], got {}",
                self.top_p
            )));
        }
        if self.max_new_tokens == 0 {
            return Err(PolicyError::Request(
                "max_new_tokens must be at least 1".to_owned(),
            ));
        }
        Ok(())
    }
}

/// `log_softmax(logits / t)` in f64 (`t = 1` when greedy).
pub(crate) fn log_softmax(logits: &[f32], temperature: f64) -> Vec<f64> {
    let t = if temperature > 0.0 { temperature } else { 1.0 };
    let scaled: Vec<f64> = logits.iter().map(|&x| f64::from(x) / t).collect();
    let max = scaled.iter().copied().fold(f64::NEG_INFINITY, f64::max);
    let log_sum = scaled.iter().map(|x| (x - max).exp()).sum::<f64>().ln() + max;
    scaled.into_iter().map(|x| x - log_sum).collect()
}

/// Picks a token from `logits` and returns it with its log-probability under
/// `softmax(logits / temperature)` (before the top-p cut, which is what scoring recomputes).
pub(crate) fn sample(logits: &[f32], config: &SamplingConfig, rng: &mut PolicyRng) -> (u32, f64) {
    let logp = log_softmax(logits, config.temperature);
    let token = if config.temperature == 0.0 {
        argmax(&logp)
    } else {
        let mut order: Vec<usize> = (0..logp.len()).collect();
        if config.top_p < 1.0 {
            // Descending probability, ties by token id: a total, deterministic order.
            order.sort_by(|&a, &b| logp[b].total_cmp(&logp[a]).then(a.cmp(&b)));
        }
        let probs: Vec<f64> = order.iter().map(|&i| logp[i].exp()).collect();
        let mut keep = probs.len();
        if config.top_p < 1.0 {
            let mut mass = 0.0;
            for (n, p) in probs.iter().enumerate() {
                mass += p;
                if mass >= config.top_p {
                    keep = n + 1;
                    break;
                }
            }
        }
        let total: f64 = probs[..keep].iter().sum();
        let u = rng.next_f64() * total;
        let mut acc = 0.0;
        let mut chosen = order[keep - 1];
        for (n, p) in probs[..keep].iter().enumerate() {
            acc += p;
            if u < acc {
                chosen = order[n];
                break;
            }
        }
        chosen
    };
    (token as u32, logp[token])
}

fn argmax(values: &[f64]) -> usize {
    let mut best = 0;
    for (i, v) in values.iter().enumerate() {
        if *v > values[best] {
            best = i;
        }
    }
    best
}
