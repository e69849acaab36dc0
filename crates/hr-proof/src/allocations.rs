//! A run folder's allocation log (`hr_files::RunDir::allocations`): one record when an
//! allocation starts (or refuses to restore) and one when it ends, written by the training
//! lifecycle (`hr-train`) and read by the qualifications and `proof verify`. The field order is
//! the line's key order, as the lines were written before they were typed.

use std::path::Path;

use serde::{Deserialize, Serialize};

use crate::{Device, ProofError};

/// An allocation that started training: what it restored, its budget and its device.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct AllocationStart {
    /// Determined's allocation id (`<task>.<n>`; `local-…` off-cluster).
    pub allocation: String,
    /// The trial run id (1 for the trial's first allocation).
    pub trial_run_id: i32,
    /// The worker's process id.
    pub pid: u32,
    /// The checkpoint restored, if any.
    pub restored_uuid: Option<String>,
    /// Its step.
    pub restored_step: Option<u64>,
    /// The run's deadline (Unix seconds), when it has one.
    pub deadline_unix_s: Option<u64>,
    /// Seconds left until it at the start.
    pub deadline_remaining_s: Option<u64>,
    /// Device seconds used by earlier allocations.
    pub device_seconds_used: u64,
    /// The run's device-second budget, when it has one.
    pub device_seconds_limit: Option<u64>,
    /// Whether the run started without qualification proofs.
    pub unqualified: bool,
    /// The device the allocation trained on (absent in lines of binaries older than the field).
    pub device: Option<Device>,
    /// The ranks that trained, one device each, when more than one (the chief's device above).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub ranks: Option<usize>,
}

/// An allocation that ended with a checkpoint.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct AllocationEnd {
    /// The allocation id.
    pub allocation: String,
    /// Why it ended: `completed`, `preempted`, `stopped`, `out_of_budget`, ...
    pub ended: String,
    /// The step it ended at.
    pub step: u64,
    /// Its last checkpoint.
    pub uuid: String,
    /// Device seconds used by the run up to the end of this allocation.
    pub device_seconds_used: u64,
}

/// An allocation that refused the checkpoint the scheduler selected (nothing was adopted).
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct RestoreRefused {
    /// The allocation id.
    pub allocation: String,
    /// The trial run id.
    pub trial_run_id: i32,
    /// The checkpoint the scheduler selected.
    pub selected_uuid: Option<String>,
    /// `refused: <why>`.
    pub outcome: String,
}

/// One line of `allocations.jsonl`.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(untagged)]
pub enum AllocationRecord {
    /// An allocation started.
    Started(AllocationStart),
    /// An allocation ended.
    Ended(AllocationEnd),
    /// An allocation refused to restore.
    Refused(RestoreRefused),
}

impl std::fmt::Display for AllocationRecord {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(&serde_json::to_string(self).map_err(|_| std::fmt::Error)?)
    }
}

/// The allocation records of the log at `path`; none when it does not exist. A torn last line
/// (a crash mid-append) is left out; any other line that is not a record is an error naming it.
pub fn read_allocations(path: &Path) -> Result<Vec<AllocationRecord>, ProofError> {
    let text = match std::fs::read_to_string(path) {
        Ok(text) => text,
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => return Ok(Vec::new()),
        Err(source) => return Err(hr_files::IoError::new("read", path, source).into()),
    };
    hr_files::complete_lines(&text)
        .enumerate()
        .filter(|(_, line)| !line.trim().is_empty())
        .map(|(n, line)| {
            serde_json::from_str(line).map_err(|e| ProofError::Evidence {
                path: path.to_owned(),
                line: n + 1,
                message: format!("not an allocation record: {e}"),
            })
        })
        .collect()
}

impl AllocationRecord {
    /// The start record, if this is one.
    pub fn started(&self) -> Option<&AllocationStart> {
        match self {
            Self::Started(s) => Some(s),
            _ => None,
        }
    }

    /// The allocation the record is of.
    pub fn allocation(&self) -> &str {
        match self {
            Self::Started(s) => &s.allocation,
            Self::Ended(e) => &e.allocation,
            Self::Refused(r) => &r.allocation,
        }
    }
}

/// The start records of the log at `path` ([`read_allocations`]).
pub fn read_allocation_starts(path: &Path) -> Result<Vec<AllocationStart>, ProofError> {
    Ok(read_allocations(path)?
        .into_iter()
        .filter_map(|r| match r {
            AllocationRecord::Started(s) => Some(s),
            _ => None,
        })
        .collect())
}

#[cfg(test)]
mod tests {
    use super::*;

    /// Lines as the lifecycle wrote them before they were typed.
    const LOG: &str = concat!(
        r#"{"allocation":"1.a.1","trial_run_id":1,"pid":3903,"restored_uuid":null,"restored_step":null,"deadline_unix_s":1796408652,"deadline_remaining_s":2400,"device_seconds_used":0,"device_seconds_limit":28800,"unqualified":false,"device":{"kind":"vulkan","name":"llvmpipe (LLVM 15.0.6, 256 bits)","detail":"llvmpipe Mesa 22.3.6 (LLVM 15.0.6)","libraries":"burn 0.21.0, cubecl 0.10.0"}}"#,
        "\n",
        r#"{"allocation":"1.a.1","ended":"preempted","step":1,"uuid":"d6","device_seconds_used":6}"#,
        "\n",
        r#"{"allocation":"1.a.2","trial_run_id":2,"selected_uuid":"d6","outcome":"refused: seal"}"#,
        "\n",
    );

    #[test]
    fn the_written_lines_read_back_typed_and_write_the_same_bytes() -> Result<(), ProofError> {
        let dir = tempfile::tempdir().expect("tmp");
        let path = dir.path().join("allocations.jsonl");
        // A torn last line is not a record yet.
        std::fs::write(&path, format!("{LOG}{{\"allocation\":\"1.a")).expect("write");
        let records = read_allocations(&path)?;
        assert_eq!(records.len(), 3);
        assert!(
            matches!(&records[0], AllocationRecord::Started(s) if s.pid == 3903 && s.device.is_some())
        );
        assert!(matches!(&records[1], AllocationRecord::Ended(e) if e.step == 1));
        assert!(matches!(&records[2], AllocationRecord::Refused(r) if r.trial_run_id == 2));
        let again: String = records.iter().map(|r| format!("{r}\n")).collect();
        assert_eq!(again, LOG);
        // A start line of an older binary has no device; a bad middle line is named.
        let first = LOG.lines().next().unwrap_or_default();
        let old = format!("{}}}", &first[..first.find(r#","device":"#).unwrap_or(0)]);
        assert!(
            matches!(serde_json::from_str(&old), Ok(AllocationRecord::Started(s)) if s.device.is_none())
        );
        std::fs::write(&path, format!("{{\"allocation\":1}}\n{LOG}")).expect("write");
        let err = read_allocations(&path).expect_err("bad line").to_string();
        assert!(err.contains("line 1: not an allocation record"), "{err}");
        assert!(read_allocations(&dir.path().join("absent"))?.is_empty());
        Ok(())
    }
}
