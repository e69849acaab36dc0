//! `hr-snapshot`'s [`CoreCheckpoints`] for [`CoreContext`]: the snapshot publisher on a real
//! (or the local) Determined master. It lives here so that the publisher links no networking.

use std::path::PathBuf;

use hr_snapshot::{CoreCheckpoints, SelectedCheckpoint};
use serde_json::Value;

use crate::{CoreContext, CoreError};

impl CoreCheckpoints for CoreContext {
    type Error = CoreError;

    fn latest_checkpoint(&self) -> Option<SelectedCheckpoint> {
        let info = self.info();
        info.latest_checkpoint
            .clone()
            .map(|uuid| SelectedCheckpoint {
                uuid,
                steps_completed: info.steps_completed,
            })
    }

    fn checkpoint_dir(&self, uuid: &str) -> PathBuf {
        self.storage_dir().join(uuid)
    }

    fn new_checkpoint(&mut self) -> Result<(String, PathBuf), CoreError> {
        let ck = self.store_path()?;
        Ok((ck.uuid().to_owned(), ck.path().to_owned()))
    }

    fn report_checkpoint(
        &mut self,
        uuid: &str,
        steps_completed: u64,
        metadata: Value,
    ) -> Result<(), CoreError> {
        self.report_stored(uuid, steps_completed, metadata)
    }

    fn report_metrics(&mut self, steps_completed: u64, metrics: Value) -> Result<(), CoreError> {
        self.report_training_metrics(steps_completed, metrics)
    }

    fn acknowledge_preemption(&mut self) -> Result<(), CoreError> {
        CoreContext::acknowledge_preemption(self)
    }
}
