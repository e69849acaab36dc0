//! One allocation's training once its run folder is open ([`Opened`]): the model, environment
//! and trainer started (restored or fresh), optimizer steps until a [`Stop`], periodic
//! checkpoints, and the terminal save in the seed's order, ending in an [`Outcome`].

use std::path::Path;
use std::time::{Instant, SystemTime, UNIX_EPOCH};

use burn::backend::Autodiff;
use burn::tensor::backend::Backend;
use hr_bridge::OwnedService;
use hr_core::{CoreContext, SearcherOp, TrialInfo};
use hr_files::RunDir;
use hr_grpo::{NativeState, TaskSampler, Trainer};
use hr_plan::Plan;
use hr_policy::{ChatTokenizer, PolicyRng};
use hr_proof::{AllocationRecord, AllocationStart, Control};
use hr_snapshot::{Budget, Publisher, Restored, RngState, with_rng_preserved};
use serde_json::Value;

use crate::TrainError;
use crate::base::BaseModel;
use crate::completions;
use crate::config::load_policy;
use crate::dev_probe::DevProbe;
use crate::environment::{Factory, environment};
use crate::evidence::{evidence_line, metrics_row, rollout_record};
use crate::faults::{hold_for_preemption, kill_self, parallel_fault};
use crate::payload::{self, Progress};
use crate::ranks::{Handoff, Ranks};
use crate::start;
use crate::tensorboard::EventWriter;

mod finish;

/// The `tracing` target of the one event per training step (fields `step`, `steps` and `last`,
/// true when the run stops after this step; message `step N/M: <summary>`): a binary may render
/// these as a progress bar instead of lines.
pub const PROGRESS_TARGET: &str = "hr_train::progress";

/// The `tracing` target of the one event before the first step of an allocation (fields
/// `step`, the steps already done, and `steps`): a bar can be drawn from the start. Not a line
/// a log needs.
pub const PROGRESS_BEGIN_TARGET: &str = "hr_train::progress_begin";

/// How an allocation ended.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Outcome {
    /// The plan's last step is published and the searcher operation completed.
    Completed {
        /// The last step.
        step: u64,
    },
    /// The searcher's operation (an `adaptive_asha` rung) ended before the plan's last step: its
    /// checkpoint is published and the operation completed; a later allocation continues from
    /// it when the searcher asks for more steps (a promotion).
    OperationDone {
        /// The step saved.
        step: u64,
        /// Its checkpoint UUID.
        uuid: String,
    },
    /// Stopped and resumable: Core asked to stop, or `stop_after_step` was reached. The terminal
    /// checkpoint is published, the receipt written and the preemption acknowledged.
    Stopped {
        /// The step saved.
        step: u64,
        /// Its checkpoint UUID.
        uuid: String,
    },
    /// The persistent deadline or the device budget ran out: a final checkpoint is published and
    /// the run ends before its last step.
    OutOfBudget {
        /// The step saved.
        step: u64,
        /// Its checkpoint UUID.
        uuid: String,
        /// Which limit.
        reason: String,
    },
}

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Stop {
    Done,
    Operation,
    Preempted,
    Requested,
    Deadline,
    DeviceBudget,
}

impl Stop {
    pub(crate) fn name(self) -> &'static str {
        match self {
            Stop::Done => "completed",
            Stop::Operation => "operation completed",
            Stop::Preempted => "preempted",
            Stop::Requested => "stop-after-step",
            Stop::Deadline => "deadline",
            Stop::DeviceBudget => "device-budget",
        }
    }
}

/// Seconds since the Unix epoch, `ahead_s` later than the system's clock says
/// ([`AllocationOptions::clock_ahead_s`]).
fn unix_now(ahead_s: u64) -> u64 {
    SystemTime::now()
        .duration_since(UNIX_EPOCH)
        .map_or(0, |d| d.as_secs())
        .saturating_add(ahead_s)
}

pub(crate) fn append(path: &Path, value: &impl std::fmt::Display) -> Result<(), TrainError> {
    hr_files::append_line(path, &value.to_string()).map_err(Into::into)
}

/// A run folder opened: its checkpoint restored (or none) and the searcher's operation taken.
pub(crate) struct Opened {
    pub(crate) opts: AllocationOptions,
    pub(crate) plan: Plan,
    pub(crate) layout: RunDir,
    pub(crate) info: TrialInfo,
    pub(crate) publisher: Publisher<CoreContext>,
    pub(crate) restored: Option<Restored>,
    pub(crate) op: SearcherOp,
}

/// What one allocation may do: when it stops, its limits, the faults a test injects, and the
/// device it records.
#[derive(Debug, Clone)]
pub struct AllocationOptions {
    /// Stop (a resumable stop, with a terminal save and receipt) after this step.
    pub stop_after_step: Option<u64>,
    /// A deliberate resume bug, for negative controls.
    pub control: Option<Control>,
    /// Wall-clock limit from the run's first start (fixed then, never renewed).
    pub max_wall_seconds: Option<u64>,
    /// Device-seconds the run may use over all its allocations.
    pub device_seconds_budget: Option<u64>,
    /// Fault injection for recovery tests: SIGKILL this process in the middle of the periodic
    /// save of `(trial_run_id, step)`, after the payload and before the seal.
    pub kill_during_save: Option<(i32, u64)>,
    /// Fault injection for pause tests: after the metrics of each `(trial_run_id, step)` listed
    /// are reported, wait (at most ten minutes, `HOLD_LIMIT`) until Core asks this allocation to stop, so a
    /// pause requested on seeing that metric lands at that step however fast steps are.
    pub hold_for_preemption: Vec<(i32, u64)>,
    /// Fault injection for deadline tests: this allocation's clock reads that many seconds
    /// ahead of the system's, so a test reaches a deadline without waiting for it.
    pub clock_ahead_s: u64,
    /// Runs without qualification proofs by explicit choice; recorded with every allocation.
    pub unqualified: bool,
    /// The device this allocation runs on, recorded in its allocation line (proofs name it).
    pub device: hr_proof::Device,
    /// How sampling and back-propagation are laid out on the device (`Policy::with_execution`);
    /// a fixed choice per device kind, since the results' last bits depend on it.
    pub execution: hr_policy::Execution,
}

impl AllocationOptions {
    /// A local `train` run's: a stop or a negative control as asked, the wall-clock limit if
    /// one is given, no device budget, and of the fault injections only the clock's
    /// (`HR_FAULT_CLOCK_AHEAD_S`).
    pub fn local(
        device: hr_proof::Device,
        execution: hr_policy::Execution,
        stop_after_step: Option<u64>,
        control: Option<Control>,
        max_wall_seconds: Option<u64>,
    ) -> Result<Self, TrainError> {
        Ok(Self {
            stop_after_step,
            control,
            max_wall_seconds,
            device_seconds_budget: None,
            kill_during_save: None,
            hold_for_preemption: Vec::new(),
            clock_ahead_s: crate::faults::fault_clock_ahead()?,
            unqualified: false,
            device,
            execution,
        })
    }

    /// A managed trial's: its wall-clock limit and device budget, whether it runs without
    /// proofs, and every fault injection the recovery tests set in its environment
    /// (`HR_FAULT_KILL_AT`, `HR_FAULT_HOLD_AT`, `HR_FAULT_CLOCK_AHEAD_S`).
    pub fn managed(
        device: hr_proof::Device,
        execution: hr_policy::Execution,
        max_wall_seconds: u64,
        device_seconds_budget: u64,
        unqualified: bool,
    ) -> Result<Self, TrainError> {
        Ok(Self {
            stop_after_step: None,
            control: None,
            max_wall_seconds: Some(max_wall_seconds),
            device_seconds_budget: Some(device_seconds_budget),
            kill_during_save: crate::faults::fault_point("HR_FAULT_KILL_AT")?,
            hold_for_preemption: crate::faults::fault_points("HR_FAULT_HOLD_AT")?,
            clock_ahead_s: crate::faults::fault_clock_ahead()?,
            unqualified,
            device,
            execution,
        })
    }
}

/// The policy RNG as `hr-snapshot` sees it: the trainer's own generator, not a copy.
struct TrainerRng<'a>(&'a mut PolicyRng);

impl RngState for TrainerRng<'_> {
    fn save_state(&self) -> Vec<u8> {
        serde_json::to_vec(&self.0.state()).expect("RNG state serialises")
    }

    fn restore_state(&mut self, state: &[u8]) {
        let state = serde_json::from_slice(state).expect("a state save_state wrote");
        *self.0 = PolicyRng::from_state(&state).expect("a state save_state wrote");
    }
}

/// Replaces a file's content atomically (a derived view, rebuilt from the restored snapshot).
fn replace(path: &Path, text: &str) -> Result<(), TrainError> {
    hr_files::write_atomic(path, text.as_bytes()).map_err(Into::into)
}

/// One allocation's training, started.
pub(crate) struct Allocation<'d, B: Backend> {
    plan: Plan,
    layout: RunDir,
    info: TrialInfo,
    publisher: Publisher<CoreContext>,
    op: SearcherOp,
    label: &'d str,
    /// When the allocation started (its device seconds are charged from here).
    started: Instant,
    base: BaseModel,
    trainer: Trainer<Autodiff<B>>,
    sampler: TaskSampler,
    progress: Progress,
    budget: Budget,
    service: Option<OwnedService>,
    env: Factory,
    dev: Option<DevProbe>,
    tensorboard: EventWriter,
    stop_at: u64,
    kill_during_save: Option<(i32, u64)>,
    hold_for_preemption: Vec<(i32, u64)>,
    clock_ahead_s: u64,
    /// The other ranks, told the plan, each step's go or stop, and compared after each step.
    ranks: &'d mut Ranks,
}

impl<'d, B: Backend> Allocation<'d, B> {
    /// Loads the model and the environment, restores or seeds the trainer, rewrites the run's
    /// evidence and metrics to the restored history, opens TensorBoard's file and records the
    /// allocation's start.
    pub(crate) fn start(
        opened: Opened,
        device: &B::Device,
        label: &'d str,
        started: Instant,
        ranks: &'d mut Ranks,
    ) -> Result<Self, TrainError> {
        let Opened {
            opts,
            plan,
            layout,
            info,
            publisher,
            restored,
            op,
        } = opened;
        let model = &plan.model.path;
        let base = BaseModel::of(model)?;
        let tokenizer = ChatTokenizer::from_file(&model.join("tokenizer.json"))?;
        let policy = load_policy::<Autodiff<B>>(&plan, device, opts.execution)?;
        let (task_list, service, mut env) = environment(&plan, &layout.service_log())?;
        // A dataset's rows are opened here once: a prompt past the model's context is refused
        // before the first step, not when a late step draws it.
        if matches!(plan.environment, hr_plan::Environment::Dataset { .. }) {
            hr_grpo::check_prompts(
                policy.config(),
                &tokenizer,
                &crate::grpo_config(&plan).rollout,
                &task_list,
                env.as_mut(),
            )
            .map_err(|e| TrainError::Refused(e.to_string()))?;
        }
        let (trainer, sampler, progress, budget) = match &restored {
            Some(r) => start::resume(
                policy,
                tokenizer,
                &plan,
                task_list,
                r,
                &base,
                opts.control,
                label,
            )?,
            None => start::fresh(
                policy,
                tokenizer,
                &plan,
                task_list,
                device,
                Budget::start(
                    unix_now(opts.clock_ahead_s),
                    opts.max_wall_seconds.unwrap_or(u64::MAX),
                    opts.device_seconds_budget.unwrap_or(u64::MAX),
                ),
            )?,
        };
        let trainer = trainer.with_fault(parallel_fault()?);
        // The DEV reward at the steps `evaluate` adopts, in the metrics rows and, on a
        // Determined master, as validation metrics.
        let dev = DevProbe::of(&plan)?;
        replace(&layout.evidence(), &progress.evidence)?;
        replace(&layout.metrics(), &progress.metrics)?;
        completions::keep_through(&layout.completions(), trainer.step_index())?;
        let tensorboard_dir = match &info.cluster_id {
            // Where Determined's own TensorBoard manager syncs a trial's event files (its
            // `get_sync_path` under the checkpoint storage), so `det tensorboard` shows them.
            Some(cluster) => publisher
                .core()
                .storage_dir()
                .join(cluster)
                .join("tensorboard/experiment")
                .join(info.experiment_id.to_string())
                .join("trial")
                .join(info.trial_id.to_string()),
            None => layout.tensorboard(),
        };
        let (mut tensorboard, had_events) = EventWriter::create(&tensorboard_dir)?;
        if !had_events {
            // A fresh folder (a resume into a new one): the restored history first.
            for line in progress.metrics.lines() {
                tensorboard.row(&serde_json::from_str(line).unwrap_or_default())?;
            }
        }
        let device = opts.device;
        // The workers start from the chief's plan and state, on its kind of device, before the
        // allocation is recorded.
        if ranks.count() > 1 {
            // A worker reads HR_FAULT_KILL_RANK; the chief refuses a malformed one first.
            crate::faults::fault_point("HR_FAULT_KILL_RANK")?;
            let restored_state = match &restored {
                Some(_) => Some(trainer.capture(&plan.model.peft_base())?.files),
                None => None,
            };
            ranks.hand_off(Some(&Handoff {
                plan: serde_json::to_string(&plan).expect("a plan serialises"),
                state: restored_state,
                cursor: sampler.cursor(),
                service_log: layout.service_log(),
                trial_run_id: info.trial_run_id,
            }))?;
            ranks.check_devices(&device)?;
        }
        let limited = |v: u64| (v != u64::MAX).then_some(v);
        append(
            &layout.allocations(),
            &AllocationRecord::Started(AllocationStart {
                allocation: info.allocation_id.clone(),
                trial_run_id: info.trial_run_id,
                pid: std::process::id(),
                restored_uuid: restored.as_ref().map(|r| r.uuid.clone()),
                restored_step: restored.as_ref().map(|r| r.snapshot.manifest.step),
                deadline_unix_s: limited(budget.deadline_unix_s),
                deadline_remaining_s: limited(budget.deadline_unix_s)
                    .map(|d| d.saturating_sub(unix_now(opts.clock_ahead_s))),
                device_seconds_used: budget.gpu_seconds_used,
                device_seconds_limit: limited(budget.gpu_seconds_limit),
                unqualified: opts.unqualified,
                device: Some(device),
                ranks: (ranks.count() > 1).then_some(ranks.count()),
            }),
        )?;
        let stop_at = opts
            .stop_after_step
            .map_or(plan.steps, |k| k.min(plan.steps));
        Ok(Self {
            plan,
            layout,
            info,
            publisher,
            op,
            label,
            started,
            base,
            trainer,
            sampler,
            progress,
            budget,
            service,
            env,
            dev,
            tensorboard,
            stop_at,
            kill_during_save: opts.kill_during_save,
            hold_for_preemption: opts.hold_for_preemption,
            clock_ahead_s: opts.clock_ahead_s,
            ranks,
        })
    }

    /// The budget with this allocation's charge so far, in whole seconds rounded up, for each
    /// rank's device, added to what earlier allocations used.
    fn charged(&self) -> Budget {
        let mut b = self.budget;
        let seconds = self.started.elapsed().as_secs_f64().ceil() as u64;
        b.charge(seconds.saturating_mul(self.ranks.count() as u64));
        b
    }

    /// Why the allocation stops after `step`, if it does; `preempt`: whether a stop was asked
    /// for before the step's metric was reported.
    fn stop_reason(&self, step: u64, preempt: bool) -> Option<Stop> {
        let b = self.charged();
        if step >= self.plan.steps {
            Some(Stop::Done)
        } else if preempt {
            Some(Stop::Preempted)
        } else if step >= self.op.length {
            Some(Stop::Operation)
        } else if step >= self.stop_at {
            Some(Stop::Requested)
        } else if unix_now(self.clock_ahead_s) >= b.deadline_unix_s {
            Some(Stop::Deadline)
        } else if b.gpu_seconds_used >= b.gpu_seconds_limit {
            Some(Stop::DeviceBudget)
        } else {
            None
        }
    }

    /// Optimizer steps until a stop: each one's evidence and metrics written and reported, a
    /// periodic checkpoint when the schedule says so and the run goes on.
    pub(crate) fn train(&mut self) -> Result<Stop, TrainError> {
        let done = self.trainer.step_index();
        let mut reason = self.stop_reason(done, self.publisher.core().should_preempt());
        if reason.is_none() {
            tracing::info!(
                target: PROGRESS_BEGIN_TARGET,
                step = done,
                steps = self.plan.steps,
                "training from step {done} of {}",
                self.plan.steps
            );
        }
        let mut go = self.ranks.decide(reason.is_none())?;
        while go {
            reason = self.step()?;
            go = self.ranks.decide(reason.is_none())?;
        }
        Ok(reason.unwrap_or(Stop::Done))
    }

    /// One optimizer step; returns why the allocation stops after it, if it does.
    fn step(&mut self) -> Result<Option<Stop>, TrainError> {
        let step_started = Instant::now();
        let plan = &self.plan;
        let batch = self.sampler.next_batch(plan.grpo.tasks_per_step);
        let mut report =
            self.trainer
                .step_with(&batch, self.env.as_mut(), self.ranks.exchange())?;
        report
            .metrics
            .insert("epoch".to_owned(), self.sampler.epochs());
        let step = report.step + 1;
        let state = self.trainer.capture(&plan.model.peft_base())?;
        self.ranks.check_same(step, &state)?;
        self.progress.cursor = self.sampler.cursor();
        let dev = match &self.dev {
            Some(probe) => probe.metrics(step, &self.trainer, self.env.as_mut())?,
            None => None,
        };
        let mut row = metrics_row(&report);
        if let (Some(row), Some(Value::Object(dev))) = (row.as_object_mut(), &dev) {
            row.extend(dev.clone());
        }
        let line = evidence_line(&report, &state, self.progress.cursor);
        append(&self.layout.metrics(), &row)?;
        self.tensorboard.row(&row)?;
        let written = completions::records(&report, self.trainer.tokenizer())?;
        completions::append(&self.layout.completions(), &written)?;
        self.tensorboard
            .text(step, "completions", &completions::table(&written))?;
        append(&self.layout.evidence(), &line)?;
        self.progress.metrics.push_str(&format!("{row}\n"));
        self.progress.evidence.push_str(&format!("{line}\n"));
        self.progress.recent.push_back(rollout_record(&report));
        while self.progress.recent.len() > plan.checkpoints.raw_rollout_steps {
            self.progress.recent.pop_front();
        }
        // Core gets the DEV values as validation metrics only.
        let mut core_metrics = row;
        if let Some(m) = core_metrics.as_object_mut() {
            m.remove("step");
            if let Some(Value::Object(dev)) = &dev {
                m.retain(|k, _| !dev.contains_key(k));
            }
        }
        let publisher = &mut self.publisher;
        // A stop asked for once this step's metric is visible is honoured after the next step,
        // never this one: whoever watches the metrics (`qualify managed`, a user's pause after
        // step k) gets the same recovery point however the report and the check interleave.
        let mut preempt = publisher.core().should_preempt();
        publisher.report_metrics(&mut TrainerRng(self.trainer.rng_mut()), step, core_metrics)?;
        with_rng_preserved(&mut TrainerRng(self.trainer.rng_mut()), |_| {
            publisher.core().report_progress(step as f64)
        })?;
        if let Some(metrics) = dev {
            with_rng_preserved(&mut TrainerRng(self.trainer.rng_mut()), |_| {
                publisher.core().report_validation_metrics(step, metrics)
            })?;
        }
        if self
            .hold_for_preemption
            .contains(&(self.info.trial_run_id, step))
        {
            hold_for_preemption(self.publisher.core(), step);
            preempt = self.publisher.core().should_preempt();
        }
        let reason = self.stop_reason(step, preempt);
        let plan = &self.plan;
        let summary = format!(
            "reward {:.3}, loss {:.4}, grad_norm {:.3}, {:.1} s{}",
            report.metrics["reward"],
            report.metrics["loss"],
            report.metrics["grad_norm"],
            step_started.elapsed().as_secs_f64(),
            reason.map_or(String::new(), |r| format!(" ({})", r.name())),
        );
        tracing::info!(
            target: PROGRESS_TARGET,
            step,
            steps = plan.steps,
            last = reason.is_some(),
            "step {step}/{}: {summary}",
            plan.steps
        );
        if reason.is_none() && step % plan.checkpoints.every == 0 {
            self.save_periodic(step, &state)?;
        }
        Ok(reason)
    }

    /// The periodic checkpoint of `step` (its state captured after the step).
    fn save_periodic(&mut self, step: u64, state: &NativeState) -> Result<(), TrainError> {
        let b = self.charged();
        let kill = self.kill_during_save == Some((self.info.trial_run_id, step));
        let (publisher, progress, base) = (&mut self.publisher, &self.progress, &self.base);
        let published = with_rng_preserved(&mut TrainerRng(self.trainer.rng_mut()), |_| {
            publisher.save_periodic(step, |w| {
                payload::write(w, state, progress, &b, base)?;
                if kill {
                    kill_self("during the save");
                }
                Ok(())
            })
        })?;
        tracing::info!(
            "{}: checkpoint step {step} -> {}",
            self.label,
            published.uuid
        );
        self.prune();
        Ok(())
    }

    /// Deletes the local run's checkpoints its plan no longer keeps: all but the latest
    /// `checkpoints.keep_last` and those `evaluation.checkpoints` adopts (a managed run's are
    /// the master's). A clean-up that fails is a warning, never a failed run: the next one
    /// finishes it.
    fn prune(&self) {
        let protected = self
            .plan
            .evaluation
            .as_ref()
            .map_or(&[][..], |e| &e.checkpoints[..]);
        let keep = self.plan.checkpoints.keep_last;
        match self.publisher.core().prune_local(keep, protected) {
            Ok(deleted) => {
                for (uuid, step) in deleted {
                    tracing::info!(
                        "{}: deleted checkpoint step {step} ({uuid}): checkpoints.keep_last is \
                         {keep}",
                        self.label
                    );
                }
            }
            Err(e) => tracing::warn!("{}: deleting old checkpoints: {e}", self.label),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn draws(rng: &mut PolicyRng) -> [u64; 3] {
        [rng.next_u64(), rng.next_u64(), rng.next_u64()]
    }

    #[test]
    fn the_real_rng_is_preserved_around_a_call_that_draws_from_it() {
        let mut reference = PolicyRng::from_seed(9);
        let mut rng = PolicyRng::from_seed(9);
        // A Core call that (wrongly) consumes policy randomness does not shift the stream.
        with_rng_preserved(&mut TrainerRng(&mut rng), |r| {
            r.0.next_u64();
            r.0.next_u64();
        });
        assert_eq!(draws(&mut rng), draws(&mut reference));

        // Negative control: without the guard the same call shifts every later draw.
        let mut reference = PolicyRng::from_seed(9);
        let mut unguarded = PolicyRng::from_seed(9);
        unguarded.next_u64();
        unguarded.next_u64();
        assert_ne!(draws(&mut unguarded), draws(&mut reference));
    }
}
