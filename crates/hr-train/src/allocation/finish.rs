//! An allocation's end: the terminal save in the seed's order (native cleanup, service
//! shutdown, the final manifest published once, then for a stop the durable receipt and the
//! ack), the finished run's adapter exported, the searcher's operation completed and the
//! allocation's end recorded.

use std::path::{Path, PathBuf};

use burn::tensor::backend::Backend;
use hr_files::{IoResultExt, RunDir};
use hr_plan::Plan;
use hr_proof::{AllocationEnd, AllocationRecord};
use hr_snapshot::{TerminalKind, with_rng_preserved};
use serde_json::Value;

use super::{Allocation, Outcome, Stop, TrainerRng, append};
use crate::TrainError;
use crate::payload;

impl<B: Backend> Allocation<'_, B> {
    /// The terminal save: native cleanup, service shutdown, the final manifest published once
    /// (or the selected checkpoint reused), then for a stop the durable receipt and the ack; a
    /// completed run exports its adapter and completes the searcher's operation. The
    /// allocation's end is recorded.
    pub(crate) fn finish(mut self, reason: Stop) -> Result<Outcome, TrainError> {
        let plan = &self.plan;
        let step = self.trainer.step_index();
        let state = self.trainer.capture(&plan.model.peft_base())?;
        let budget_now = self.charged();
        let kind = match reason {
            Stop::Preempted | Stop::Requested => TerminalKind::Preemption,
            Stop::Done | Stop::Operation | Stop::Deadline | Stop::DeviceBudget => {
                TerminalKind::Final
            }
        };
        let local_files = [self.layout.evidence(), self.layout.metrics()];
        let (publisher, progress, base, service) = (
            &mut self.publisher,
            &self.progress,
            &self.base,
            &mut self.service,
        );
        let published = with_rng_preserved(&mut TrainerRng(self.trainer.rng_mut()), |_| {
            let terminal = publisher
                .terminal(kind, step)?
                .native_cleanup(|| sync(&local_files))?
                .stop_services(|| match service.take() {
                    Some(s) => s.shutdown().map_err(|e| e.to_string()),
                    None => Ok(()),
                })?
                .publish(|w| payload::write(w, &state, progress, &budget_now, base))?;
            match kind {
                TerminalKind::Preemption => {
                    let (published, receipt) = terminal.write_receipt()?;
                    publisher.acknowledge_preemption(receipt)?;
                    Ok::<_, TrainError>(published)
                }
                TerminalKind::Final => Ok(terminal.finish()?),
            }
        })?;
        self.prune();
        if reason == Stop::Done {
            export_adapter(self.layout.root(), plan, self.trainer.adapters())?;
        }
        if matches!(reason, Stop::Done | Stop::Operation) {
            let (core, op) = (self.publisher.core(), self.op);
            with_rng_preserved(&mut TrainerRng(self.trainer.rng_mut()), |_| {
                core.complete_operation(op, last_loss(&self.progress.metrics))
            })?;
        }
        append(
            &self.layout.allocations(),
            &AllocationRecord::Ended(AllocationEnd {
                allocation: self.info.allocation_id.clone(),
                ended: reason.name().to_owned(),
                step,
                uuid: published.uuid.clone(),
                device_seconds_used: budget_now.gpu_seconds_used,
            }),
        )?;
        tracing::info!(
            "{}: {} at step {step}, checkpoint {}",
            self.label,
            reason.name(),
            published.uuid
        );
        Ok(match reason {
            Stop::Done => Outcome::Completed { step },
            Stop::Operation => Outcome::OperationDone {
                step,
                uuid: published.uuid,
            },
            Stop::Preempted | Stop::Requested => Outcome::Stopped {
                step,
                uuid: published.uuid,
            },
            Stop::Deadline | Stop::DeviceBudget => Outcome::OutOfBudget {
                step,
                uuid: published.uuid,
                reason: reason.name().to_owned(),
            },
        })
    }
}

fn sync(paths: &[PathBuf]) -> Result<(), String> {
    for p in paths {
        std::fs::File::open(p)
            .and_then(|f| f.sync_all())
            .map_err(|e| format!("sync {}: {e}", p.display()))?;
    }
    Ok(())
}

/// The loss of the last metrics row (the searcher's metric).
fn last_loss(metrics: &str) -> f64 {
    metrics
        .lines()
        .last()
        .and_then(|l| serde_json::from_str::<Value>(l).ok())
        .and_then(|v| v["loss"].as_f64())
        .unwrap_or(f64::NAN)
}

/// The finished run's adapter outside the snapshots: `<run>/adapter/`, PEFT's two files
/// with `base_model_name_or_path` naming the plan's Hub id or model folder (as every
/// checkpoint's do), so `PeftModel.from_pretrained` and `AutoPeftModel` load it as they load
/// any adapter.
fn export_adapter<B: burn::tensor::backend::AutodiffBackend>(
    run_dir: &Path,
    plan: &Plan,
    adapters: &hr_policy::Adapters<B>,
) -> Result<(), TrainError> {
    let files = hr_policy::adapter_files(adapters, &plan.model.peft_base())?;
    let staging = run_dir.join(".adapter.partial");
    let dir = RunDir::new(run_dir).adapter();
    let _ = std::fs::remove_dir_all(&staging);
    std::fs::create_dir_all(&staging).at("create", &staging)?;
    for (name, bytes) in [
        (hr_policy::ADAPTER_CONFIG, &files.config),
        (hr_policy::ADAPTER_WEIGHTS, &files.weights),
    ] {
        let path = staging.join(name);
        std::fs::write(&path, bytes).at("write", &path)?;
    }
    let _ = std::fs::remove_dir_all(&dir);
    std::fs::rename(&staging, &dir)
        .at("rename", &dir)
        .map_err(Into::into)
}
