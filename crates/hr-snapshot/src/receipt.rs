//! The `preempted_at_checkpoint` receipt: which checkpoint a preempted allocation published,
//! written durably (tmp, fsync, rename, folder fsync) before preemption is acknowledged.

use hr_files::IoResultExt;
use std::path::Path;

use serde::{Deserialize, Serialize};

use crate::SnapshotError;

/// The receipt's file name in the run folder.
pub const RECEIPT_FILE: &str = "preempted_at_checkpoint.json";

/// What a preempted allocation published.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct Receipt {
    /// The step.
    pub step: u64,
    /// The checkpoint UUID.
    pub uuid: String,
    /// sha256 of its manifest.
    pub manifest_sha256: String,
    /// The allocation that wrote it.
    pub allocation: String,
}

/// Proof that the receipt is on disk and durable; the only way to acknowledge preemption.
#[derive(Debug)]
pub struct DurableReceipt {
    pub(crate) receipt: Receipt,
}

impl DurableReceipt {
    /// The receipt.
    pub fn receipt(&self) -> &Receipt {
        &self.receipt
    }
}

impl Receipt {
    /// Writes the receipt durably into `dir`.
    pub(crate) fn write_durable(self, dir: &Path) -> Result<DurableReceipt, SnapshotError> {
        std::fs::create_dir_all(dir).at("create", dir)?;
        hr_files::write_atomic(
            &dir.join(RECEIPT_FILE),
            &serde_json::to_vec_pretty(&self).expect("receipt serialises"),
        )?;
        Ok(DurableReceipt { receipt: self })
    }

    /// Reads the receipt in `dir`, if any.
    pub fn read(dir: &Path) -> Result<Option<Receipt>, SnapshotError> {
        let path = dir.join(RECEIPT_FILE);
        match std::fs::read(&path) {
            Ok(bytes) => serde_json::from_slice(&bytes).map(Some).map_err(|e| {
                let e = std::io::Error::new(std::io::ErrorKind::InvalidData, e);
                hr_files::IoError::new("parse", path, e).into()
            }),
            Err(e) if e.kind() == std::io::ErrorKind::NotFound => Ok(None),
            Err(e) => Err(hr_files::IoError::new("read", &path, e).into()),
        }
    }
}
