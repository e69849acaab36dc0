//! The devmaster's durable writes, by group commit. A change is *staged* while the state lock
//! is held (which fixes its order) and *committed* after the lock is released: one committer at a
//! time writes everything staged so far, so concurrent requests share one fsync and no request
//! waits on the disk while holding the state. Metrics, the one record that grows with every
//! report, are appended to the `metrics.jsonl` journal; each experiment's config (immutable, and
//! as large as its author made it) is written once, to `experiments/<id>.json`; the rest of the
//! state (small: ids, states, checkpoints, sessions) is written as a `state.json` snapshot. Files
//! are written atomically (tmp, fsync, rename, folder fsync), a config before the snapshot that
//! lists its experiment. A request is answered only once its change is durable.

use std::{
    fs::{File, OpenOptions},
    io::Write,
    path::{Path, PathBuf},
    sync::{
        Mutex,
        atomic::{AtomicBool, AtomicU64, Ordering},
    },
};

use serde::{Deserialize, Serialize};

use crate::state::{ExperimentRec, MasterState, MetricRec};

/// The metrics journal: one [`MetricRec`] per line, in report order.
pub(crate) const METRICS_JOURNAL: &str = "metrics.jsonl";
/// The snapshot of everything else.
pub(crate) const STATE_FILE: &str = "state.json";
/// The folder of experiment configs, one `<id>.json` each.
pub(crate) const EXPERIMENTS_DIR: &str = "experiments";

/// An experiment's config file.
#[derive(Serialize, Deserialize)]
struct ConfigFile {
    original_config: String,
    config: serde_json::Value,
}

/// What a staged change waits for.
#[must_use = "a staged change is durable only once committed"]
pub(crate) struct Ticket(u64);

#[derive(Default)]
struct Pending {
    seq: u64,
    snapshot: Option<Vec<u8>>,
    journal: Vec<u8>,
    /// New experiments' config files: (file name, bytes).
    configs: Vec<(String, Vec<u8>)>,
}

/// Staged changes and the one writer.
pub(crate) struct Persister {
    dir: PathBuf,
    pending: Mutex<Pending>,
    /// The journal, opened for appending; held by the committer.
    writer: Mutex<Option<File>>,
    durable: AtomicU64,
    /// Set by a failed write: what was staged with it is lost, so nothing later is written
    /// either (the master fails closed).
    broken: AtomicBool,
}

fn lock<T>(m: &Mutex<T>) -> std::sync::MutexGuard<'_, T> {
    m.lock().unwrap_or_else(std::sync::PoisonError::into_inner)
}

impl Persister {
    /// Loads the state in `dir` (the snapshot, then the journal replayed onto it) and returns it
    /// with its persister. A torn last journal line (a crash mid-append: never acknowledged) is
    /// cut off; a corrupt line before it is an error. A `state.json` from before the journal
    /// (metrics inside it) is moved into a new journal, and one with configs inside it has them
    /// moved into `experiments/`.
    pub(crate) fn open(dir: &Path) -> std::io::Result<(MasterState, Self)> {
        let mut state = MasterState::load(dir)?;
        let configs = dir.join(EXPERIMENTS_DIR);
        std::fs::create_dir_all(&configs)?;
        let mut moved = false;
        for rec in state.experiments.values_mut() {
            let name = config_file_name(rec.id);
            if rec.config.is_null() {
                let path = configs.join(&name);
                let file: ConfigFile = std::fs::read(&path)
                    .and_then(|b| serde_json::from_slice(&b).map_err(std::io::Error::other))
                    .map_err(|e| {
                        std::io::Error::new(
                            e.kind(),
                            format!("experiment {}'s config {}: {e}", rec.id, path.display()),
                        )
                    })?;
                rec.original_config = file.original_config;
                rec.config = file.config;
            } else {
                write_atomically(&configs, &name, &config_bytes(rec)?)?;
                moved = true;
            }
        }
        let journal_path = dir.join(METRICS_JOURNAL);
        let embedded = std::mem::take(&mut state.metrics);
        let persister = Self {
            dir: dir.to_owned(),
            pending: Mutex::new(Pending::default()),
            writer: Mutex::new(None),
            durable: AtomicU64::new(0),
            broken: AtomicBool::new(false),
        };
        if journal_path.exists() {
            for rec in read_journal(&journal_path)? {
                // Metrics of deleted experiments' trials stay in the journal, unread (their ids
                // stay used).
                if state.deleted_trials.contains(&rec.trial_id) {
                    state.next_metric = state.next_metric.max(rec.id + 1);
                } else {
                    state.push_metric(rec);
                }
            }
        } else {
            let mut lines = Vec::new();
            for rec in embedded {
                lines.extend(journal_line(&rec)?);
                state.push_metric(rec);
            }
            let mut file = File::create(&journal_path)?;
            file.write_all(&lines)?;
            file.sync_all()?;
            File::open(dir)?.sync_all()?;
            moved = true;
        }
        if moved {
            // The snapshot without metrics (never counted twice) and without configs.
            state.save(dir)?;
        }
        Ok((state, persister))
    }

    /// Stages a snapshot of `state` (call with the state lock held).
    pub(crate) fn stage_state(&self, state: &MasterState) -> std::io::Result<Ticket> {
        let bytes = serde_json::to_vec(state).map_err(std::io::Error::other)?;
        let mut p = lock(&self.pending);
        p.seq += 1;
        p.snapshot = Some(bytes);
        Ok(Ticket(p.seq))
    }

    /// Stages the config file of a new experiment (call with the state lock held, before staging
    /// the state that lists it; that state's commit writes it, first).
    pub(crate) fn stage_experiment(&self, rec: &ExperimentRec) -> std::io::Result<()> {
        let bytes = config_bytes(rec)?;
        lock(&self.pending)
            .configs
            .push((config_file_name(rec.id), bytes));
        Ok(())
    }

    /// Stages one metrics record (call with the state lock held, in the order records were
    /// pushed).
    pub(crate) fn stage_metric(&self, rec: &MetricRec) -> std::io::Result<Ticket> {
        let line = journal_line(rec)?;
        let mut p = lock(&self.pending);
        p.seq += 1;
        p.journal.extend(line);
        Ok(Ticket(p.seq))
    }

    /// Returns once `ticket`'s change is durable, writing everything staged so far if no other
    /// committer already has.
    pub(crate) fn commit(&self, ticket: &Ticket) -> std::io::Result<()> {
        let mut writer = lock(&self.writer);
        if self.durable.load(Ordering::Acquire) >= ticket.0 {
            return Ok(());
        }
        if self.broken.load(Ordering::Acquire) {
            return Err(std::io::Error::other("an earlier write failed"));
        }
        let written = self.write_pending(&mut writer);
        if written.is_err() {
            self.broken.store(true, Ordering::Release);
        }
        written
    }

    fn write_pending(&self, writer: &mut Option<File>) -> std::io::Result<()> {
        let (seq, snapshot, journal, configs) = {
            let mut p = lock(&self.pending);
            (
                p.seq,
                p.snapshot.take(),
                std::mem::take(&mut p.journal),
                std::mem::take(&mut p.configs),
            )
        };
        for (name, bytes) in configs {
            write_atomically(&self.dir.join(EXPERIMENTS_DIR), &name, &bytes)?;
        }
        if !journal.is_empty() {
            let file = match writer {
                Some(f) => f,
                None => writer.insert(
                    OpenOptions::new()
                        .append(true)
                        .open(self.dir.join(METRICS_JOURNAL))?,
                ),
            };
            file.write_all(&journal)?;
            file.sync_data()?;
        }
        if let Some(bytes) = snapshot {
            write_atomically(&self.dir, STATE_FILE, &bytes)?;
        }
        self.durable.store(seq, Ordering::Release);
        Ok(())
    }
}

/// Removes a deleted experiment's config file (after the state without it is durable).
pub(crate) fn remove_experiment_config(dir: &Path, id: i32) {
    let _ = std::fs::remove_file(dir.join(EXPERIMENTS_DIR).join(config_file_name(id)));
}

fn config_file_name(id: i32) -> String {
    format!("{id}.json")
}

fn config_bytes(rec: &ExperimentRec) -> std::io::Result<Vec<u8>> {
    serde_json::to_vec(&ConfigFile {
        original_config: rec.original_config.clone(),
        config: rec.config.clone(),
    })
    .map_err(std::io::Error::other)
}

fn journal_line(rec: &MetricRec) -> std::io::Result<Vec<u8>> {
    let mut line = serde_json::to_vec(rec).map_err(std::io::Error::other)?;
    line.push(b'\n');
    Ok(line)
}

fn read_journal(path: &Path) -> std::io::Result<Vec<MetricRec>> {
    let text = std::fs::read_to_string(path)?;
    // Cut the torn tail so the next append starts on a line of its own.
    hr_files::cut_torn_tail(path).map_err(io_error)?;
    let mut recs = Vec::new();
    for (n, line) in hr_files::complete_lines(&text).enumerate() {
        let rec = serde_json::from_str(line).map_err(|e| {
            std::io::Error::new(
                std::io::ErrorKind::InvalidData,
                format!("{} line {}: {e}", path.display(), n + 1),
            )
        })?;
        recs.push(rec);
    }
    Ok(recs)
}

/// Writes `dir/name` atomically and durably: tmp, fsync, rename, folder fsync.
pub(crate) fn write_atomically(dir: &Path, name: &str, bytes: &[u8]) -> std::io::Result<()> {
    hr_files::write_atomic(&dir.join(name), bytes).map_err(io_error)
}

/// An [`hr_files::IoError`] as the `std::io::Error` the persister returns, keeping its message.
fn io_error(e: hr_files::IoError) -> std::io::Error {
    std::io::Error::new(e.source.kind(), e)
}

impl MasterState {
    /// Loads `state.json` from `dir`, or a fresh state.
    pub(crate) fn load(dir: &Path) -> std::io::Result<Self> {
        match std::fs::read(dir.join(STATE_FILE)) {
            Ok(bytes) => serde_json::from_slice(&bytes).map_err(std::io::Error::other),
            Err(e) if e.kind() == std::io::ErrorKind::NotFound => Ok(Self {
                cluster_id: format!("devmaster-{}", crate::info::random_hex(8)),
                next_experiment: 1,
                next_trial: 1,
                next_metric: 1,
                ..Self::default()
            }),
            Err(e) => Err(e),
        }
    }

    /// Writes `state.json` (without metrics) atomically and durably.
    pub(crate) fn save(&self, dir: &Path) -> std::io::Result<()> {
        let bytes = serde_json::to_vec(self).map_err(std::io::Error::other)?;
        write_atomically(dir, STATE_FILE, &bytes)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn metric(id: i64, run: i32, step: i32) -> MetricRec {
        MetricRec {
            id,
            trial_id: 1,
            trial_run_id: run,
            group: "training".into(),
            steps_completed: step,
            report_time: "t".into(),
            metrics: serde_json::json!({"loss": step}),
            archived: false,
        }
    }

    #[test]
    fn metrics_survive_a_reopen_a_torn_tail_is_cut_and_restarts_archive_again() {
        let dir = tempfile::tempdir().expect("tmp");
        let (mut state, p) = Persister::open(dir.path()).expect("open");
        let mut tickets = Vec::new();
        for (id, run, step) in [(1, 1, 1), (2, 1, 2), (3, 1, 3), (4, 2, 2)] {
            let rec = metric(id, run, step);
            tickets.push(p.stage_metric(&rec).expect("stage"));
            state.push_metric(rec);
        }
        tickets.push(p.stage_state(&state).expect("stage"));
        // One commit writes everything staged; the others find their change durable.
        for t in tickets {
            p.commit(&t).expect("commit");
        }
        let archived = |s: &MasterState| {
            s.metrics
                .iter()
                .filter(|m| m.archived)
                .map(|m| m.id)
                .collect::<Vec<_>>()
        };
        assert_eq!(archived(&state), [2, 3], "run 2 restarted from step 2");
        OpenOptions::new()
            .append(true)
            .open(dir.path().join(METRICS_JOURNAL))
            .and_then(|mut f| f.write_all(b"{\"id\": 5, \"tri"))
            .expect("tear");

        let (again, p) = Persister::open(dir.path()).expect("reopen");
        assert_eq!(again.metrics.len(), 4);
        assert_eq!(archived(&again), [2, 3]);
        assert_eq!(again.next_metric, 5);
        let rec = metric(5, 2, 3);
        let t = p.stage_metric(&rec).expect("stage");
        p.commit(&t).expect("append after the cut");
        let (last, _) = Persister::open(dir.path()).expect("reopen");
        assert_eq!(last.metrics.len(), 5, "the append starts on its own line");

        // A failed write loses what was staged with it, so nothing staged later is written
        // either, even once the folder is writable again.
        let state_dir = dir.path().join("s");
        std::fs::create_dir(&state_dir).expect("mkdir");
        let (st, p) = Persister::open(&state_dir).expect("open");
        std::fs::rename(&state_dir, dir.path().join("gone")).expect("move away");
        let t = p.stage_state(&st).expect("stage");
        assert!(p.commit(&t).is_err(), "the folder is gone");
        std::fs::rename(dir.path().join("gone"), &state_dir).expect("move back");
        let t = p.stage_state(&st).expect("stage");
        assert!(p.commit(&t).is_err(), "broken stays broken");

        std::fs::write(dir.path().join(METRICS_JOURNAL), b"{}\n{\"id\": 1}\n").expect("corrupt");
        let err = Persister::open(dir.path())
            .err()
            .expect("a corrupt line is refused");
        assert!(err.to_string().contains("line 1"), "{err}");
    }

    #[test]
    fn configs_inside_an_older_snapshot_move_to_their_own_files() {
        let dir = tempfile::tempdir().expect("tmp");
        let old = serde_json::json!({
            "cluster_id": "c", "next_experiment": 2, "next_trial": 1, "next_metric": 1,
            "experiments": {"1": {
                "id": 1, "name": "e", "original_config": "name: e\n", "config": {"name": "e"},
                "state": "STATE_PAUSED", "project_id": 1, "start_time": "t", "end_time": null,
                "trial_id": null, "max_length": 4, "max_restarts": 0
            }},
            "trials": {}, "checkpoints": [], "commands": {}, "sessions": {}
        });
        std::fs::write(dir.path().join(STATE_FILE), old.to_string()).expect("write");
        let (state, _) = Persister::open(dir.path()).expect("open");
        assert_eq!(state.experiments[&1].original_config, "name: e\n");
        let snapshot = std::fs::read_to_string(dir.path().join(STATE_FILE)).expect("read");
        assert!(!snapshot.contains("original_config"), "{snapshot}");
        let (again, _) = Persister::open(dir.path()).expect("reopen");
        assert_eq!(
            again.experiments[&1].config,
            serde_json::json!({"name": "e"})
        );
        std::fs::remove_file(dir.path().join(EXPERIMENTS_DIR).join("1.json")).expect("rm");
        let err = Persister::open(dir.path())
            .err()
            .expect("a lost config is refused");
        assert!(err.to_string().contains("experiment 1's config"), "{err}");
    }
}
