//! Determined 0.35's `adaptive_asha` searcher (`stop_once: false`), ported from its
//! `adaptive_asha.go` and `asha.go`: brackets of asynchronous successive halving run side by side.
//! Each bracket has rungs of growing length (the top one `max_length`); a trial that completes a
//! rung's operation is ranked there and promoted to the next rung if it is in the top
//! `1/divisor` of that rung so far (or lets the one that now is move up); a trial that is not
//! promoted waits, and is closed once every trial of the bracket has reported on the first rung
//! and nothing below it is still training. A new trial is created when a report promotes none,
//! up to the bracket's `max_trials`. Pure: the caller creates, trains and closes trials.

use std::collections::{BTreeMap, BTreeSet};

use serde::{Deserialize, Serialize};
use serde_json::Value;

/// The searcher's state, kept with its experiment.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub(crate) struct Asha {
    brackets: Vec<Bracket>,
    smaller_is_better: bool,
}

#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
struct Bracket {
    max_trials: usize,
    /// How many trials it starts with.
    initial: usize,
    divisor: f64,
    rungs: Vec<Rung>,
    /// Each of its trials and the rung it trains for.
    trial_rungs: BTreeMap<i32, usize>,
    closed: BTreeSet<i32>,
    /// Trials that ended without reporting (errored): ranked last.
    exited: BTreeSet<i32>,
}

#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
struct Rung {
    /// The length a trial trains to for this rung.
    length: i64,
    /// Reports so far, best first.
    metrics: Vec<Ranked>,
    /// Trials training for it now.
    outstanding: usize,
}

#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
struct Ranked {
    trial: i32,
    metric: f64,
    promoted: bool,
}

/// What the searcher asks for after an event.
#[derive(Debug, Default, PartialEq)]
pub(crate) struct Ops {
    /// Create a trial in each of these brackets (then call [`Asha::created`]).
    pub(crate) create: Vec<usize>,
    /// Train these trials to these lengths.
    pub(crate) train: Vec<(i32, i64)>,
    /// These trials are done.
    pub(crate) close: Vec<i32>,
}

/// The metric a trial that ended without reporting is ranked with.
const EXITED: f64 = f64::MAX;

impl Asha {
    /// The searcher `config` (the experiment's `searcher` section) asks for; an error names the
    /// field to fix.
    pub(crate) fn new(config: &Value) -> Result<Self, String> {
        let field = |name: &str| config.get(name).filter(|v| !v.is_null());
        let length = match field("max_length") {
            Some(Value::Number(n)) => n.as_i64(),
            Some(v) => ["batches", "records", "epochs"]
                .iter()
                .find_map(|k| v.get(k).and_then(Value::as_i64)),
            None => None,
        }
        .filter(|l| *l >= 1)
        .ok_or("searcher.max_length: adaptive_asha needs a length of at least 1")?;
        let max_trials = field("max_trials")
            .and_then(Value::as_u64)
            .filter(|n| *n >= 1)
            .and_then(|n| usize::try_from(n).ok())
            .ok_or("searcher.max_trials: adaptive_asha needs max_trials (at least 1)")?;
        if field("stop_once").and_then(Value::as_bool) == Some(true) {
            return Err("searcher.stop_once: the devmaster runs adaptive_asha with \
                        stop_once: false (promotions), not the stopping variant"
                .to_owned());
        }
        let divisor = field("divisor").and_then(Value::as_f64).unwrap_or(4.0);
        if divisor <= 1.0 {
            return Err(format!("searcher.divisor: {divisor} must be above 1"));
        }
        let max_rungs = field("max_rungs").and_then(Value::as_u64).unwrap_or(5) as usize;
        let levels = |n: f64| (n.ln() / divisor.ln()) as usize + 1;
        let max_rungs = max_rungs
            .min(levels(length as f64))
            .min(levels(max_trials as f64))
            .max(1);
        let mut rungs_per_bracket: Vec<usize> = match field("bracket_rungs")
            .and_then(Value::as_array)
            .filter(|b| !b.is_empty())
        {
            Some(list) => list
                .iter()
                .map(|r| r.as_u64().filter(|r| *r >= 1).map(|r| r as usize))
                .collect::<Option<_>>()
                .ok_or("searcher.bracket_rungs: a list of rung counts (at least 1 each)")?,
            None => match field("mode").and_then(Value::as_str).unwrap_or("standard") {
                "conservative" => (1..=max_rungs).collect(),
                "standard" => ((max_rungs - 1) / 2 + 1..=max_rungs).collect(),
                "aggressive" => vec![max_rungs],
                other => {
                    return Err(format!(
                        "searcher.mode: {other:?} is not aggressive, standard or conservative"
                    ));
                }
            },
        };
        rungs_per_bracket.sort_unstable_by(|a, b| b.cmp(a));
        let trials = bracket_trials(max_trials, divisor, &rungs_per_bracket);
        let concurrency = field("max_concurrent_trials")
            .and_then(Value::as_u64)
            .unwrap_or(16) as usize;
        let concurrent = bracket_concurrency(concurrency, divisor, &trials);
        let brackets = rungs_per_bracket
            .iter()
            .zip(trials.iter().zip(&concurrent))
            .map(|(&num_rungs, (&max_trials, &concurrent))| {
                let initial = if concurrent > 0 {
                    concurrent.min(max_trials)
                } else {
                    (divisor.powi(num_rungs as i32 - 1) as usize).clamp(1, max_trials)
                };
                Bracket {
                    max_trials,
                    initial,
                    divisor,
                    rungs: (0..num_rungs)
                        .map(|k| Rung {
                            length: ((length as f64 / divisor.powi((num_rungs - k - 1) as i32))
                                as i64)
                                .max(1),
                            metrics: Vec::new(),
                            outstanding: 0,
                        })
                        .collect(),
                    trial_rungs: BTreeMap::new(),
                    closed: BTreeSet::new(),
                    exited: BTreeSet::new(),
                }
            })
            .collect();
        Ok(Self {
            brackets,
            smaller_is_better: config
                .get("smaller_is_better")
                .and_then(Value::as_bool)
                .unwrap_or(true),
        })
    }

    /// How many trials the search runs in all.
    pub(crate) fn max_trials(&self) -> usize {
        self.brackets.iter().map(|b| b.max_trials).sum()
    }

    /// The trials to create when the search starts: a bracket per entry.
    pub(crate) fn initial(&self) -> Vec<usize> {
        self.brackets
            .iter()
            .enumerate()
            .flat_map(|(i, b)| std::iter::repeat_n(i, b.initial))
            .collect()
    }

    /// Whether the search has created any trial yet.
    pub(crate) fn started(&self) -> bool {
        self.brackets.iter().any(|b| !b.trial_rungs.is_empty())
    }

    /// `trial` was created in `bracket`; returns the length it first trains to.
    pub(crate) fn created(&mut self, bracket: usize, trial: i32) -> i64 {
        let b = &mut self.brackets[bracket];
        b.trial_rungs.insert(trial, 0);
        b.rungs[0].outstanding += 1;
        b.rungs[0].length
    }

    /// `trial` completed its operation with `metric`.
    pub(crate) fn validated(&mut self, trial: i32, metric: f64) -> Ops {
        let metric = if self.smaller_is_better {
            metric
        } else {
            -metric
        };
        self.report(trial, metric)
    }

    /// `trial` ended without completing its operation (it errored): it ranks last.
    pub(crate) fn exited(&mut self, trial: i32) -> Ops {
        if let Some(b) = self.bracket_of(trial) {
            let b = &mut self.brackets[b];
            b.exited.insert(trial);
            b.closed.insert(trial);
        }
        self.report(trial, EXITED)
    }

    fn bracket_of(&self, trial: i32) -> Option<usize> {
        self.brackets
            .iter()
            .position(|b| b.trial_rungs.contains_key(&trial))
    }

    fn report(&mut self, trial: i32, metric: f64) -> Ops {
        let mut ops = Ops::default();
        if let Some(b) = self.bracket_of(trial) {
            self.brackets[b].promote(b, trial, metric, &mut ops);
        }
        ops
    }
}

impl Bracket {
    /// `asha.go`'s `promoteAsync`.
    fn promote(&mut self, index: usize, trial: i32, metric: f64, ops: &mut Ops) {
        let k = self.trial_rungs[&trial];
        self.rungs[k].outstanding = self.rungs[k].outstanding.saturating_sub(1);
        let mut trains = false;
        if k + 1 == self.rungs.len() {
            self.rungs[k].metrics.push(Ranked {
                trial,
                metric,
                promoted: false,
            });
            if !self.exited.contains(&trial) {
                ops.close.push(trial);
                self.closed.insert(trial);
            }
        } else {
            for promoted in self.rungs[k].promotions(trial, metric, self.divisor) {
                self.trial_rungs.insert(promoted, k + 1);
                self.rungs[k + 1].outstanding += 1;
                if self.exited.contains(&promoted) {
                    self.promote(index, promoted, EXITED, ops);
                    return;
                }
                ops.train.push((promoted, self.rungs[k + 1].length));
                trains = true;
            }
        }
        if !trains && self.trial_rungs.len() + count(&ops.create, index) < self.max_trials {
            ops.create.push(index);
        }
        if self.rungs[0].metrics.len() == self.max_trials {
            self.close_out(ops);
        }
    }

    /// `asha.go`'s `closeOutRungs`: once the first rung is full, trials that were not promoted
    /// from rungs with nothing left training are closed.
    fn close_out(&mut self, ops: &mut Ops) {
        for rung in &self.rungs {
            if rung.outstanding > 0 {
                break;
            }
            for r in rung.metrics.iter().filter(|r| !r.promoted) {
                if !self.closed.contains(&r.trial) && !self.exited.contains(&r.trial) {
                    ops.close.push(r.trial);
                    self.closed.insert(r.trial);
                }
            }
        }
    }
}

fn count(list: &[usize], x: usize) -> usize {
    list.iter().filter(|&&y| y == x).count()
}

impl Rung {
    /// `asha.go`'s `promotionsAsync`: ranks the report and returns who moves up now.
    fn promotions(&mut self, trial: i32, metric: f64, divisor: f64) -> Vec<i32> {
        let old = (self.metrics.len() as f64 / divisor) as usize;
        let now = ((self.metrics.len() + 1) as f64 / divisor) as usize;
        let at = self.metrics.partition_point(|r| r.metric <= metric);
        let promote_now = at < now;
        self.metrics.insert(
            at,
            Ranked {
                trial,
                metric,
                promoted: promote_now,
            },
        );
        if promote_now {
            vec![trial]
        } else if now != old && !self.metrics[old].promoted {
            self.metrics[old].promoted = true;
            vec![self.metrics[old].trial]
        } else {
            Vec::new()
        }
    }
}

/// `adaptive_asha.go`'s `getBracketMaxTrials`.
fn bracket_trials(max_trials: usize, divisor: f64, rungs: &[usize]) -> Vec<usize> {
    let weights: Vec<f64> = rungs
        .iter()
        .map(|&r| divisor.powi(r as i32 - 1) / r as f64)
        .collect();
    let total: f64 = weights.iter().sum();
    let mut trials: Vec<usize> = weights
        .iter()
        .map(|w| ((w / total * max_trials as f64) as usize).max(1))
        .collect();
    let allocated: usize = trials.iter().sum();
    trials[0] += max_trials.saturating_sub(allocated);
    trials
}

/// `adaptive_asha.go`'s `getBracketMaxConcurrentTrials`.
fn bracket_concurrency(max_concurrent: usize, divisor: f64, trials: &[usize]) -> Vec<usize> {
    let n = trials.len();
    let (each, remainder) = if max_concurrent == 0 {
        (trials[n - 1].max(divisor as usize), 0)
    } else {
        let c = max_concurrent.max(n);
        (c / n, c % n)
    };
    (0..n).map(|i| each + usize::from(i < remainder)).collect()
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    #[test]
    fn brackets_are_sized_as_determined_sizes_them() {
        // Determined's tutorial 3: max_length 100, max_trials 10, the defaults otherwise.
        let asha = Asha::new(&json!({"name": "adaptive_asha", "metric": "x",
            "max_length": 100, "max_trials": 10}))
        .expect("valid");
        let shape: Vec<(usize, usize, Vec<i64>)> = asha
            .brackets
            .iter()
            .map(|b| {
                (
                    b.max_trials,
                    b.initial,
                    b.rungs.iter().map(|r| r.length).collect(),
                )
            })
            .collect();
        assert_eq!(shape, [(7, 7, vec![25, 100]), (3, 3, vec![100])]);
        assert_eq!(asha.max_trials(), 10);
        // Weights 4^2/3 and 4^1/2 share 100 trials; the rounding remainder goes to the first.
        assert_eq!(bracket_trials(100, 4.0, &[3, 2]), [73, 27]);
        assert_eq!(bracket_concurrency(0, 4.0, &[5, 2]), [4, 4]);
        assert_eq!(bracket_concurrency(5, 4.0, &[5, 2]), [3, 2]);
    }

    #[test]
    fn the_best_quarter_is_promoted_and_the_rest_closed_once_the_first_rung_is_full() {
        for (smaller_is_better, best) in [(true, 2), (false, 4)] {
            let mut asha = Asha::new(&json!({"max_length": 16, "max_trials": 4, "divisor": 4,
                "mode": "aggressive", "max_concurrent_trials": 4,
                "smaller_is_better": smaller_is_better}))
            .expect("valid");
            assert_eq!(asha.brackets.len(), 1);
            assert_eq!(asha.initial(), [0, 0, 0, 0]);
            for t in 1..=4 {
                assert_eq!(asha.created(0, t), 4);
            }
            // Three reports: none is in the top quarter of fewer than four.
            for (t, m) in [(1, 3.0), (2, 1.0), (3, 2.0)] {
                assert_eq!(asha.validated(t, m), Ops::default(), "trial {t}");
            }
            // The fourth fills the rung: the best moves up, the others are closed.
            let ops = asha.validated(4, 5.0);
            assert_eq!(
                ops.train,
                [(best, 16)],
                "smaller is better: {smaller_is_better}"
            );
            let mut closed = ops.close.clone();
            closed.sort_unstable();
            let others: Vec<i32> = (1..=4).filter(|t| *t != best).collect();
            assert_eq!(closed, others);
            assert!(ops.create.is_empty(), "{ops:?}");
            // The best reaches the top rung and closes.
            assert_eq!(asha.validated(best, 0.5).close, [best]);
        }
    }

    #[test]
    fn a_report_that_promotes_none_creates_a_trial_until_max_trials() {
        let mut asha = Asha::new(&json!({"max_length": 16, "max_trials": 5, "divisor": 4,
            "mode": "aggressive", "max_concurrent_trials": 1}))
        .expect("valid");
        assert_eq!(asha.initial(), [0]);
        for (t, m) in [(1, 1.0), (2, 2.0), (3, 3.0)] {
            assert_eq!(asha.created(0, t), 4);
            assert_eq!(asha.validated(t, m).create, [0], "trial {t}");
        }
        asha.created(0, 4);
        // The fourth report is the best of four: it moves up and no trial is created.
        let ops = asha.validated(4, 0.5);
        assert_eq!((ops.train, ops.create), (vec![(4, 16)], vec![]));
        // At the top it closes, and the search creates its last trial.
        let ops = asha.validated(4, 0.25);
        assert_eq!((ops.close, ops.create), (vec![4], vec![0]));
        asha.created(0, 5);
        // That one errors: ranked last, the first rung is full, the waiting trials close.
        let ops = asha.exited(5);
        assert!(ops.create.is_empty() && ops.train.is_empty(), "{ops:?}");
        assert_eq!(ops.close, [1, 2, 3]);
    }

    #[test]
    fn what_it_cannot_run_is_refused_naming_the_field() {
        for (config, field) in [
            (json!({"max_trials": 4}), "searcher.max_length"),
            (json!({"max_length": 10}), "searcher.max_trials"),
            (
                json!({"max_length": 10, "max_trials": 4, "stop_once": true}),
                "searcher.stop_once",
            ),
            (
                json!({"max_length": 10, "max_trials": 4, "mode": "wild"}),
                "searcher.mode",
            ),
        ] {
            let err = Asha::new(&config).expect_err("refused");
            assert!(err.contains(field), "{err}");
        }
    }
}
