//! The run loop: open the run folder (restore, or start fresh), then steps until the plan ends,
//! Core asks the allocation to stop, `stop_after_step` is reached, or the deadline or device
//! budget runs out; then one terminal save in the seed's order ([`crate::allocation`]).

use std::path::PathBuf;
use std::time::Instant;

use burn::tensor::backend::Backend;
use hr_core::CoreContext;
use hr_files::{IoResultExt, RunDir};
use hr_plan::Plan;
use hr_proof::{AllocationRecord, RestoreRefused};
use hr_seal::{KeyPair, SourceBinding, Trust};
use hr_snapshot::{Binding, Publisher};

use crate::TrainError;
use crate::allocation::{Allocation, AllocationOptions, Opened, Outcome, append};
use crate::ranks::Ranks;

/// What to run.
#[derive(Debug, Clone)]
pub struct RunOptions {
    /// The plan.
    pub plan: Plan,
    /// The run folder that outlives allocations: `metrics.jsonl`, `evidence.jsonl` (rewritten
    /// from the restored snapshot at each start, then appended), `allocations.jsonl`,
    /// `service.log`, the preemption receipt.
    pub run_dir: PathBuf,
    /// The run's identity in every manifest; restore refuses any other.
    pub run_id: String,
    /// This build's source binding, sealed in every manifest and required at restore.
    pub source: SourceBinding,
    /// Restore checkpoints written by another build (no longer promised bit-identical).
    pub accept_source_change: bool,
    /// Signs every seal with this key; digest-only seals without one.
    pub signing_key: Option<KeyPair>,
    /// Which seals a restore accepts (with keys: only seals signed by one of them).
    pub trust: Trust,
    /// What this allocation may do: its stop, limits, faults, and device.
    pub allocation: AllocationOptions,
}

/// The run id a Determined trial's run seals into every checkpoint.
pub fn managed_run_id(plan_name: &str, experiment: i32, trial: i32) -> String {
    format!("{plan_name}@det:{experiment}/{trial}")
}

/// Runs the plan in this allocation on `core` (local or a trial's), on backend `B`; `label`
/// names the device in messages. Four phases: `open` (the run folder, the verified restore,
/// the searcher's operation), `Allocation::start` (model, environment, trainer, files, the
/// allocation's record), `Allocation::train` (steps until a stop) and `Allocation::finish`
/// (the terminal save in the seed's order).
pub fn run<B: Backend>(
    opts: RunOptions,
    core: CoreContext,
    device: &B::Device,
    label: &str,
) -> Result<Outcome, TrainError> {
    run_ranked::<B>(opts, core, device, label, &mut Ranks::alone())
}

/// [`run`] as the chief of `ranks` (rank 0 of a plan's `parallel.shards` spread over several
/// devices): the workers ([`crate::work`]) get the plan and the state it starts from, step their
/// shards with it, and stop when it stops; only the chief talks to Core and writes the run's
/// files and checkpoints, and the budget is charged for every rank's device.
pub fn run_ranked<B: Backend>(
    opts: RunOptions,
    core: CoreContext,
    device: &B::Device,
    label: &str,
    ranks: &mut Ranks,
) -> Result<Outcome, TrainError> {
    let started = Instant::now();
    match open(opts, core)? {
        Opening::Done(outcome) => {
            ranks.hand_off(None)?;
            Ok(outcome)
        }
        Opening::Run(opened) => {
            let mut allocation = Allocation::<B>::start(*opened, device, label, started, ranks)?;
            let reason = allocation.train()?;
            allocation.finish(reason)
        }
    }
}

/// What [`open`] found.
enum Opening {
    /// Nothing left to do: the searcher has no operation.
    Done(Outcome),
    /// An operation to run.
    Run(Box<Opened>),
}

/// The run folder and its plan copy, the publisher, and everything verified before anything
/// is adopted or started: a refused restore is recorded in `allocations.jsonl`.
fn open(opts: RunOptions, core: CoreContext) -> Result<Opening, TrainError> {
    let RunOptions {
        plan,
        run_dir,
        run_id,
        source,
        accept_source_change,
        signing_key,
        trust,
        allocation,
    } = opts;
    std::fs::create_dir_all(&run_dir).at("create", &run_dir)?;
    // The run's plan, as `evaluate` reads it later (written once; every checkpoint is bound to
    // its digest, so a changed copy cannot adopt them).
    let layout = RunDir::new(&run_dir);
    let plan_copy = layout.plan();
    if !plan_copy.exists() {
        let text = serde_json::to_vec_pretty(&plan).expect("a plan serialises");
        std::fs::write(&plan_copy, text).at("write", &plan_copy)?;
    }
    let info = core.info().clone();
    let binding = Binding {
        run_id,
        writer: info.allocation_id.clone(),
        source,
        config_sha256: plan.sha256(),
    };
    let mut publisher = Publisher::new(core, binding, signing_key, trust, run_dir);
    if accept_source_change {
        publisher.accept_source_change();
    }
    let restored = match publisher.restore() {
        Ok(r) => r,
        Err(e) => {
            append(
                &layout.allocations(),
                &AllocationRecord::Refused(RestoreRefused {
                    allocation: info.allocation_id.clone(),
                    trial_run_id: info.trial_run_id,
                    selected_uuid: info.latest_checkpoint.clone(),
                    outcome: format!("refused: {e}"),
                }),
            )?;
            return Err(TrainError::RestoreRefused(e));
        }
    };
    let Some(op) = publisher.core().searcher_operation()? else {
        let step = restored.as_ref().map_or(0, |r| r.snapshot.manifest.step);
        return Ok(Opening::Done(Outcome::Completed { step }));
    };
    // ASHA's rungs ask for fewer steps first; no searcher asks for more.
    let rungs = info.config.pointer("/searcher/name") == Some(&"adaptive_asha".into());
    if op.length > plan.steps || (op.length < plan.steps && !rungs) {
        return Err(TrainError::Refused(format!(
            "the searcher asks for {} steps but the plan has {}: set searcher.max_length.batches \
             to {} in the experiment config",
            op.length, plan.steps, plan.steps
        )));
    }
    Ok(Opening::Run(Box::new(Opened {
        opts: allocation,
        plan,
        layout,
        info,
        publisher,
        restored,
        op,
    })))
}
