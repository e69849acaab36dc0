//! How a policy scored on a task set: episodes, mean reward, share solved and a few sample
//! completions (`evaluate`'s DEV selection and held-out assessment, and the DEV reward a run
//! logs while it trains); and which completions a report shows ([`best_and_worst`]).

use std::collections::BTreeMap;

use hr_grpo::Episode;
use hr_plan::Solved;
use serde::Serialize;

/// Completions a report shows of a set: its two best and its two worst by reward.
pub const SAMPLES: usize = 4;

/// The first characters of a completion a [`Sample`] keeps.
pub const SAMPLE_CHARS: usize = 2000;

/// One completion as a report shows it.
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct Sample {
    /// Its task.
    pub task_id: String,
    /// The prompt as the model read it, where known (empty otherwise).
    #[serde(skip_serializing_if = "String::is_empty")]
    pub prompt: String,
    /// What the policy wrote, its first [`SAMPLE_CHARS`] characters.
    pub completion: String,
    /// Whether the completion was cut to [`SAMPLE_CHARS`].
    #[serde(skip_serializing_if = "std::ops::Not::not")]
    pub cut: bool,
    /// Its reward.
    pub reward: f64,
    /// Each reward function's score, where the environment names them.
    pub rewards: BTreeMap<String, f64>,
    /// Its advantage, for a training step's completions.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub advantage: Option<f64>,
    /// Policy tokens.
    pub length: usize,
    /// Whether a token limit cut it.
    pub clipped: bool,
}

impl Sample {
    /// `completion` kept up to [`SAMPLE_CHARS`], the rest as given.
    #[allow(clippy::too_many_arguments)] // a record's fields, named at the two call sites
    pub fn new(
        task_id: &str,
        prompt: &str,
        completion: &str,
        reward: f64,
        rewards: &BTreeMap<String, f64>,
        advantage: Option<f64>,
        length: usize,
        clipped: bool,
    ) -> Self {
        let kept: String = completion.chars().take(SAMPLE_CHARS).collect();
        Self {
            task_id: task_id.to_owned(),
            prompt: prompt.to_owned(),
            cut: kept.len() < completion.len(),
            completion: kept,
            reward,
            rewards: rewards.clone(),
            advantage,
            length,
            clipped,
        }
    }
}

/// The indices of the [`SAMPLES`]` / 2` highest and the [`SAMPLES`]` / 2` lowest of
/// `rewards`, each once, highest first (ties: the earlier first).
pub fn best_and_worst(rewards: &[f64]) -> Vec<usize> {
    let mut order: Vec<usize> = (0..rewards.len()).collect();
    order.sort_by(|a, b| rewards[*b].total_cmp(&rewards[*a]));
    let mut chosen: Vec<usize> = order.iter().take(SAMPLES / 2).copied().collect();
    for i in order.iter().rev().take(SAMPLES / 2).rev() {
        if !chosen.contains(i) {
            chosen.push(*i);
        }
    }
    chosen
}

/// Episode results of one policy on one task set.
#[derive(Debug, Clone, Serialize)]
pub struct EpisodeScore {
    /// Episodes run.
    pub episodes: usize,
    /// Of them, those no reward function applied to (every one returned `None`): left out of
    /// the mean and the share solved, as TRL leaves them out of its logged reward.
    #[serde(skip_serializing_if = "is_zero")]
    pub unscorable: usize,
    /// Mean episode reward.
    pub mean_reward: f64,
    /// Share of episodes solved, as the plan's `evaluation.solved` says (by default reward
    /// ≥ 1).
    pub solved: f64,
    /// Each reward function's mean score over the episodes it scored, where the environment
    /// names them.
    #[serde(skip_serializing_if = "BTreeMap::is_empty")]
    pub parts: BTreeMap<String, f64>,
    /// The best and the worst completions ([`best_and_worst`]).
    pub samples: Vec<Sample>,
}

fn is_zero(n: &usize) -> bool {
    *n == 0
}

/// How `episodes` scored: the mean, the share `solved` says is solved and each reward
/// function's mean, over the scorable ones (an episode no reward function applied to counts
/// for none of them).
pub fn episode_score(episodes: &[Episode], solved: &Solved) -> EpisodeScore {
    let scored = || episodes.iter().filter(|e| e.scorable);
    let n = scored().count().max(1) as f64;
    let mut sums: BTreeMap<String, (f64, usize)> = BTreeMap::new();
    for (name, score) in scored().flat_map(|e| &e.reward_parts) {
        let sum = sums.entry(name.clone()).or_default();
        sum.0 += score;
        sum.1 += 1;
    }
    EpisodeScore {
        episodes: episodes.len(),
        unscorable: episodes.len() - scored().count(),
        mean_reward: scored().map(|e| e.reward).sum::<f64>() / n,
        solved: scored()
            .filter(|e| solved.holds(e.reward, &e.reward_parts))
            .count() as f64
            / n,
        parts: sums
            .into_iter()
            .map(|(name, (sum, count))| (name, sum / count as f64))
            .collect(),
        samples: best_and_worst(&episodes.iter().map(|e| e.reward).collect::<Vec<_>>())
            .into_iter()
            .map(|i| {
                let e = &episodes[i];
                let length = e.policy_mask.iter().filter(|m| **m).count();
                Sample::new(
                    &e.task_id,
                    "",
                    &e.text,
                    e.reward,
                    &e.reward_parts,
                    None,
                    length,
                    e.truncated,
                )
            })
            .collect(),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_best_two_and_the_worst_two_are_chosen_once_each() {
        assert_eq!(best_and_worst(&[0.5, 1.0, 0.0, 0.25, 0.75]), [1, 4, 3, 2]);
        assert_eq!(best_and_worst(&[1.0, 1.0, 1.0]), [0, 1, 2]);
        assert_eq!(best_and_worst(&[0.3]), [0]);
        assert!(best_and_worst(&[]).is_empty());
    }
}
