//! The searchers the devmaster runs: `single` (one trial), `random` (`max_trials` trials, each
//! with values drawn from its own seed) and `grid` (a trial per point of the grid), with at most
//! `max_concurrent_trials` trials running at once (Determined's default 16; 0 means no limit),
//! every trial training for `max_length`; and `adaptive_asha` ([`crate::asha`]), whose trials
//! train rung by rung, wait while not promoted, and are closed by the searcher. Other searchers
//! are refused at create, naming `searcher.name`. An experiment ends when its last trial has:
//! COMPLETED, ERROR when every trial errored, CANCELED when it was being killed or cancelled.

use serde_json::Value;

use hr_det::wire::State;

use crate::{
    asha::{Asha, Ops},
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
    /// `adaptive_asha`: its searcher creates and closes the trials.
    asha: bool,
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
                    asha: false,
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
                    asha: false,
                })
            }
            "grid" => {
                let points = hparams::grid(spec)?;
                Ok(Self {
                    trials: points.len(),
                    grid: Some(points),
                    concurrency,
                    asha: false,
                })
            }
            "adaptive_asha" => {
                hparams::sample(spec, 0)?;
                let asha = Asha::new(config.get("searcher").unwrap_or(&Value::Null))?;
                Ok(Self {
                    grid: None,
                    trials: asha.max_trials(),
                    concurrency,
                    asha: true,
                })
            }
            other => Err(format!(
                "searcher.name: the devmaster runs the single, random, grid and adaptive_asha \
                 searchers, not `{other}`; use one of those or a Determined cluster"
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

/// Creates trial number `index` of experiment `exp` with `search`'s values for it; returns its id.
fn create(state: &mut MasterState, exp: &ExperimentRec, search: &Search, index: usize) -> i32 {
    let spec = exp
        .config
        .get("hyperparameters")
        .cloned()
        .unwrap_or(Value::Null);
    let (seed, hparams) = search.trial(&spec, experiment_seed(&exp.config), index);
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
            op_length: None,
            op_done: false,
            progress: 0.0,
            allocated: false,
            process: None,
        },
    );
    id
}

/// Creates the trials of active experiment `exp` that are due: while fewer than the search's
/// trials exist and fewer than its concurrency have not ended (`adaptive_asha`: its initial
/// trials, once). Returns their ids.
pub(crate) fn create_due(state: &mut MasterState, exp: &ExperimentRec) -> Vec<i32> {
    let Ok(search) = Search::of(&exp.config) else {
        return Vec::new();
    };
    if search.asha {
        let mut asha = match exp.asha.clone() {
            Some(asha) if asha.started() => return Vec::new(),
            Some(asha) => asha,
            None => match Asha::new(&exp.config["searcher"]) {
                Ok(asha) => asha,
                Err(_) => return Vec::new(),
            },
        };
        let ops = Ops {
            create: asha.initial(),
            ..Ops::default()
        };
        return apply(state, exp.id, &search, &mut asha, ops);
    }
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
        created.push(create(state, exp, &search, existing));
    }
}

/// Carries out what `adaptive_asha` asked for (its state then kept with the experiment): trials
/// to train further get their operation (and, when waiting, an allocation), closed ones that are
/// not running complete, new ones are created. Returns the trials to allocate.
fn apply(state: &mut MasterState, id: i32, search: &Search, asha: &mut Asha, ops: Ops) -> Vec<i32> {
    let Some(exp) = state.experiments.get(&id).cloned() else {
        return Vec::new();
    };
    let active = exp.state == State::Active;
    let mut allocate = Vec::new();
    for (trial, length) in ops.train {
        if let Some(t) = state.trials.get_mut(&trial) {
            t.op_length = Some(length);
            t.op_done = false;
            if active && t.state == State::Active && !t.allocated {
                allocate.push(trial);
            }
        }
    }
    for trial in ops.close {
        if let Some(t) = state.trials.get_mut(&trial) {
            t.searcher_completed = true;
            // A running trial completes when it exits; a waiting one now.
            if !t.allocated && !t.state.is_terminal() {
                t.state = State::Completed;
                t.end_time = Some(now_rfc3339());
            }
        }
    }
    // A stopping or ended experiment creates no more trials.
    let creates = if matches!(exp.state, State::Active | State::Paused) {
        ops.create
    } else {
        Vec::new()
    };
    for bracket in creates {
        let index = state.trials_of(id).count();
        let trial = create(state, &exp, search, index);
        let length = asha.created(bracket, trial);
        if let Some(t) = state.trials.get_mut(&trial) {
            t.op_length = Some(length);
            // Created while the experiment is paused: it starts with the others on activate.
            if !active {
                t.state = State::Paused;
            }
        }
        if active {
            allocate.push(trial);
        }
    }
    if let Some(e) = state.experiments.get_mut(&id) {
        e.asha = Some(asha.clone());
    }
    allocate
}

/// A trial completed its operation at `length` with `metric`: under `adaptive_asha` it is ranked
/// and waits for the searcher's decision (the trials it now asks to run are returned); otherwise
/// it is closed once `length` reaches `max_length`. A non-numeric metric for `adaptive_asha` is
/// an error naming `searcherMetric`.
pub(crate) fn op_completed(
    state: &mut MasterState,
    trial: i32,
    length: i64,
    metric: &Value,
) -> Result<Vec<i32>, String> {
    let Some(t) = state.trials.get(&trial).cloned() else {
        return Ok(Vec::new());
    };
    let Some(exp) = state.experiments.get(&t.experiment_id).cloned() else {
        return Ok(Vec::new());
    };
    let (Ok(search), Some(mut asha)) = (Search::of(&exp.config), exp.asha.clone()) else {
        if let Some(t) = state.trials.get_mut(&trial) {
            t.searcher_completed = length >= exp.max_length;
        }
        return Ok(Vec::new());
    };
    let value = metric.as_f64().ok_or_else(|| {
        format!("searcherMetric: adaptive_asha ranks trials by a number, not {metric}")
    })?;
    if let Some(t) = state.trials.get_mut(&trial) {
        t.op_done = true;
    }
    let ops = asha.validated(trial, value);
    let mut allocate = apply(state, exp.id, &search, &mut asha, ops);
    allocate.extend(settle(state, exp.id));
    Ok(allocate)
}

/// A trial ended (`errored`: with an error) or failed to start: `adaptive_asha` ranks an errored
/// trial last, and the experiment is settled. Returns the trials to allocate.
pub(crate) fn trial_ended(state: &mut MasterState, trial: i32, errored: bool) -> Vec<i32> {
    let Some(exp_id) = state.trials.get(&trial).map(|t| t.experiment_id) else {
        return Vec::new();
    };
    let mut allocate = Vec::new();
    if errored
        && let Some(exp) = state.experiments.get(&exp_id).cloned()
        && let (Ok(search), Some(mut asha)) = (Search::of(&exp.config), exp.asha.clone())
    {
        let ops = asha.exited(trial);
        allocate = apply(state, exp_id, &search, &mut asha, ops);
    }
    allocate.extend(settle(state, exp_id));
    allocate
}

/// After a trial of experiment `id` ended or failed to start: creates the trials now due (while
/// the experiment is active), and ends the experiment once no trial is left to run. Returns the
/// trials created, for the caller to allocate.
fn settle(state: &mut MasterState, id: i32) -> Vec<i32> {
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
            (json!({"searcher": {"name": "pbt"}}), "searcher.name"),
            (
                json!({"searcher": {"name": "adaptive_asha", "max_length": 8, "max_trials": 4,
                    "stop_once": true}}),
                "searcher.stop_once",
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
