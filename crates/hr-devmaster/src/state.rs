//! The durable state: experiments, trials, checkpoints, metrics, commands and sessions. Metrics
//! live in the `metrics.jsonl` journal, each experiment's config (immutable, and possibly large)
//! in its own `experiments/<id>.json`, everything else in the `state.json` snapshot (see
//! `persist.rs`).

use std::{collections::BTreeMap, path::PathBuf};

use hr_det::wire::{Checkpoint, State, TaskState};
use serde::{Deserialize, Serialize};
use serde_json::Value;

/// One experiment.
#[derive(Debug, Clone, Serialize, Deserialize)]
pub(crate) struct ExperimentRec {
    pub(crate) id: i32,
    pub(crate) name: String,
    /// The config as submitted; kept in `experiments/<id>.json`, never in the snapshot (read from
    /// an older snapshot only to move it there).
    #[serde(default, skip_serializing)]
    pub(crate) original_config: String,
    /// The config as expanded; kept beside `original_config`.
    #[serde(default, skip_serializing)]
    pub(crate) config: Value,
    pub(crate) state: State,
    pub(crate) project_id: i32,
    pub(crate) start_time: String,
    pub(crate) end_time: Option<String>,
    pub(crate) max_length: i64,
    pub(crate) max_restarts: i32,
    /// The `adaptive_asha` searcher's state, once it has started.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub(crate) asha: Option<crate::asha::Asha>,
}

/// One trial of an experiment (its searcher decides how many).
#[derive(Debug, Clone, Serialize, Deserialize)]
pub(crate) struct TrialRec {
    pub(crate) id: i32,
    pub(crate) experiment_id: i32,
    pub(crate) task_id: String,
    pub(crate) state: State,
    pub(crate) restarts: i32,
    /// Allocations so far; the current allocation's `DET_TRIAL_RUN_ID`.
    pub(crate) run_id: i32,
    pub(crate) seed: u32,
    /// The hyperparameter values drawn for it (null in states saved before they were kept).
    #[serde(default)]
    pub(crate) hparams: Value,
    pub(crate) start_time: String,
    pub(crate) end_time: Option<String>,
    pub(crate) total_batches: i32,
    /// The searcher has closed it: no more operations.
    pub(crate) searcher_completed: bool,
    /// The length its current operation trains to, when the searcher sets one per trial
    /// (`adaptive_asha`'s rungs); otherwise the experiment's `max_length`.
    #[serde(default)]
    pub(crate) op_length: Option<i64>,
    /// It completed its current operation and waits for the searcher (promotion or close).
    #[serde(default)]
    pub(crate) op_done: bool,
    pub(crate) progress: f64,
    /// Whether an allocation was running when the state was last saved.
    pub(crate) allocated: bool,
    /// The running allocation's process group, so that a restarted devmaster can stop it.
    #[serde(default)]
    pub(crate) process: Option<ProcessRef>,
}

/// A process group leader, identified with its start time so that a reused pid is never
/// mistaken for it.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
pub(crate) struct ProcessRef {
    /// The pid (= process group id).
    pub(crate) pid: u32,
    /// Its start time in clock ticks since boot (`/proc/<pid>/stat`, field 22).
    pub(crate) start_ticks: u64,
}

impl ProcessRef {
    /// The live process `pid`, if it exists.
    pub(crate) fn of(pid: u32) -> Option<Self> {
        Some(Self {
            pid,
            start_ticks: start_ticks(pid)?,
        })
    }

    /// Whether this very process (not a later one with the same pid) still runs.
    pub(crate) fn alive(&self) -> bool {
        start_ticks(self.pid) == Some(self.start_ticks)
    }
}

fn start_ticks(pid: u32) -> Option<u64> {
    let stat = std::fs::read_to_string(format!("/proc/{pid}/stat")).ok()?;
    // After the parenthesised command name: state is field 3, start time field 22.
    let rest = &stat[stat.rfind(')')? + 2..];
    let mut fields = rest.split_whitespace();
    if fields.next()? == "Z" {
        return None;
    }
    fields.nth(18)?.parse().ok()
}

/// One reported checkpoint.
#[derive(Debug, Clone, Serialize, Deserialize)]
pub(crate) struct CheckpointRec {
    pub(crate) trial_id: i32,
    pub(crate) experiment_id: i32,
    pub(crate) checkpoint: Checkpoint,
}

/// `text` as a checkpoint UUID in its canonical form (lowercase, hyphenated), as upstream's
/// Postgres `uuid` column stores it; `None` for anything else. A canonical UUID is one plain path
/// component, so a folder named by it lies inside the storage whatever a client sent.
pub(crate) fn canonical_uuid(text: &str) -> Option<String> {
    uuid::Uuid::try_parse(text)
        .ok()
        .map(|u| u.hyphenated().to_string())
}

impl CheckpointRec {
    /// Its folder under `storage`, built from the parsed UUID; `None` when its uuid is not one
    /// (a state written before uuids were checked), so nothing outside `storage` is ever named.
    pub(crate) fn folder_in(&self, storage: &std::path::Path) -> Option<PathBuf> {
        Some(storage.join(canonical_uuid(&self.checkpoint.uuid)?))
    }
}

/// One metrics report.
#[derive(Debug, Clone, Serialize, Deserialize)]
pub(crate) struct MetricRec {
    pub(crate) id: i64,
    pub(crate) trial_id: i32,
    pub(crate) trial_run_id: i32,
    pub(crate) group: String,
    pub(crate) steps_completed: i32,
    pub(crate) report_time: String,
    pub(crate) metrics: Value,
    pub(crate) archived: bool,
}

/// One command.
#[derive(Debug, Clone, Serialize, Deserialize)]
pub(crate) struct CommandRec {
    pub(crate) id: String,
    pub(crate) description: String,
    pub(crate) config: Value,
    pub(crate) state: TaskState,
    pub(crate) exit_status: Option<String>,
    pub(crate) start_time: String,
    pub(crate) workspace_id: i32,
    pub(crate) log_path: PathBuf,
}

/// Everything the master remembers.
#[derive(Debug, Default, Serialize, Deserialize)]
pub(crate) struct MasterState {
    pub(crate) cluster_id: String,
    pub(crate) next_experiment: i32,
    pub(crate) next_trial: i32,
    pub(crate) next_metric: i64,
    pub(crate) experiments: BTreeMap<i32, ExperimentRec>,
    pub(crate) trials: BTreeMap<i32, TrialRec>,
    pub(crate) checkpoints: Vec<CheckpointRec>,
    /// Kept in the metrics journal, never in the snapshot (read from an older snapshot only to
    /// move them into the journal).
    #[serde(default, skip_serializing)]
    pub(crate) metrics: Vec<MetricRec>,
    pub(crate) commands: BTreeMap<String, CommandRec>,
    /// Trials of deleted experiments: their metrics stay in the journal and are not read back.
    #[serde(default)]
    pub(crate) deleted_trials: std::collections::BTreeSet<i32>,
    /// sha256 of a session token -> user name (tokens themselves are never stored).
    pub(crate) sessions: BTreeMap<String, String>,
    /// sha256 of a login's token -> when it expires (unix seconds). Trial tokens have none.
    #[serde(default)]
    pub(crate) session_expiry: BTreeMap<String, u64>,
    /// sha256 of a trial's token -> the allocation it was issued to (it may act for no other).
    #[serde(default)]
    pub(crate) session_scope: BTreeMap<String, TrialScope>,
}

/// The allocation a trial's session token belongs to.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub(crate) struct TrialScope {
    pub(crate) trial_id: i32,
    pub(crate) allocation_id: String,
}

/// How long a login's token is valid.
pub(crate) const LOGIN_LIFETIME_SECS: u64 = 7 * 24 * 3600;

fn unix_now() -> u64 {
    std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .map_or(0, |d| d.as_secs())
}

fn token_key(token: &str) -> String {
    use sha2::{Digest, Sha256};
    hex::encode(Sha256::digest(token.as_bytes()))
}

impl TrialRec {
    /// Whether it completed its operation and waits for the searcher to promote or close it.
    pub(crate) fn waiting(&self) -> bool {
        self.op_done && !self.searcher_completed
    }
}

impl MasterState {
    /// Experiment `id`'s trials, in the order they were created.
    pub(crate) fn trials_of(&self, id: i32) -> impl Iterator<Item = &TrialRec> {
        self.trials.values().filter(move |t| t.experiment_id == id)
    }

    /// Records the session of a trial's allocation, acting as `user` for that allocation only
    /// (valid while the master keeps it).
    pub(crate) fn add_trial_session(&mut self, token: &str, user: &str, scope: TrialScope) {
        let key = token_key(token);
        self.sessions.insert(key.clone(), user.to_owned());
        self.session_scope.insert(key, scope);
    }

    /// Records a login's session for `user`, valid for `lifetime_secs` from now. Expired logins
    /// are dropped.
    pub(crate) fn add_login(&mut self, token: &str, user: &str, lifetime_secs: u64) {
        let now = unix_now();
        let expired: Vec<String> = self
            .session_expiry
            .iter()
            .filter(|(_, at)| **at <= now)
            .map(|(k, _)| k.clone())
            .collect();
        for key in expired {
            self.sessions.remove(&key);
            self.session_expiry.remove(&key);
        }
        let key = token_key(token);
        self.sessions.insert(key.clone(), user.to_owned());
        self.session_expiry
            .insert(key, now.saturating_add(lifetime_secs));
    }

    /// Ends the session of `token` (logout); whether there was one.
    pub(crate) fn remove_session(&mut self, token: &str) -> bool {
        let key = token_key(token);
        self.session_expiry.remove(&key);
        self.session_scope.remove(&key);
        self.sessions.remove(&key).is_some()
    }

    /// Drops the sessions of trial allocations that can no longer act: every one of a trial that
    /// ended (or is gone), and of a running trial all but its current allocation and the one
    /// before it (whose token is then told it is stale rather than unknown). So sessions stay
    /// bounded by the trials that run.
    pub(crate) fn prune_trial_sessions(&mut self) {
        let live = |scope: &TrialScope| {
            self.trials.get(&scope.trial_id).is_some_and(|t| {
                !t.state.is_terminal()
                    && [t.run_id, t.run_id - 1]
                        .iter()
                        .any(|run| scope.allocation_id == format!("{}.{run}", t.task_id))
            })
        };
        let ended: Vec<String> = self
            .session_scope
            .iter()
            .filter(|(_, scope)| !live(scope))
            .map(|(key, _)| key.clone())
            .collect();
        for key in ended {
            self.sessions.remove(&key);
            self.session_scope.remove(&key);
        }
    }

    /// The user of a session token that exists and has not expired and, for a trial's token,
    /// the allocation it belongs to.
    pub(crate) fn session(&self, token: &str) -> Option<(String, Option<TrialScope>)> {
        let key = token_key(token);
        match self.session_expiry.get(&key) {
            Some(at) if *at <= unix_now() => None,
            _ => Some((
                self.sessions.get(&key)?.clone(),
                self.session_scope.get(&key).cloned(),
            )),
        }
    }

    /// Adds a metrics report: a restarted run archives what older runs of the trial reported
    /// beyond its restart point (later steps, or this group at this step or later); the trial's
    /// `total_batches` and the next metric id follow. Replaying the journal through this
    /// rebuilds the same state.
    pub(crate) fn push_metric(&mut self, rec: MetricRec) {
        for old in self.metrics.iter_mut().filter(|r| {
            r.trial_id == rec.trial_id && r.trial_run_id < rec.trial_run_id && !r.archived
        }) {
            if old.steps_completed > rec.steps_completed
                || (old.group == rec.group && old.steps_completed >= rec.steps_completed)
            {
                old.archived = true;
            }
        }
        self.next_metric = self.next_metric.max(rec.id + 1);
        if let Some(t) = self.trials.get_mut(&rec.trial_id) {
            t.total_batches = t.total_batches.max(rec.steps_completed);
        }
        self.metrics.push(rec);
    }

    /// The checkpoint a new allocation of `trial` restores: COMPLETED, highest
    /// `metadata.steps_completed`; ties broken by the latest report time, then the greatest UUID
    /// (upstream's query has no tie-break, so this is stricter than Determined).
    pub(crate) fn latest_checkpoint(&self, trial: i32) -> Option<&CheckpointRec> {
        self.checkpoints
            .iter()
            .filter(|c| {
                c.trial_id == trial
                    && c.checkpoint.state == hr_det::wire::CheckpointState::Completed
                    // Never handed to an allocation as a path unless it is a UUID.
                    && canonical_uuid(&c.checkpoint.uuid).is_some()
            })
            .max_by(|a, b| {
                let key = |c: &CheckpointRec| {
                    (
                        c.checkpoint.steps_completed(),
                        c.checkpoint.report_time.clone(),
                        c.checkpoint.uuid.clone(),
                    )
                };
                key(a).cmp(&key(b))
            })
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn logins_expire_and_logout_revokes() {
        let mut state = MasterState::default();
        state.add_login("old", "determined", 0);
        assert_eq!(state.session("old"), None, "a login past its lifetime");
        state.add_login("new", "admin", LOGIN_LIFETIME_SECS);
        assert_eq!(state.session("new"), Some(("admin".to_owned(), None)));
        assert!(
            !state.sessions.contains_key(&token_key("old")),
            "expired logins are dropped"
        );
        let scope = TrialScope {
            trial_id: 1,
            allocation_id: "1.x.1".into(),
        };
        state.add_trial_session("trial", "determined", scope.clone());
        assert_eq!(
            state.session("trial"),
            Some(("determined".to_owned(), Some(scope)))
        );
        assert!(state.remove_session("new"));
        assert_eq!(state.session("new"), None);
        assert!(!state.remove_session("new"));
    }
}
