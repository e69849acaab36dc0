//! Determined 0.35's checkpoint garbage collection when an experiment ends: per trial the
//! `save_trial_latest` latest checkpoints (by `steps_completed`) and the `save_trial_best` best
//! by the searcher metric (validation metrics reported at the checkpoint's step) are kept, and
//! the `save_experiment_best` best across the experiment; every other checkpoint's files are
//! deleted and its state becomes DELETED. Defaults as upstream: 0 experiment best, 1 trial best,
//! 1 trial latest.

use std::collections::BTreeSet;
use std::path::{Path, PathBuf};

use hr_det::wire::CheckpointState;
use serde::Deserialize;
use serde_json::Value;

use crate::state::{CheckpointRec, MasterState};

/// What an experiment config says about retention: the fields GC reads (absent or null ones
/// take upstream's defaults: metric `loss`, smaller is better, 0 experiment best, 1 trial best,
/// 1 trial latest).
#[derive(Debug, Default, Deserialize)]
#[serde(default)]
struct RetentionConfig {
    searcher: SearcherMetric,
    checkpoint_storage: Retention,
}

#[derive(Debug, Default, Deserialize)]
#[serde(default)]
struct SearcherMetric {
    metric: Option<String>,
    smaller_is_better: Option<bool>,
}

#[derive(Debug, Default, Deserialize)]
#[serde(default)]
struct Retention {
    save_experiment_best: Option<usize>,
    save_trial_best: Option<usize>,
    save_trial_latest: Option<usize>,
}

/// The experiment's searcher metric and whether smaller is better (upstream's defaults: `loss`,
/// true, for a config without them).
pub(crate) fn searcher_metric(config: &Value) -> (String, bool) {
    // A config the master accepted has these types; one that does not keeps the defaults.
    let searcher = RetentionConfig::deserialize(config)
        .unwrap_or_default()
        .searcher;
    (
        searcher.metric.unwrap_or_else(|| "loss".to_owned()),
        searcher.smaller_is_better.unwrap_or(true),
    )
}

/// The searcher metric of validation metrics reported for `c`'s trial at its step.
pub(crate) fn searcher_value(state: &MasterState, c: &CheckpointRec, metric: &str) -> Option<f64> {
    let step = i32::try_from(c.checkpoint.steps_completed()?).ok()?;
    state
        .metrics
        .iter()
        .filter(|m| {
            m.trial_id == c.trial_id
                && m.group == "validation"
                && !m.archived
                && m.steps_completed == step
        })
        .find_map(|m| m.metrics.get("avg_metrics")?.get(metric)?.as_f64())
}

/// The UUIDs of experiment `id`'s completed checkpoints that its retention does not keep.
pub(crate) fn unretained(state: &MasterState, id: i32, config: &Value) -> Vec<String> {
    let completed: Vec<&CheckpointRec> = state
        .checkpoints
        .iter()
        .filter(|c| c.experiment_id == id && c.checkpoint.state == CheckpointState::Completed)
        .collect();
    let retention = RetentionConfig::deserialize(config)
        .unwrap_or_default()
        .checkpoint_storage;
    let (metric, smaller_is_better) = searcher_metric(config);
    let metric = metric.as_str();
    let best = |list: &[&CheckpointRec], n: usize| -> Vec<String> {
        let mut scored: Vec<(f64, &str)> = list
            .iter()
            .filter_map(|c| {
                Some((
                    searcher_value(state, c, metric)?,
                    c.checkpoint.uuid.as_str(),
                ))
            })
            .collect();
        scored.sort_by(|a, b| {
            let order = a.0.total_cmp(&b.0);
            if smaller_is_better {
                order
            } else {
                order.reverse()
            }
        });
        scored
            .into_iter()
            .take(n)
            .map(|(_, u)| u.to_owned())
            .collect()
    };
    let mut keep: BTreeSet<String> = best(&completed, retention.save_experiment_best.unwrap_or(0))
        .into_iter()
        .collect();
    let trials: BTreeSet<i32> = completed.iter().map(|c| c.trial_id).collect();
    for trial in trials {
        let mut of_trial: Vec<&CheckpointRec> = completed
            .iter()
            .copied()
            .filter(|c| c.trial_id == trial)
            .collect();
        keep.extend(best(&of_trial, retention.save_trial_best.unwrap_or(1)));
        of_trial.sort_by_key(|c| {
            (
                std::cmp::Reverse(c.checkpoint.steps_completed()),
                std::cmp::Reverse(c.checkpoint.report_time.clone()),
            )
        });
        keep.extend(
            of_trial
                .iter()
                .take(retention.save_trial_latest.unwrap_or(1))
                .map(|c| c.checkpoint.uuid.clone()),
        );
    }
    completed
        .iter()
        .map(|c| c.checkpoint.uuid.clone())
        .filter(|u| !keep.contains(u))
        .collect()
}

/// Runs the collection for experiment `id` whose trials see checkpoints under `storage`: the
/// state is updated (the caller persists it) and the folders to delete are returned, each one
/// child of `storage` named by a parsed UUID ([`CheckpointRec::folder_in`]).
pub(crate) fn collect(
    state: &mut MasterState,
    id: i32,
    config: &Value,
    storage: Option<&Path>,
) -> Vec<PathBuf> {
    let doomed = unretained(state, id, config);
    let mut folders = Vec::new();
    for c in state
        .checkpoints
        .iter_mut()
        .filter(|c| doomed.contains(&c.checkpoint.uuid))
    {
        c.checkpoint.state = CheckpointState::Deleted;
        folders.extend(storage.and_then(|base| c.folder_in(base)));
    }
    folders
}
