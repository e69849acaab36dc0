//! The publication state machine. Periodic saves go through [`Publisher::save_periodic`];
//! terminal saves through [`Publisher::terminal`], whose typestate (`Terminal` → `CleanedUp` →
//! `ServicesStopped` → `TerminalPublished`) makes the seed's order the only one that compiles:
//! native cleanup, owned-service shutdown, the final manifest and its one publication, then (for
//! preemption) the durable receipt, whose token alone can acknowledge.

use hr_files::IoResultExt;
use std::path::PathBuf;

use hr_seal::{
    Expectations, KeyPair, ParentRef, RunIdentity, SnapshotWriter, SourceBinding, Trust, Verified,
    verify,
};
use serde_json::{Value, json};

use crate::{
    CoreCheckpoints, DurableReceipt, Receipt, RngState, SnapshotError, with_rng_preserved,
};

/// Who is publishing: the run's stable identity and this allocation's writer id.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Binding {
    /// Stable run id.
    pub run_id: String,
    /// This allocation's id (the fencing token in every manifest).
    pub writer: String,
    /// The source binding.
    pub source: SourceBinding,
    /// sha256 of the run's config.
    pub config_sha256: String,
}

/// A published checkpoint.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Published {
    /// Its step.
    pub step: u64,
    /// Its Determined UUID.
    pub uuid: String,
    /// sha256 of its manifest.
    pub manifest_sha256: String,
}

/// A verified, scheduler-selected checkpoint to restore from.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Restored {
    /// Its UUID.
    pub uuid: String,
    /// The verified snapshot.
    pub snapshot: Verified,
}

/// Why a terminal save happens.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum TerminalKind {
    /// The master asked the allocation to stop.
    Preemption,
    /// The run reached its last step.
    Final,
}

/// Publishes one run's snapshots through Core.
pub struct Publisher<C> {
    core: C,
    binding: Binding,
    key: Option<KeyPair>,
    trust: Trust,
    run_dir: PathBuf,
    last: Option<Published>,
    selected: Option<Published>,
    check_source: bool,
}

fn hook_err(stage: &'static str) -> impl FnOnce(String) -> SnapshotError {
    move |message| SnapshotError::Hook { stage, message }
}

fn core_err<E: std::error::Error + Send + Sync + 'static>(e: E) -> SnapshotError {
    SnapshotError::Core(Box::new(e))
}

impl<C: CoreCheckpoints> Publisher<C> {
    /// A publisher for `binding`; `run_dir` is the run's local folder (receipts, local records).
    pub fn new(
        core: C,
        binding: Binding,
        key: Option<KeyPair>,
        trust: Trust,
        run_dir: PathBuf,
    ) -> Self {
        Self {
            core,
            binding,
            key,
            trust,
            run_dir,
            last: None,
            selected: None,
            check_source: true,
        }
    }

    /// Accepts checkpoints written by another build at restore (their commit or binary digest
    /// differ): a deliberate choice, after which continuation is no longer promised to be
    /// bit-identical. New manifests still carry this build's binding.
    pub fn accept_source_change(&mut self) {
        self.check_source = false;
    }

    /// The Core handle.
    pub fn core(&self) -> &C {
        &self.core
    }

    /// The last published (or restored) checkpoint.
    pub fn last(&self) -> Option<&Published> {
        self.last.as_ref()
    }

    fn expectations(&self, step: Option<u64>) -> Expectations {
        Expectations {
            trust: self.trust.clone(),
            run_id: Some(self.binding.run_id.clone()),
            config_sha256: Some(self.binding.config_sha256.clone()),
            source: self.check_source.then(|| self.binding.source.clone()),
            step,
        }
    }

    /// Restores from the scheduler-selected checkpoint: a durable receipt from the previous
    /// allocation must name the same UUID; seal, source, config and step are verified before
    /// anything is returned for adoption. `None` when the trial starts fresh.
    pub fn restore(&mut self) -> Result<Option<Restored>, SnapshotError> {
        let Some(selected) = self.core.latest_checkpoint() else {
            return Ok(None);
        };
        let receipt = Receipt::read(&self.run_dir)?;
        if let Some(r) = &receipt
            && r.uuid != selected.uuid
        {
            return Err(SnapshotError::ReceiptMismatch {
                receipt: r.uuid.clone(),
                selected: selected.uuid,
            });
        }
        let dir = self.core.checkpoint_dir(&selected.uuid);
        let snapshot = verify(&dir, &self.expectations(Some(selected.steps_completed)))?;
        if let Some(r) = &receipt {
            // Fencing: the checkpoint must be the very manifest the receipt's allocation wrote.
            for (field, expected, actual) in [
                (
                    "manifest_sha256",
                    &r.manifest_sha256,
                    &snapshot.manifest_sha256,
                ),
                ("writer", &r.allocation, &snapshot.manifest.run.writer),
            ] {
                if expected != actual {
                    return Err(SnapshotError::ReceiptContentMismatch {
                        uuid: selected.uuid,
                        field,
                        expected: expected.clone(),
                        actual: actual.clone(),
                    });
                }
            }
        }
        if receipt.is_some() {
            // The receipt has done its job; keep it, under a name that is never checked again.
            let from = self.run_dir.join(crate::RECEIPT_FILE);
            let to = self.run_dir.join(format!(
                "consumed-{}-{}",
                selected.uuid,
                crate::RECEIPT_FILE
            ));
            std::fs::rename(&from, &to).at("rename", &from)?;
        }
        let published = Published {
            step: snapshot.manifest.step,
            uuid: selected.uuid.clone(),
            manifest_sha256: snapshot.manifest_sha256.clone(),
        };
        self.last = Some(published.clone());
        self.selected = Some(published);
        Ok(Some(Restored {
            uuid: selected.uuid,
            snapshot,
        }))
    }

    fn guard(&self, step: u64) -> Result<(), SnapshotError> {
        match &self.last {
            Some(last) if step <= last.step => Err(SnapshotError::StepNotIncreasing {
                step,
                last: last.step,
            }),
            _ => Ok(()),
        }
    }

    fn write_and_publish(
        &mut self,
        step: u64,
        write: impl FnOnce(&mut SnapshotWriter) -> Result<(), String>,
    ) -> Result<Published, SnapshotError> {
        let (uuid, dir) = self.core.new_checkpoint().map_err(core_err)?;
        let run = RunIdentity {
            run_id: self.binding.run_id.clone(),
            writer: self.binding.writer.clone(),
        };
        let mut writer = SnapshotWriter::in_place(
            &dir,
            run,
            step,
            self.binding.source.clone(),
            self.binding.config_sha256.clone(),
        );
        if let Some(last) = &self.last {
            writer.parent(ParentRef {
                step: last.step,
                manifest_sha256: last.manifest_sha256.clone(),
                storage_id: Some(last.uuid.clone()),
            });
        }
        write(&mut writer).map_err(hook_err("payload"))?;
        let sealed = writer.seal(self.key.as_ref())?;
        let manifest_sha256 = sealed.manifest_sha256.clone();
        sealed.commit()?;
        let metadata = json!({
            "steps_completed": step,
            "manifest_sha256": manifest_sha256,
            "run_id": self.binding.run_id,
            "writer": self.binding.writer,
        });
        self.core
            .report_checkpoint(&uuid, step, metadata)
            .map_err(core_err)?;
        let published = Published {
            step,
            uuid,
            manifest_sha256,
        };
        self.last = Some(published.clone());
        Ok(published)
    }

    /// A periodic save: refused before any UUID exists unless the step increases; then written,
    /// sealed, committed, and only then reported.
    pub fn save_periodic(
        &mut self,
        step: u64,
        write: impl FnOnce(&mut SnapshotWriter) -> Result<(), String>,
    ) -> Result<Published, SnapshotError> {
        self.guard(step)?;
        self.write_and_publish(step, write)
    }

    /// Reports metrics with the policy RNG preserved around the call.
    pub fn report_metrics(
        &mut self,
        rng: &mut dyn RngState,
        step: u64,
        metrics: Value,
    ) -> Result<(), SnapshotError> {
        let core = &mut self.core;
        with_rng_preserved(rng, |_| core.report_metrics(step, metrics)).map_err(core_err)
    }

    /// Starts a terminal (preemption or final) save at `step`. When the scheduler-selected
    /// checkpoint restored at start is already at `step`, it is reused: nothing is published
    /// again. Otherwise the step must increase (checked before any UUID exists).
    pub fn terminal(
        &mut self,
        kind: TerminalKind,
        step: u64,
    ) -> Result<Terminal<'_, C>, SnapshotError> {
        let reuse = match (&self.selected, &self.last) {
            (Some(sel), Some(last)) if sel.step == step && last == sel => Some(sel.clone()),
            _ => None,
        };
        if reuse.is_none() {
            self.guard(step)?;
        }
        Ok(Terminal {
            publisher: self,
            kind,
            step,
            reuse,
        })
    }

    /// Acknowledges preemption; only a durable receipt can.
    pub fn acknowledge_preemption(
        &mut self,
        receipt: DurableReceipt,
    ) -> Result<Receipt, SnapshotError> {
        self.core.acknowledge_preemption().map_err(core_err)?;
        Ok(receipt.receipt)
    }

    fn record_locally(&self, record: &Value) -> Result<(), SnapshotError> {
        std::fs::create_dir_all(&self.run_dir).at("create", &self.run_dir)?;
        hr_files::append_line(
            &hr_files::RunDir::new(&self.run_dir).local_records(),
            &record.to_string(),
        )
        .map_err(Into::into)
    }
}

/// A terminal save, before native cleanup.
pub struct Terminal<'p, C> {
    publisher: &'p mut Publisher<C>,
    kind: TerminalKind,
    step: u64,
    reuse: Option<Published>,
}

/// Native state cleaned up (trainer flushed, buffers released).
pub struct CleanedUp<'p, C>(Terminal<'p, C>);

/// Owned services shut down.
pub struct ServicesStopped<'p, C>(Terminal<'p, C>);

/// The terminal checkpoint is published (or the selected one reused).
pub struct TerminalPublished<'p, C> {
    terminal: Terminal<'p, C>,
    published: Published,
}

impl<'p, C: CoreCheckpoints> Terminal<'p, C> {
    /// Runs the native cleanup.
    pub fn native_cleanup(
        self,
        f: impl FnOnce() -> Result<(), String>,
    ) -> Result<CleanedUp<'p, C>, SnapshotError> {
        f().map_err(hook_err("native cleanup"))?;
        Ok(CleanedUp(self))
    }
}

impl<'p, C: CoreCheckpoints> CleanedUp<'p, C> {
    /// Shuts down the owned environment services.
    pub fn stop_services(
        self,
        f: impl FnOnce() -> Result<(), String>,
    ) -> Result<ServicesStopped<'p, C>, SnapshotError> {
        f().map_err(hook_err("service shutdown"))?;
        Ok(ServicesStopped(self.0))
    }
}

impl<'p, C: CoreCheckpoints> ServicesStopped<'p, C> {
    /// Writes the final manifest and publishes it once, or validates and reuses the selected
    /// terminal checkpoint (recording that locally only).
    pub fn publish(
        self,
        write: impl FnOnce(&mut SnapshotWriter) -> Result<(), String>,
    ) -> Result<TerminalPublished<'p, C>, SnapshotError> {
        let t = self.0;
        let published = match &t.reuse {
            Some(selected) => {
                let dir = t.publisher.core.checkpoint_dir(&selected.uuid);
                let v = verify(&dir, &t.publisher.expectations(Some(t.step)))?;
                if v.manifest_sha256 != selected.manifest_sha256 {
                    return Err(hr_seal::SealError::ManifestDigestMismatch {
                        expected: selected.manifest_sha256.clone(),
                        actual: v.manifest_sha256,
                    }
                    .into());
                }
                t.publisher.record_locally(&json!({
                    "event": "terminal-checkpoint-reused",
                    "step": t.step,
                    "uuid": selected.uuid,
                    "manifest_sha256": selected.manifest_sha256,
                    "writer": t.publisher.binding.writer,
                }))?;
                selected.clone()
            }
            None => t.publisher.write_and_publish(t.step, write)?,
        };
        Ok(TerminalPublished {
            terminal: t,
            published,
        })
    }
}

impl<C: CoreCheckpoints> TerminalPublished<'_, C> {
    /// What was published.
    pub fn published(&self) -> &Published {
        &self.published
    }

    /// Preemption: writes the `preempted_at_checkpoint` receipt durably; the returned token is
    /// what [`Publisher::acknowledge_preemption`] takes.
    pub fn write_receipt(self) -> Result<(Published, DurableReceipt), SnapshotError> {
        if self.terminal.kind != TerminalKind::Preemption {
            return Err(SnapshotError::Hook {
                stage: "receipt",
                message: "only a preemption save writes a receipt".into(),
            });
        }
        let receipt = Receipt {
            step: self.published.step,
            uuid: self.published.uuid.clone(),
            manifest_sha256: self.published.manifest_sha256.clone(),
            allocation: self.terminal.publisher.binding.writer.clone(),
        }
        .write_durable(&self.terminal.publisher.run_dir)?;
        Ok((self.published, receipt))
    }

    /// Final save: done.
    pub fn finish(self) -> Result<Published, SnapshotError> {
        if self.terminal.kind != TerminalKind::Final {
            return Err(SnapshotError::Hook {
                stage: "finish",
                message: "a preemption save must write its receipt and acknowledge".into(),
            });
        }
        Ok(self.published)
    }
}
