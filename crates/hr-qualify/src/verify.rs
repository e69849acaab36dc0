//! Re-checking a training qualification's proof against the run folders and checkpoints it
//! names, not only its digests: every run has all its steps of evidence, the recorded verdict
//! follows from that evidence, the interruption happened where the proof says (the allocation
//! that resumed restored that step, and for a pause exactly the receipt's checkpoint), every
//! allocation of every run recorded the proof's device, and the checkpoints verify with the
//! proof's source binding.

use hr_files::{IoResultExt, RunDir};
use std::path::Path;

use hr_proof::{
    AllocationStart, Device, EvidenceLine, MANAGED_PROOF_SCHEMA, ManagedProof, NATIVE_PROOF_SCHEMA,
    NativeProof, first_divergence, read_allocation_starts,
};
use hr_seal::{Expectations, SourceBinding, Trust, verify};
use serde::de::DeserializeOwned;
use serde_json::Value;

use crate::QualifyError;

fn failed(why: impl Into<String>) -> QualifyError {
    QualifyError::Failed(why.into())
}

fn read_proof<T: DeserializeOwned>(path: &Path, schema: &str) -> Result<T, QualifyError> {
    let bytes = std::fs::read(path).at("read", path)?;
    let value: Value =
        serde_json::from_slice(&bytes).map_err(|e| failed(format!("{}: {e}", path.display())))?;
    if value["schema"] != schema {
        return Err(failed(format!(
            "{}: schema {} is not {schema}",
            path.display(),
            value["schema"]
        )));
    }
    serde_json::from_value(value).map_err(|e| failed(format!("{}: {e}", path.display())))
}

/// A run folder's evidence, which must hold exactly `steps` steps.
fn evidence(run: &Path, steps: u64) -> Result<Vec<EvidenceLine>, QualifyError> {
    let path = RunDir::new(run).evidence();
    let lines = hr_proof::read_evidence(&path).map_err(|e| failed(e.to_string()))?;
    if lines.len() as u64 != steps {
        return Err(failed(format!(
            "{} holds {} steps, not {steps}",
            path.display(),
            lines.len()
        )));
    }
    Ok(lines)
}

/// The start records of the run in `run`.
fn starts(run: &Path) -> Result<Vec<AllocationStart>, QualifyError> {
    Ok(read_allocation_starts(&RunDir::new(run).allocations())?)
}

/// The device each allocation of the run in `run` recorded (its start record names it), with
/// where it was recorded.
fn run_devices(run: &Path) -> Result<Vec<(Device, String)>, QualifyError> {
    let path = RunDir::new(run).allocations();
    let devices = starts(run)?
        .into_iter()
        .map(|start| {
            let device = start.device.ok_or_else(|| {
                failed(format!(
                    "{}: allocation {} records no device; it was run by an older binary",
                    path.display(),
                    start.allocation
                ))
            })?;
            Ok((
                device,
                format!("{} ({:?})", run.display(), start.allocation),
            ))
        })
        .collect::<Result<Vec<_>, QualifyError>>()?;
    if devices.is_empty() {
        return Err(failed(format!("{} records no allocation", path.display())));
    }
    Ok(devices)
}

/// The one device every allocation of every run in `runs` recorded: an error when one recorded
/// none or two differ.
pub fn runs_device(runs: &[&Path]) -> Result<Device, QualifyError> {
    let mut all = Vec::new();
    for run in runs {
        all.extend(run_devices(run)?);
    }
    let mut all = all.into_iter();
    let (first, at) = all.next().ok_or_else(|| failed("no runs"))?;
    for (other, there) in all {
        if other != first {
            return Err(failed(format!("{there} ran on {other}, {at} on {first}")));
        }
    }
    Ok(first)
}

/// Checks that the runs in `runs` ran where the proof says.
fn check_device(runs: &[&Path], device: &Device) -> Result<(), QualifyError> {
    let ran = runs_device(runs)?;
    if ran != *device {
        return Err(failed(format!(
            "the runs ran on {ran}, but the proof says {device}"
        )));
    }
    Ok(())
}

/// Checks that the recorded verdict follows from the two evidence streams.
fn check_verdict(
    reference: &[EvidenceLine],
    resumed: &[EvidenceLine],
    recorded: Option<&hr_proof::Divergence>,
    equal: bool,
) -> Result<(), QualifyError> {
    let divergence = first_divergence(reference, resumed);
    if divergence.as_ref() != recorded || equal != divergence.is_none() {
        return Err(failed(format!(
            "the recorded verdict (equal: {equal}, divergence {recorded:?}) does not follow from \
             the evidence (divergence {divergence:?})"
        )));
    }
    Ok(())
}

/// Verifies the checkpoint `dir` at `step` and that the proof's binary wrote it (the same
/// commit and binary digest; a proof may also record tree and Cargo.lock digests, which
/// checkpoints do not carry).
fn check_checkpoint(dir: &Path, source: &SourceBinding, step: u64) -> Result<(), QualifyError> {
    let expect = Expectations {
        trust: Trust::DigestOnly,
        step: Some(step),
        ..Expectations::default()
    };
    let written = verify(dir, &expect)?.manifest.source;
    if written.commit != source.commit || written.binary_sha256 != source.binary_sha256 {
        return Err(failed(format!(
            "{} was written by commit {} (binary {:?}), not the proof's {} ({:?})",
            dir.display(),
            written.commit,
            written.binary_sha256,
            source.commit,
            source.binary_sha256
        )));
    }
    Ok(())
}

/// Re-checks a native qualification proof (`qualify native`).
pub fn verify_native_proof(path: &Path) -> Result<NativeProof, QualifyError> {
    // Its runs, resolved against the proof's own folder: the same wherever this runs.
    let at = std::path::absolute(path).at("resolve", path)?;
    let p = read_proof::<NativeProof>(path, NATIVE_PROOF_SCHEMA)?.resolved_at(&at);
    let reference = evidence(&p.reference, p.steps)?;
    let resumed = evidence(&p.resumed, p.steps)?;
    evidence(&p.interrupted, p.stopped_after)?;
    check_verdict(&reference, &resumed, p.first_divergence.as_ref(), p.equal)?;
    check_device(&[&p.reference, &p.interrupted, &p.resumed], &p.device)?;
    // The interruption: the resumed run's only allocation restored the stopped step.
    let restored = starts(&p.resumed)?.first().and_then(|s| s.restored_step);
    if restored != Some(p.stopped_after) {
        return Err(failed(format!(
            "the resumed run restored step {restored:?} but the proof says it stopped after {}",
            p.stopped_after
        )));
    }
    // The source: every checkpoint both interrupted runs keep was written by the proof's binary.
    for run in [&p.interrupted, &p.resumed] {
        let run = RunDir::new(run);
        let listed = hr_core::local_checkpoints(&run.core()).map_err(|e| failed(e.to_string()))?;
        for (uuid, step) in listed {
            check_checkpoint(&run.checkpoint(&uuid), &p.source, step)?;
        }
    }
    Ok(p)
}

/// Re-checks a managed qualification proof (`qualify managed`).
pub fn verify_managed_proof(path: &Path) -> Result<ManagedProof, QualifyError> {
    let p: ManagedProof = read_proof(path, MANAGED_PROOF_SCHEMA)?;
    let reference = evidence(&p.reference, p.steps)?;
    let managed = evidence(&p.run_dir, p.steps)?;
    check_verdict(&reference, &managed, p.first_divergence.as_ref(), p.equal)?;
    check_device(&[&p.reference, &p.run_dir], &p.device)?;
    let i = &p.interruption;
    // The trial's second allocation restored the checkpoint and step the proof names.
    let restore = starts(&p.run_dir)?
        .into_iter()
        .find(|s| s.trial_run_id == 2)
        .ok_or_else(|| failed("the run folder records no second allocation"))?;
    if restore.restored_uuid.as_deref() != Some(i.uuid_at_restore.as_str())
        || restore.restored_step != Some(i.step)
        || restore.allocation != i.restored_allocation
    {
        return Err(failed(format!(
            "the second allocation ({}) restored {:?} at step {:?} but the proof says {} at step \
             {} in {}",
            restore.allocation,
            restore.restored_uuid,
            restore.restored_step,
            i.uuid_at_restore,
            i.step,
            i.restored_allocation
        )));
    }
    if let Some(sent) = i.pause_sent_after_step
        && i.step <= sent
    {
        return Err(failed(format!(
            "the proof says the worker stopped at step {} although the pause was sent after step \
             {sent}'s metric",
            i.step
        )));
    }
    if i.kind == "pause" {
        // A pause restores exactly the durable receipt's checkpoint (consumed at the restore).
        let receipt = p.run_dir.join(format!(
            "consumed-{}-{}",
            i.uuid_at_restore,
            hr_snapshot::RECEIPT_FILE
        ));
        let r: Value = std::fs::read(&receipt)
            .ok()
            .and_then(|b| serde_json::from_slice(&b).ok())
            .ok_or_else(|| failed(format!("no receipt at {}", receipt.display())))?;
        if i.uuid_at_pause.as_deref() != Some(i.uuid_at_restore.as_str())
            || r["uuid"].as_str() != Some(i.uuid_at_restore.as_str())
            || r["step"].as_u64() != Some(i.step)
        {
            return Err(failed(format!(
                "the receipt {r} is not the restored checkpoint {} at step {}",
                i.uuid_at_restore, i.step
            )));
        }
    }
    // The source: the restored checkpoint was written by the proof's binary.
    let storage = p
        .run_dir
        .parent()
        .ok_or_else(|| failed("the run folder has no storage folder above it"))?;
    check_checkpoint(&storage.join(&i.uuid_at_restore), &p.source, i.step)?;
    Ok(p)
}

/// What [`verify_any_proof`] found in a proof that holds.
#[derive(Debug, Clone)]
pub struct ProofVerdict {
    /// What the proof shows, in a line.
    pub what: String,
    /// Whether it says the resumed run equals the uninterrupted one.
    pub equal: bool,
    /// The device it was made on (native and managed proofs).
    pub device: Option<Device>,
}

/// Re-checks a CPU lifecycle, native or managed proof, chosen by its `schema`.
pub fn verify_any_proof(path: &Path) -> Result<ProofVerdict, QualifyError> {
    let schema = std::fs::read(path)
        .ok()
        .and_then(|b| serde_json::from_slice::<Value>(&b).ok())
        .and_then(|v| v["schema"].as_str().map(str::to_owned))
        .unwrap_or_default();
    Ok(match schema.as_str() {
        NATIVE_PROOF_SCHEMA => {
            let p = verify_native_proof(path)?;
            ProofVerdict {
                what: format!(
                    "native: {} steps in each run, stopped after {} and resumed, on {}",
                    p.steps, p.stopped_after, p.device
                ),
                equal: p.equal,
                device: Some(p.device),
            }
        }
        MANAGED_PROOF_SCHEMA => {
            let p = verify_managed_proof(path)?;
            let i = &p.interruption;
            ProofVerdict {
                what: format!(
                    "managed {}: {} steps, {} at step {}, {} restored in {}, on {} under {} \
                     (Determined {})",
                    p.backend,
                    p.steps,
                    i.kind,
                    i.step,
                    i.uuid_at_restore,
                    i.restored_allocation,
                    p.device,
                    p.master_url,
                    p.master_version
                ),
                equal: p.equal,
                device: Some(p.device),
            }
        }
        _ => {
            let p = crate::verify_proof(path)?;
            ProofVerdict {
                what: format!("{} steps per run re-verified", p.resumed.steps.len()),
                equal: p.equal,
                device: None,
            }
        }
    })
}
