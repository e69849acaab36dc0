//! [`CoreContext`]: the blocking Core API, on a cluster or locally.

use std::{
    path::{Path, PathBuf},
    sync::{
        Arc, Mutex,
        atomic::{AtomicBool, Ordering},
    },
    time::Duration,
};

use hr_det::{
    Client,
    wire::{Checkpoint, CheckpointState, CheckpointTraining},
};
use serde_json::{Value, json};

use crate::{
    CoreError, StoredCheckpoint, TrialInfo,
    checkpoint::{copy_tree, resources, storage_base, uuid4, write_metadata},
    info::info_dir,
    queue::MetricsQueue,
};

/// The current searcher operation: train until `length` steps.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct SearcherOp {
    /// Target steps.
    pub length: u64,
}

enum Mode {
    Cluster { client: Client },
    Local { run_dir: PathBuf, max_length: u64 },
}

/// The Core API of one trial allocation.
pub struct CoreContext {
    info: TrialInfo,
    mode: Mode,
    storage: PathBuf,
    runtime: tokio::runtime::Runtime,
    preempt: Arc<AtomicBool>,
    /// Queued metric reports not yet flushed.
    queue: Mutex<Option<MetricsQueue>>,
}

#[allow(clippy::print_stderr)] // the only way left to say why the process ends
fn abort_on_second_signal() -> ! {
    eprintln!("second stop signal: exiting now without a final save (exit 130)");
    std::process::exit(130)
}

fn steps_i32(steps: u64) -> Result<i32, CoreError> {
    i32::try_from(steps).map_err(|_| CoreError::Environment("steps_completed exceeds int32".into()))
}

impl std::fmt::Debug for CoreContext {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("CoreContext")
            .field("info", &self.info)
            .field("storage", &self.storage)
            .finish_non_exhaustive()
    }
}

impl CoreContext {
    /// Inside a trial: reads the info files (`HR_DET_INFO_DIR` or `/run/determined/info`) and
    /// `DET_*`, calls `runs/start`, and starts the preemption long-poll.
    pub fn from_environment() -> Result<Self, CoreError> {
        Self::from_info_dir(&info_dir())
    }

    /// Like [`CoreContext::from_environment`] with an explicit info folder.
    pub fn from_info_dir(dir: &Path) -> Result<Self, CoreError> {
        let info = TrialInfo::from_environment_in(dir)?;
        let storage_cfg = info
            .config
            .get("checkpoint_storage")
            .cloned()
            .unwrap_or_default();
        let storage = storage_base(&storage_cfg)?;
        let token = info
            .user_token
            .clone()
            .ok_or_else(|| CoreError::Environment("DET_USER_TOKEN is not set".into()))?;
        let client = Client::new(&info.master_url)?.with_token(token);
        let runtime = tokio::runtime::Builder::new_multi_thread()
            .worker_threads(1)
            .enable_all()
            .build()
            .map_err(CoreError::io("start runtime in", "."))?;
        runtime.block_on(client.runs_start(info.trial_id, storage_cfg))?;
        let preempt = Arc::new(AtomicBool::new(false));
        let (poll_client, flag, alloc) =
            (client.clone(), preempt.clone(), info.allocation_id.clone());
        runtime.spawn(async move {
            let mut timeout = 0;
            loop {
                match poll_client.preemption(&alloc, timeout).await {
                    Ok(true) => {
                        flag.store(true, Ordering::SeqCst);
                        return;
                    }
                    Ok(false) => timeout = 60,
                    Err(_) => tokio::time::sleep(Duration::from_secs(1)).await,
                }
            }
        });
        Ok(Self {
            info,
            mode: Mode::Cluster { client },
            storage,
            runtime,
            preempt,
            queue: Mutex::new(None),
        })
    }

    /// Off-cluster: metrics to `run_dir/metrics.jsonl`, checkpoints under `run_dir/checkpoints/`,
    /// preemption on SIGTERM or SIGINT, a single searcher operation of `max_length` steps. Each
    /// call is a new "allocation" (`trial_run_id` counts up) restoring the latest checkpoint by
    /// the master's rule.
    pub fn local(run_dir: &Path, max_length: u64) -> Result<Self, CoreError> {
        let storage = run_dir.join("checkpoints");
        std::fs::create_dir_all(&storage).map_err(CoreError::io("create", &storage))?;
        let runs_path = run_dir.join("local-runs");
        let run_id = std::fs::read_to_string(&runs_path)
            .ok()
            .and_then(|s| s.trim().parse::<i32>().ok())
            .unwrap_or(0)
            + 1;
        std::fs::write(&runs_path, run_id.to_string())
            .map_err(CoreError::io("write", &runs_path))?;
        let latest = local_latest(run_dir)?;
        let info = TrialInfo {
            master_url: String::new(),
            task_id: "local".into(),
            allocation_id: format!("local.{run_id}"),
            trial_id: 0,
            experiment_id: 0,
            trial_run_id: run_id,
            trial_seed: 0,
            steps_completed: latest.as_ref().map_or(0, |l| l.1),
            latest_checkpoint: latest.map(|l| l.0),
            config: json!({"checkpoint_storage": {"type": "directory", "container_path": storage}}),
            hparams: json!({}),
            user_token: None,
        };
        let runtime = tokio::runtime::Builder::new_multi_thread()
            .worker_threads(1)
            .enable_all()
            .build()
            .map_err(CoreError::io("start runtime in", "."))?;
        let preempt = Arc::new(AtomicBool::new(false));
        let flag = preempt.clone();
        runtime.block_on(async {
            let mut term =
                tokio::signal::unix::signal(tokio::signal::unix::SignalKind::terminate())
                    .map_err(CoreError::io("install SIGTERM handler in", "."))?;
            let mut int = tokio::signal::unix::signal(tokio::signal::unix::SignalKind::interrupt())
                .map_err(CoreError::io("install SIGINT handler in", "."))?;
            tokio::spawn(async move {
                tokio::select! {
                    _ = term.recv() => {}
                    _ = int.recv() => {}
                }
                flag.store(true, Ordering::SeqCst);
                // A second signal while the stop is under way aborts at once (as a second Ctrl-C
                // does elsewhere): no final save; the last sealed checkpoint stays the resume
                // point, and a half-written one is never adopted.
                tokio::select! {
                    _ = term.recv() => {}
                    _ = int.recv() => {}
                }
                abort_on_second_signal();
            });
            Ok::<_, CoreError>(())
        })?;
        Ok(Self {
            info,
            mode: Mode::Local {
                run_dir: run_dir.to_owned(),
                max_length,
            },
            storage,
            runtime,
            preempt,
            queue: Mutex::new(None),
        })
    }

    /// Continues a local run from a checkpoint written elsewhere (like a Determined experiment
    /// started from a source checkpoint): `src` is a checkpoint folder (with the `metadata.json`
    /// that reporting wrote) or a local run folder (its latest checkpoint by the master's rule).
    /// The folder is copied into `run_dir`'s storage under its UUID and recorded as reported, so
    /// the next [`CoreContext::local`] selects and restores it like any other checkpoint. Returns
    /// the UUID and its `steps_completed`.
    pub fn local_import(run_dir: &Path, src: &Path) -> Result<(String, u64), CoreError> {
        let not = |why: &str| CoreError::NotACheckpoint {
            path: src.to_owned(),
            why: why.to_owned(),
        };
        let dir = if src.join("checkpoints.jsonl").is_file() {
            let (uuid, _) = local_latest(src)?.ok_or_else(|| not("its run has no checkpoint"))?;
            src.join("checkpoints").join(uuid)
        } else {
            src.to_owned()
        };
        let meta_path = dir.join("metadata.json");
        let meta: Value = std::fs::read(&meta_path)
            .ok()
            .and_then(|b| serde_json::from_slice(&b).ok())
            .ok_or_else(|| not("no readable metadata.json (give a checkpoint or a run folder)"))?;
        let steps = meta["steps_completed"]
            .as_u64()
            .ok_or_else(|| not("metadata.json has no steps_completed"))?;
        let uuid = dir
            .file_name()
            .map(|n| n.to_string_lossy().into_owned())
            .ok_or_else(|| not("no folder name"))?;
        let storage = run_dir.join("checkpoints");
        copy_tree(&dir, &storage.join(&uuid))?;
        Self::append_local(
            run_dir,
            "checkpoints.jsonl",
            &json!({"uuid": uuid, "steps_completed": steps, "trial_run_id": 0,
                "imported": true, "metadata": meta}),
        )?;
        Ok((uuid, steps))
    }

    /// The trial's info.
    pub fn info(&self) -> &TrialInfo {
        &self.info
    }

    /// The checkpoint storage base folder.
    pub fn storage_dir(&self) -> &Path {
        &self.storage
    }

    fn append_local(run_dir: &Path, file: &str, value: &Value) -> Result<(), CoreError> {
        use std::io::Write;
        let path = run_dir.join(file);
        // A torn last line (a crash mid-append) is cut off first, so the new line starts clean.
        if let Ok(text) = std::fs::read(&path)
            && !text.is_empty()
            && !text.ends_with(b"\n")
        {
            let keep = text.iter().rposition(|b| *b == b'\n').map_or(0, |i| i + 1);
            let f = std::fs::OpenOptions::new()
                .write(true)
                .open(&path)
                .map_err(CoreError::io("open", &path))?;
            f.set_len(keep as u64)
                .and_then(|()| f.sync_all())
                .map_err(CoreError::io("truncate", &path))?;
        }
        let mut f = std::fs::OpenOptions::new()
            .create(true)
            .append(true)
            .open(&path)
            .map_err(CoreError::io("open", &path))?;
        writeln!(f, "{value}")
            .and_then(|()| f.sync_all())
            .map_err(CoreError::io("write", &path))
    }

    fn report(&self, group: &'static str, steps: u64, metrics: Value) -> Result<(), CoreError> {
        match &self.mode {
            Mode::Cluster { client } => self.runtime.block_on(crate::queue::report(
                client,
                self.info.trial_id,
                self.info.trial_run_id,
                group,
                steps_i32(steps)?,
                metrics,
            )),
            Mode::Local { run_dir, .. } => Self::append_local(
                run_dir,
                "metrics.jsonl",
                &json!({"group": group, "trial_run_id": self.info.trial_run_id, "steps_completed": steps, "metrics": metrics}),
            ),
        }
    }

    /// Queues training metrics at `steps_completed` and returns at once; a background task
    /// delivers them, several at a time. [`CoreContext::flush_metrics`] waits until all are
    /// delivered and returns the first failure: call it before acknowledging preemption,
    /// completing the searcher operation or exiting (what is still queued when the context is
    /// dropped is lost). Off-cluster the report is written at once.
    pub fn queue_training_metrics(
        &self,
        steps_completed: u64,
        metrics: Value,
    ) -> Result<(), CoreError> {
        let Mode::Cluster { client } = &self.mode else {
            return self.report("training", steps_completed, metrics);
        };
        let report = ("training", steps_i32(steps_completed)?, metrics);
        let mut queue = self
            .queue
            .lock()
            .unwrap_or_else(std::sync::PoisonError::into_inner);
        let open = queue.get_or_insert_with(|| {
            MetricsQueue::start(
                &self.runtime,
                client.clone(),
                self.info.trial_id,
                self.info.trial_run_id,
            )
        });
        if open.push(report) {
            return Ok(());
        }
        // The reporter stopped on a failure: report that one.
        let stopped = queue.take().map(|q| self.runtime.block_on(q.close()));
        match stopped {
            Some(Err(e)) => Err(e),
            _ => Err(CoreError::Environment(
                "the metrics reporter stopped".into(),
            )),
        }
    }

    /// Waits until every queued report is delivered; returns how many were, or the first
    /// failure.
    pub fn flush_metrics(&self) -> Result<u64, CoreError> {
        let open = self
            .queue
            .lock()
            .unwrap_or_else(std::sync::PoisonError::into_inner)
            .take();
        match open {
            Some(q) => self.runtime.block_on(q.close()),
            None => Ok(0),
        }
    }

    /// Reports training metrics at `steps_completed`.
    pub fn report_training_metrics(
        &self,
        steps_completed: u64,
        metrics: Value,
    ) -> Result<(), CoreError> {
        self.report("training", steps_completed, metrics)
    }

    /// Reports validation metrics at `steps_completed`.
    pub fn report_validation_metrics(
        &self,
        steps_completed: u64,
        metrics: Value,
    ) -> Result<(), CoreError> {
        self.report("validation", steps_completed, metrics)
    }

    /// A new checkpoint folder `<storage>/<uuid>/` to write into (Python's `store_path`).
    pub fn store_path(&self) -> Result<StoredCheckpoint, CoreError> {
        let uuid = uuid4();
        let path = self.storage.join(&uuid);
        std::fs::create_dir_all(&path).map_err(CoreError::io("create", &path))?;
        Ok(StoredCheckpoint { uuid, path })
    }

    /// Publishes a stored checkpoint: writes `metadata.json` (with `steps_completed`), lists the
    /// resources, and reports it. Returns the UUID.
    pub fn report_checkpoint(
        &self,
        ck: StoredCheckpoint,
        steps_completed: u64,
        metadata: Value,
    ) -> Result<String, CoreError> {
        self.report_stored(&ck.uuid, steps_completed, metadata)?;
        Ok(ck.uuid)
    }

    /// Publishes the checkpoint folder `<storage>/<uuid>` written earlier (see
    /// [`CoreContext::store_path`]).
    pub fn report_stored(
        &self,
        uuid: &str,
        steps_completed: u64,
        metadata: Value,
    ) -> Result<(), CoreError> {
        let ck = StoredCheckpoint {
            uuid: uuid.to_owned(),
            path: self.restore_path(uuid)?,
        };
        let mut metadata = match metadata {
            Value::Object(m) => Value::Object(m),
            Value::Null => json!({}),
            other => json!({"value": other}),
        };
        metadata["steps_completed"] = json!(steps_completed);
        write_metadata(&ck.path, &metadata)?;
        let resources = resources(&ck.path)?;
        match &self.mode {
            Mode::Cluster { client } => {
                let checkpoint = Checkpoint {
                    uuid: ck.uuid.clone(),
                    task_id: Some(self.info.task_id.clone()),
                    allocation_id: Some(self.info.allocation_id.clone()),
                    report_time: None,
                    state: CheckpointState::Completed,
                    resources,
                    metadata,
                    training: CheckpointTraining::default(),
                    storage_id: None,
                };
                match self.runtime.block_on(client.report_checkpoint(&checkpoint)) {
                    // The answer was lost: the report counts if the master holds this UUID.
                    Err(hr_det::DetError::Unconfirmed { .. }) => {
                        match self
                            .runtime
                            .block_on(client.get_checkpoint(&checkpoint.uuid))
                        {
                            Ok(_) => {}
                            Err(hr_det::DetError::NotFound(_)) => self
                                .runtime
                                .block_on(client.report_checkpoint(&checkpoint))?,
                            Err(e) => return Err(e.into()),
                        }
                    }
                    other => other?,
                }
            }
            Mode::Local { run_dir, .. } => Self::append_local(
                run_dir,
                "checkpoints.jsonl",
                &json!({"uuid": ck.uuid, "steps_completed": steps_completed, "trial_run_id": self.info.trial_run_id,
                    "resources": resources, "metadata": metadata}),
            )?,
        }
        Ok(())
    }

    /// Copies `src` into a new checkpoint and reports it (Python's `upload`).
    pub fn upload(
        &self,
        src: &Path,
        steps_completed: u64,
        metadata: Value,
    ) -> Result<String, CoreError> {
        let ck = self.store_path()?;
        copy_tree(src, &ck.path)?;
        self.report_checkpoint(ck, steps_completed, metadata)
    }

    /// The folder of an existing checkpoint (Python's `restore_path`, for shared storage).
    pub fn restore_path(&self, uuid: &str) -> Result<PathBuf, CoreError> {
        let path = self.storage.join(uuid);
        if path.is_dir() {
            Ok(path)
        } else {
            Err(CoreError::CheckpointNotFound {
                uuid: uuid.to_owned(),
                path,
            })
        }
    }

    /// Whether the master (or a signal, locally) asked this allocation to stop.
    pub fn should_preempt(&self) -> bool {
        self.preempt.load(Ordering::SeqCst)
    }

    /// Acknowledges preemption: the allocation will exit and the trial stays resumable.
    pub fn acknowledge_preemption(&self) -> Result<(), CoreError> {
        match &self.mode {
            Mode::Cluster { client } => Ok(self
                .runtime
                .block_on(client.ack_preemption(&self.info.allocation_id))?),
            Mode::Local { run_dir, .. } => Self::append_local(
                run_dir,
                "events.jsonl",
                &json!({"event": "preemption-acknowledged", "trial_run_id": self.info.trial_run_id}),
            ),
        }
    }

    /// The current searcher operation, or `None` when the searcher is done.
    pub fn searcher_operation(&self) -> Result<Option<SearcherOp>, CoreError> {
        match &self.mode {
            Mode::Cluster { client } => {
                let r = self
                    .runtime
                    .block_on(client.searcher_operation(self.info.trial_id))?;
                Ok(match (r.completed, r.op) {
                    (false, Some(op)) => Some(SearcherOp {
                        length: u64::try_from(op.validate_after.length).unwrap_or(0),
                    }),
                    _ => None,
                })
            }
            Mode::Local {
                run_dir,
                max_length,
            } => {
                let done = std::fs::read_to_string(run_dir.join("events.jsonl"))
                    .unwrap_or_default()
                    .lines()
                    .any(|l| l.contains("\"searcher-completed\""));
                Ok((!done).then_some(SearcherOp {
                    length: *max_length,
                }))
            }
        }
    }

    /// Reports progress towards the current operation.
    pub fn report_progress(&self, progress: f64) -> Result<(), CoreError> {
        match &self.mode {
            Mode::Cluster { client } => Ok(self
                .runtime
                .block_on(client.report_progress(self.info.trial_id, progress))?),
            Mode::Local { .. } => Ok(()),
        }
    }

    /// Completes the current operation with the searcher metric.
    pub fn complete_operation(&self, op: SearcherOp, metric: f64) -> Result<(), CoreError> {
        match &self.mode {
            Mode::Cluster { client } => {
                let length = i64::try_from(op.length).unwrap_or(i64::MAX);
                Ok(self.runtime.block_on(client.complete_operation(
                    self.info.trial_id,
                    length,
                    metric,
                ))?)
            }
            Mode::Local { run_dir, .. } => Self::append_local(
                run_dir,
                "events.jsonl",
                &json!({"event": "searcher-completed", "length": op.length, "metric": metric}),
            ),
        }
    }
}

/// The checkpoints a local run reported, as `(uuid, steps_completed)` in report order (its
/// `checkpoints.jsonl`); empty when it reported none. A torn or unreadable line is an error.
pub fn local_checkpoints(run_dir: &Path) -> Result<Vec<(String, u64)>, CoreError> {
    let path = run_dir.join("checkpoints.jsonl");
    let text = match std::fs::read_to_string(&path) {
        Ok(t) => t,
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => return Ok(Vec::new()),
        Err(e) => return Err(CoreError::io("read", path)(e)),
    };
    // A crash in the middle of an append leaves a last line without its newline: that report
    // never completed, so it is not a checkpoint (any other bad line is an error).
    let complete = match text.rfind('\n') {
        Some(end) if !text.ends_with('\n') => &text[..=end],
        None if !text.is_empty() => "",
        _ => text.as_str(),
    };
    let mut out = Vec::new();
    for line in complete.lines().filter(|l| !l.trim().is_empty()) {
        let v: Value = serde_json::from_str(line).map_err(|e| CoreError::Io {
            op: "parse",
            path: path.clone(),
            source: std::io::Error::new(std::io::ErrorKind::InvalidData, e),
        })?;
        if let (Some(uuid), Some(steps)) = (v["uuid"].as_str(), v["steps_completed"].as_u64()) {
            out.push((uuid.to_owned(), steps));
        }
    }
    Ok(out)
}

/// The latest local checkpoint by the master's rule: highest steps, then the latest report.
fn local_latest(run_dir: &Path) -> Result<Option<(String, u64)>, CoreError> {
    let mut best: Option<(String, u64)> = None;
    // Later lines are later reports, so `>=` keeps the latest of equal steps.
    for (uuid, steps) in local_checkpoints(run_dir)? {
        if best.as_ref().is_none_or(|b| steps >= b.1) {
            best = Some((uuid, steps));
        }
    }
    Ok(best)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_torn_last_report_is_not_a_checkpoint_but_a_bad_middle_line_is_an_error() {
        let dir = tempfile::tempdir().expect("tempdir");
        let file = dir.path().join("checkpoints.jsonl");
        let good = r#"{"uuid": "a", "steps_completed": 1}"#;
        std::fs::write(&file, format!("{good}\n{{\"uuid\": \"b\", \"steps_")).expect("write");
        assert_eq!(
            local_checkpoints(dir.path()).expect("torn tail ignored"),
            [("a".to_owned(), 1)]
        );
        assert_eq!(
            local_latest(dir.path()).expect("latest"),
            Some(("a".to_owned(), 1))
        );
        std::fs::write(&file, format!("{{\"uuid\": \"b\", \"st\n{good}\n")).expect("write");
        assert!(
            local_checkpoints(dir.path()).is_err(),
            "a bad complete line is corruption"
        );
        std::fs::write(&file, "{\"uuid\": \"b\"").expect("write");
        assert_eq!(local_checkpoints(dir.path()).expect("only a torn line"), []);
        // The next report cuts the torn line off and starts clean.
        std::fs::write(&file, format!("{good}\n{{\"uuid\": \"b\", \"steps_")).expect("write");
        CoreContext::append_local(
            dir.path(),
            "checkpoints.jsonl",
            &serde_json::json!({"uuid": "c", "steps_completed": 2}),
        )
        .expect("append");
        assert_eq!(
            local_checkpoints(dir.path()).expect("clean"),
            [("a".to_owned(), 1), ("c".to_owned(), 2)]
        );
    }
}
