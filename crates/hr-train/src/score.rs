//! How a policy scored on a task set: episodes, mean reward, share solved (`evaluate`'s DEV
//! selection and held-out assessment, and the DEV reward a managed run reports).

use hr_grpo::Episode;
use serde::Serialize;

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
    /// Share of episodes with reward ≥ 1 (fully solved).
    pub solved: f64,
}

fn is_zero(n: &usize) -> bool {
    *n == 0
}

/// How `episodes` scored: the mean and the share solved over the scorable ones (an episode
/// no reward function applied to counts for neither).
pub fn episode_score(episodes: &[Episode]) -> EpisodeScore {
    let scored = || episodes.iter().filter(|e| e.scorable);
    let n = scored().count().max(1) as f64;
    EpisodeScore {
        episodes: episodes.len(),
        unscorable: episodes.len() - scored().count(),
        mean_reward: scored().map(|e| e.reward).sum::<f64>() / n,
        solved: scored().filter(|e| e.reward >= 1.0).count() as f64 / n,
    }
}
