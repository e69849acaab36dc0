//! The searchers the devmaster runs: `single` (one trial), `random` (`max_trials` trials, each
//! with values drawn from its own seed) and `grid` (a trial per point of the grid), with at most
//! `max_concurrent_trials` trials running at once (Determined's default 16; 0 means no limit).
//! Every trial trains for `max_length`; there is no early stopping, so the adaptive searchers are
//! refused at create, naming `searcher.name`. An experiment ends when its last trial has:
//! COMPLETED, ERROR when every trial errored, CANCELED when it was being killed or cancelled.

use serde_json::Value;

use hr_det::wire::State;

use crate::{
    hparams,
    info::{now_rfc3339, uuid4},
    state::{ExperimentRec, MasterState, TrialRec},
};

/// What an experiment's searcher runs.
pub(crate) struct Search {
    /// The grid's points (`grid`), or `None` for drawn values.
    grid: Option<Vec<Value>>,
    trials: usize,
    concurrency: usize,
}

impl Search {
    /// The search `config` asks for; an error names the field to fix.
    pub(crate) fn of(config: &Value) -> Result<Self, String> {
        let spec = config.get("hyperparameters").unwrap_or(&Value::Null);
        let field = |name: &str| config.get("searcher").and_then(|s| s.get(name));
        let concurrency = match field("max_concurrent_trials").and_then(Value::as_u64) {
            None => 16,
            Some(0) => usize::MAX,
            Some(n) => usize::try_from(n).unwrap_or(usize::MAX),
        };
        match field("name").and_then(Value::as_str).unwrap_or("single") {
            "single" => {
                hparams::sample(spec, 0)?;
                Ok(Self {
                    grid: None,
                    trials: 1,
                    concurrency: 1,
                })
            }
            "random" => {
                hparams::sample(spec, 0)?;
                let trials = field("max_trials")
                    .and_then(Value::as_u64)
                    .filter(|n| *n >= 1)
                    .and_then(|n| usize::try_from(n).ok())
                    .ok_or(
                        "searcher.max_trials: the random searcher needs max_trials (at least 1)",
                    )?;
                Ok(Self {
                    grid: None,
                    trials,
                    concurrency,
                })
            }
            "grid" => {
                let points = hparams::grid(spec)?;
                Ok(Self {
                    trials: points.len(),
                    grid: Some(points),
                    concurrency,
                })
            }
            other => Err(format!(
                "searcher.name: the devmaster runs the single, random and grid searchers (every \
                 trial for max_length, no early stopping), not `{other}`; use one of those or a \
                 Determined cluster"
            )),
        }
    }

    /// How many trials the search runs in all.
    pub(crate) fn trials(&self) -> usize {
        self.trials
    }

    /// The seed and hyperparameter values of trial number `index` (from 0) of an experiment
    /// seeded `experiment_seed`.
    fn trial(&self, spec: &Value, experiment_seed: u32, index: usize) -> (u32, Value) {
        let seed = hparams::trial_seed(experiment_seed, index);
        let values = match &self.grid {
            Some(points) => points.get(index).cloned().unwrap_or_default(),
            // Checked at create, so a draw cannot fail here.
            None => hparams::sample(spec, seed).unwrap_or_default(),
        };
        (seed, values)
    }
}

/// The experiment's seed (`reproducibility.experiment_seed`, 0 when unset).
fn experiment_seed(config: &Value) -> u32 {
    config
        .pointer("/reproducibility/experiment_seed")
        .and_then(Value::as_u64)
        .and_then(|s| u32::try_from(s).ok())
        .unwrap_or(0)
}

/// Creates the trials of active experiment `exp` that are due: while fewer than the search's
/// trials exist and fewer than its concurrency have not ended. Returns their ids.
pub(crate) fn create_due(state: &mut MasterState, exp: &ExperimentRec) -> Vec<i32> {
    let Ok(search) = Search::of(&exp.config) else {
        return Vec::new();
    };
    let spec = exp
        .config
        .get("hyperparameters")
        .cloned()
        .unwrap_or(Value::Null);
    let mut created = Vec::new();
    loop {
        let existing = state.trials_of(exp.id).count();
        let running = state
            .trials_of(exp.id)
            .filter(|t| !t.state.is_terminal())
            .count();
        if existing >= search.trials() || running >= search.concurrency {
            return created;
        }
        let (seed, hparams) = search.trial(&spec, experiment_seed(&exp.config), existing);
        let id = state.next_trial;
        state.next_trial += 1;
        state.trials.insert(
            id,
            TrialRec {
                id,
                experiment_id: exp.id,
                task_id: format!("{}.{}", exp.id, uuid4()),
                state: State::Active,
                restarts: 0,
                run_id: 0,
                seed,
                hparams,
                start_time: now_rfc3339(),
                end_time: None,
                total_batches: 0,
                searcher_completed: false,
                progress: 0.0,
                allocated: false,
                process: None,
            },
        );
        created.push(id);
    }
}

/// After a trial of experiment `id` ended or failed to start: creates the trials now due (while
/// the experiment is active), and ends the experiment once no trial is left to run. Returns the
/// trials created, for the caller to allocate.
pub(crate) fn settle(state: &mut MasterState, id: i32) -> Vec<i32> {
    let Some(exp) = state.experiments.get(&id).cloned() else {
        return Vec::new();
    };
    let created = if exp.state == State::Active {
        create_due(state, &exp)
    } else {
        Vec::new()
    };
    let stopping = matches!(exp.state, State::StoppingKilled | State::StoppingCanceled);
    // A stopping experiment creates no more trials: it ends with those it has.
    let planned = if stopping {
        0
    } else {
        Search::of(&exp.config).map_or(0, |s| s.trials())
    };
    let trials: Vec<State> = state.trials_of(id).map(|t| t.state).collect();
    let ended = trials.len() >= planned && trials.iter().all(|s| s.is_terminal());
    if ended && !exp.state.is_terminal() {
        let end = match exp.state {
            _ if stopping => State::Canceled,
            _ if trials.iter().all(|s| *s == State::Error) => State::Error,
            _ => State::Completed,
        };
        if let Some(e) = state.experiments.get_mut(&id) {
            e.state = end;
            e.end_time = Some(now_rfc3339());
        }
    }
    created
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    #[test]
    fn each_searcher_runs_its_trials_with_their_own_values() {
        let spec = json!({"n": {"type": "int", "minval": 1, "maxval": 1000}});
        let random = Search::of(&json!({"searcher": {"name": "random", "max_trials": 5,
            "max_concurrent_trials": 2}, "hyperparameters": spec}))
        .expect("random");
        assert_eq!((random.trials(), random.concurrency), (5, 2));
        let drawn: std::collections::BTreeSet<String> = (0..5)
            .map(|i| random.trial(&spec, 3, i).1["n"].to_string())
            .collect();
        assert!(drawn.len() > 1, "{drawn:?}");
        let grid = Search::of(
            &json!({"searcher": {"name": "grid", "max_concurrent_trials": 0},
            "hyperparameters": {"c": {"type": "categorical", "vals": [1, 2, 3]}}}),
        )
        .expect("grid");
        assert_eq!((grid.trials(), grid.concurrency), (3, usize::MAX));
        assert_eq!(grid.trial(&Value::Null, 0, 2).1, json!({"c": 3}));
        let single = Search::of(&json!({"searcher": {"name": "single"}})).expect("single");
        assert_eq!(
            (single.trials(), single.trial(&Value::Null, 9, 0).0),
            (1, 9)
        );
    }

    #[test]
    fn what_it_cannot_run_is_refused_naming_the_field() {
        for (config, field) in [
            (
                json!({"searcher": {"name": "adaptive_asha"}}),
                "searcher.name",
            ),
            (
                json!({"searcher": {"name": "random"}}),
                "searcher.max_trials",
            ),
            (
                json!({"searcher": {"name": "grid"}, "hyperparameters":
                    {"lr": {"type": "double", "minval": 0, "maxval": 1}}}),
                "hyperparameters.lr.count",
            ),
        ] {
            let err = Search::of(&config).err().expect("refused");
            assert!(err.contains(field), "{err}");
        }
    }
}
