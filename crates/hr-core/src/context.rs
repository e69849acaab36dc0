//! [`CoreContext`]: the blocking Core API, on a cluster or locally.

use hr_files::IoResultExt;
use hr_files::local_core;
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

pub(crate) enum Mode {
    Cluster { client: Client },
    Local { run_dir: PathBuf, max_length: u64 },
}

/// The Core API of one trial allocation.
pub struct CoreContext {
    pub(crate) info: TrialInfo,
    pub(crate) mode: Mode,
    pub(crate) storage: PathBuf,
    pub(crate) runtime: tokio::runtime::Runtime,
    pub(crate) preempt: Arc<AtomicBool>,
    /// Queued metric reports not yet flushed.
    pub(crate) queue: Mutex<Option<MetricsQueue>>,
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
        Self::from_info_dir(&info_dir(), 1)
    }

    /// The chief's context of a trial run as `ranks` ranks, one per slot (only the chief talks
    /// to the master).
    pub fn for_chief(ranks: usize) -> Result<Self, CoreError> {
        Self::from_info_dir(&info_dir(), ranks)
    }

    /// Like [`CoreContext::from_environment`] with an explicit info folder, for a trial run as
    /// `ranks` ranks.
    pub fn from_info_dir(dir: &Path, ranks: usize) -> Result<Self, CoreError> {
        let info = TrialInfo::from_environment_in(dir)?;
        info.check_ranks(ranks)?;
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
        let trust = hr_det::MasterTrust::for_trial(
            info.master_cert_file.as_deref(),
            info.master_cert_name.as_deref(),
        )?;
        let client = Client::with_trust(&info.master_url, trust)?.with_token(token);
        let runtime = tokio::runtime::Builder::new_multi_thread()
            .worker_threads(1)
            .enable_all()
            .build()
            .at("start runtime in", ".")?;
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

    /// The trial's info.
    pub fn info(&self) -> &TrialInfo {
        &self.info
    }

    /// The checkpoint storage base folder.
    pub fn storage_dir(&self) -> &Path {
        &self.storage
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
            Mode::Local { run_dir, .. } => crate::journal::append_local(
                run_dir,
                local_core::METRICS,
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
        std::fs::create_dir_all(&path).at("create", &path)?;
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
            Mode::Local { run_dir, .. } => crate::journal::append_local(
                run_dir,
                local_core::CHECKPOINT_LIST,
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
            Mode::Local { run_dir, .. } => crate::journal::append_local(
                run_dir,
                local_core::EVENTS,
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
                let done = std::fs::read_to_string(run_dir.join(local_core::EVENTS))
                    .unwrap_or_default()
                    .lines()
                    .any(|l| l.contains("\"searcher-completed\""));
                Ok((!done).then_some(SearcherOp {
                    length: *max_length,
                }))
            }
        }
    }

    /// Reports progress towards the current operation, in its units (batches done, as the
    /// Python client's `op.report_progress`): the master divides by the searcher's length.
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
            Mode::Local { run_dir, .. } => crate::journal::append_local(
                run_dir,
                local_core::EVENTS,
                &json!({"event": "searcher-completed", "length": op.length, "metric": metric}),
            ),
        }
    }
}
