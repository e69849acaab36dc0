//! A fake Core: UUID folders in a temp dir, an event log shared with the test's hooks, and checks
//! of what a real master would rely on (a reported checkpoint is sealed; an acknowledgement comes
//! after a durable receipt).

use std::{
    path::{Path, PathBuf},
    sync::{
        Arc, Mutex,
        atomic::{AtomicUsize, Ordering},
    },
};

use hr_snapshot::{CoreCheckpoints, RECEIPT_FILE, RngState, SelectedCheckpoint};
use serde_json::Value;

#[derive(Debug, thiserror::Error)]
#[error("fake core: {0}")]
pub(crate) struct FakeError(String);

pub(crate) type Log = Arc<Mutex<Vec<String>>>;

/// A fake master + storage for one allocation.
pub(crate) struct FakeCore {
    pub(crate) storage: PathBuf,
    pub(crate) run_dir: PathBuf,
    pub(crate) log: Log,
    pub(crate) selected: Option<SelectedCheckpoint>,
    pub(crate) reported: Vec<(String, u64, Value)>,
    pub(crate) uuids_created: usize,
    /// An RNG the fake draws from during `report_metrics`, like a callback that touches it.
    pub(crate) meddling_rng: Option<SharedRng>,
}

impl FakeCore {
    pub(crate) fn new(storage: &Path, run_dir: &Path, log: Log) -> Self {
        Self {
            storage: storage.to_owned(),
            run_dir: run_dir.to_owned(),
            log,
            selected: None,
            reported: Vec::new(),
            uuids_created: 0,
            meddling_rng: None,
        }
    }

    fn event(&self, e: String) {
        self.log.lock().expect("log").push(e);
    }
}

impl CoreCheckpoints for FakeCore {
    type Error = FakeError;

    fn latest_checkpoint(&self) -> Option<SelectedCheckpoint> {
        self.selected.clone()
    }

    fn checkpoint_dir(&self, uuid: &str) -> PathBuf {
        self.storage.join(uuid)
    }

    fn new_checkpoint(&mut self) -> Result<(String, PathBuf), FakeError> {
        // UUIDs are unique across allocations, as Determined's uuid4 are.
        static NEXT: AtomicUsize = AtomicUsize::new(1);
        self.uuids_created += 1;
        let uuid = format!("uuid-{:06}", NEXT.fetch_add(1, Ordering::Relaxed));
        let dir = self.storage.join(&uuid);
        std::fs::create_dir_all(&dir).map_err(|e| FakeError(e.to_string()))?;
        self.event(format!("new_checkpoint {uuid}"));
        Ok((uuid, dir))
    }

    fn report_checkpoint(
        &mut self,
        uuid: &str,
        steps_completed: u64,
        metadata: Value,
    ) -> Result<(), FakeError> {
        if !self.storage.join(uuid).join(hr_seal::SEAL_FILE).is_file() {
            return Err(FakeError(format!("{uuid} reported before it was sealed")));
        }
        if metadata["steps_completed"] != steps_completed {
            return Err(FakeError("metadata lacks steps_completed".into()));
        }
        self.event(format!("report_checkpoint {uuid} {steps_completed}"));
        self.reported
            .push((uuid.to_owned(), steps_completed, metadata));
        Ok(())
    }

    fn report_metrics(&mut self, steps_completed: u64, _metrics: Value) -> Result<(), FakeError> {
        if let Some(rng) = &self.meddling_rng {
            rng.draw();
        }
        self.event(format!("report_metrics {steps_completed}"));
        Ok(())
    }

    fn acknowledge_preemption(&mut self) -> Result<(), FakeError> {
        if !self.run_dir.join(RECEIPT_FILE).is_file() {
            return Err(FakeError(
                "acknowledged before the receipt was on disk".into(),
            ));
        }
        self.event("acknowledge_preemption".into());
        Ok(())
    }
}

/// A xorshift RNG behind a lock, so a fake Core can share it with the trainer.
#[derive(Clone)]
pub(crate) struct SharedRng(pub(crate) Arc<Mutex<u64>>);

impl SharedRng {
    pub(crate) fn new(seed: u64) -> Self {
        Self(Arc::new(Mutex::new(seed)))
    }

    pub(crate) fn draw(&self) -> u64 {
        let mut s = self.0.lock().expect("rng");
        *s ^= *s << 13;
        *s ^= *s >> 7;
        *s ^= *s << 17;
        *s
    }
}

impl RngState for SharedRng {
    fn save_state(&self) -> Vec<u8> {
        self.0.lock().expect("rng").to_le_bytes().to_vec()
    }

    fn restore_state(&mut self, state: &[u8]) {
        let bytes: [u8; 8] = state.try_into().expect("8-byte state");
        *self.0.lock().expect("rng") = u64::from_le_bytes(bytes);
    }
}
