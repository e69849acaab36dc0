//! Choosing the next token on the host from one row of logits: the repetition penalty, then
//! temperature, top-k, top-p (nucleus) and min-p in transformers' order, and an inverse-CDF draw
//! from [`PolicyRng`], all in f64 so the choice does not depend on the backend beyond the logits
//! themselves.

use crate::{PolicyError, PolicyRng};

/// How completions are sampled.
#[derive(Debug, Clone, PartialEq)]
pub struct SamplingConfig {
    /// Softmax temperature; 0 means greedy (argmax, no randomness consumed).
    pub temperature: f64,
    /// Keep only the `top_k` likeliest tokens; 0 disables top-k.
    pub top_k: usize,
    /// Nucleus mass in `(0, 1]` (of what top-k kept); 1 disables top-p.
    pub top_p: f64,
    /// Drop tokens less likely than `min_p` times the likeliest one, in `[0, 1)`; 0 disables it.
    pub min_p: f64,
    /// transformers' repetition penalty (> 0; 1 disables it): before sampling, the logit of
    /// every token already in the row (prompt and completion) is divided by it when positive
    /// and multiplied by it when negative.
    pub repetition_penalty: f64,
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
        if !(self.repetition_penalty.is_finite() && self.repetition_penalty > 0.0) {
            return Err(PolicyError::Request(format!(
                "repetition_penalty must be > 0 (1 disables it), got {}",
                self.repetition_penalty
            )));
        }
        if !(0.0..1.0).contains(&self.min_p) {
            return Err(PolicyError::Request(format!(
                "min_p must be in [0, 1), got {}",
                self.min_p
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

/// A row's distribution ready for its draw ([`prepare`], then [`Draw::pick`]): all the work of
/// sampling that needs no random number, so rows can prepare side by side and still draw from
/// one RNG in row order. The token drawn comes with its log-probability under
/// `softmax(logits / temperature)` (before the repetition penalty and the top-k, top-p and min-p
/// cuts: what scoring recomputes).
pub(crate) enum Draw {
    /// Greedy decoding: the token is known.
    Greedy { token: usize, logp: f64 },
    /// The kept tokens (`order`) and their probabilities, and the uncut log-probabilities.
    Random {
        logp: Vec<f64>,
        order: Vec<usize>,
        probs: Vec<f64>,
    },
}

/// Everything of a draw from `logits` (of a row holding `seen` so far) but the random number.
pub(crate) fn prepare(logits: &[f32], seen: &[u32], config: &SamplingConfig) -> Draw {
    let logp = log_softmax(logits, config.temperature);
    let penalised;
    let choice: &[f64] = if config.repetition_penalty == 1.0 {
        &logp
    } else {
        penalised = log_softmax(
            &penalise(logits, seen, config.repetition_penalty),
            config.temperature,
        );
        &penalised
    };
    if config.temperature == 0.0 {
        let token = argmax(choice);
        return Draw::Greedy {
            token,
            logp: logp[token],
        };
    }
    let mut order: Vec<usize> = (0..choice.len()).collect();
    let cuts = config.top_k > 0 || config.top_p < 1.0 || config.min_p > 0.0;
    if cuts {
        // Descending probability, ties by token id: a total, deterministic order.
        order.sort_by(|&a, &b| choice[b].total_cmp(&choice[a]).then(a.cmp(&b)));
    }
    let mut probs: Vec<f64> = order.iter().map(|&i| choice[i].exp()).collect();
    let mut keep = probs.len();
    if config.top_k > 0 {
        keep = keep.min(config.top_k);
    }
    if config.top_p < 1.0 {
        // The nucleus of what top-k kept, renormalised (as transformers' TopPLogitsWarper sees
        // the distribution after TopKLogitsWarper); without top-k, the whole distribution's mass
        // counts as 1, as it always has.
        let kept: f64 = if keep < probs.len() {
            probs[..keep].iter().sum()
        } else {
            1.0
        };
        let mut mass = 0.0;
        for (n, p) in probs[..keep].iter().enumerate() {
            mass += p / kept;
            if mass >= config.top_p {
                keep = n + 1;
                break;
            }
        }
    }
    if config.min_p > 0.0 {
        // transformers' MinPLogitsWarper: below min_p times the likeliest token is dropped.
        let floor = config.min_p * probs[0];
        keep = probs[..keep]
            .iter()
            .take_while(|p| **p >= floor)
            .count()
            .max(1);
    }
    order.truncate(keep);
    probs.truncate(keep);
    Draw::Random { logp, order, probs }
}

impl Draw {
    /// Draws the token (one number from `rng` unless greedy) by the inverse CDF over the kept
    /// tokens, and returns it with its uncut log-probability.
    pub(crate) fn pick(self, rng: &mut PolicyRng) -> (u32, f64) {
        match self {
            Draw::Greedy { token, logp } => (token as u32, logp),
            Draw::Random { logp, order, probs } => {
                let total: f64 = probs.iter().sum();
                let u = rng.next_f64() * total;
                let mut acc = 0.0;
                let mut chosen = order[order.len() - 1];
                for (n, p) in probs.iter().enumerate() {
                    acc += p;
                    if u < acc {
                        chosen = order[n];
                        break;
                    }
                }
                (chosen as u32, logp[chosen])
            }
        }
    }
}

/// transformers' `RepetitionPenaltyLogitsProcessor`: the logit of each token in `seen` divided by
/// `penalty` when positive, multiplied by it otherwise.
fn penalise(logits: &[f32], seen: &[u32], penalty: f64) -> Vec<f32> {
    let mut out = logits.to_vec();
    let mut done = vec![false; logits.len()];
    for &t in seen {
        let t = t as usize;
        if t < out.len() && !done[t] {
            done[t] = true;
            let x = f64::from(logits[t]);
            out[t] = (if x < 0.0 { x * penalty } else { x / penalty }) as f32;
        }
    }
    out
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

/// One token at `temperature` with every cut off: what the tests vary from.
#[cfg(test)]
pub(crate) fn one_token_at(temperature: f64) -> SamplingConfig {
    SamplingConfig {
        temperature,
        top_k: 0,
        top_p: 1.0,
        min_p: 0.0,
        repetition_penalty: 1.0,
        max_new_tokens: 1,
        stop_tokens: vec![],
    }
}

#[cfg(test)]
mod tests {
    use std::collections::BTreeSet;

    use super::*;

    /// One draw, as generation makes it.
    fn sample(
        logits: &[f32],
        seen: &[u32],
        config: &SamplingConfig,
        rng: &mut PolicyRng,
    ) -> (u32, f64) {
        prepare(logits, seen, config).pick(rng)
    }

    /// Probabilities 0.5, 0.3, 0.15, 0.05 at temperature 1.
    fn logits() -> Vec<f32> {
        [0.5f64, 0.3, 0.15, 0.05]
            .iter()
            .map(|p| p.ln() as f32)
            .collect()
    }

    /// The tokens 2000 draws with `edit` applied to a plain temperature-1 config can give.
    fn drawn(edit: impl Fn(&mut SamplingConfig)) -> BTreeSet<u32> {
        let mut config = one_token_at(1.0);
        edit(&mut config);
        config.validate().expect("valid");
        let mut rng = PolicyRng::from_seed(3);
        let logits = logits();
        (0..2000)
            .map(|_| {
                let (token, logp) = sample(&logits, &[], &config, &mut rng);
                // The log-probability is the uncut distribution's, which scoring recomputes.
                let p = [0.5f64, 0.3, 0.15, 0.05][token as usize];
                assert!((logp - p.ln()).abs() < 1e-6, "{token}: {logp}");
                token
            })
            .collect()
    }

    #[test]
    fn top_k_top_p_and_min_p_cut_the_distribution_as_transformers_does() {
        assert_eq!(drawn(|_| {}), BTreeSet::from([0, 1, 2, 3]));
        assert_eq!(drawn(|c| c.top_k = 1), BTreeSet::from([0]));
        assert_eq!(drawn(|c| c.top_k = 3), BTreeSet::from([0, 1, 2]));
        // top-p 0.8 keeps 0.5 + 0.3; after top-k 2 the same nucleus renormalised is 0.625 of
        // the mass at the first token, so 0.6 keeps only it.
        assert_eq!(drawn(|c| c.top_p = 0.8), BTreeSet::from([0, 1]));
        assert_eq!(
            drawn(|c| {
                c.top_k = 2;
                c.top_p = 0.6;
            }),
            BTreeSet::from([0])
        );
        // min-p: below min_p × 0.5 is dropped.
        assert_eq!(drawn(|c| c.min_p = 0.2), BTreeSet::from([0, 1, 2]));
        assert_eq!(drawn(|c| c.min_p = 0.7), BTreeSet::from([0]));
    }

    #[test]
    fn the_repetition_penalty_steers_away_from_seen_tokens_but_not_the_log_probability() {
        let greedy = |penalty: f64, seen: &[u32]| {
            let config = SamplingConfig {
                repetition_penalty: penalty,
                ..one_token_at(0.0)
            };
            sample(&logits(), seen, &config, &mut PolicyRng::from_seed(1))
        };
        assert_eq!(greedy(1.0, &[0, 0]).0, 0);
        // ln 0.5 · 10 falls below ln 0.3: the seen token loses; its neighbour's log-probability
        // is still the unpenalised one.
        let (token, logp) = greedy(10.0, &[0, 0]);
        assert_eq!(token, 1);
        assert!((logp - 0.3f64.ln()).abs() < 1e-6, "{logp}");
        // Only seen tokens are penalised.
        assert_eq!(greedy(10.0, &[2, 3]).0, 0);
    }

    #[test]
    fn min_p_outside_zero_to_one_is_refused_naming_it() {
        let config = SamplingConfig {
            min_p: 1.0,
            ..one_token_at(1.0)
        };
        let err = config.validate().expect_err("refused").to_string();
        assert!(err.starts_with("min_p must be in [0, 1)"), "{err}");
    }
}
