//! How an allocation starts: from the restored checkpoint (its payload already verified against
//! the manifest's evidence), or fresh from the plan's seeds.

use std::collections::VecDeque;

use burn::backend::Autodiff;
use burn::tensor::backend::Backend;
use hr_env::Task;
use hr_grpo::{DataCursor, NativeState, TaskSampler, Trainer};
use hr_plan::Plan;
use hr_policy::{Adapters, ChatTokenizer, LoraConfig, ModelConfig, Policy, PolicyRng, Target};
use hr_snapshot::{Budget, Restored};
use serde_json::{Value, json};

use crate::base::BaseModel;
use crate::payload::{self, Progress};
use hr_proof::Control;

use crate::{TrainError, grpo_config};

/// The trainer, the task sampler, the run's progress and its budget.
pub(crate) type Started<B> = (Trainer<Autodiff<B>>, TaskSampler, Progress, Budget);

/// Continues from the verified checkpoint `r`, everything restored before any randomness is
/// used; `control` breaks the restore on purpose (negative controls).
#[allow(clippy::too_many_arguments)] // what the trainer is built from, then the checkpoint's checks
pub(crate) fn resume<B: Backend>(
    policy: Policy<Autodiff<B>>,
    tokenizer: ChatTokenizer,
    plan: &Plan,
    tasks: Vec<Task>,
    r: &Restored,
    base: &BaseModel,
    control: Option<Control>,
    label: &str,
) -> Result<Started<B>, TrainError> {
    let (mut state, mut progress, budget) = payload::read(&r.snapshot, base)?;
    if let Some(control) = control {
        tracing::info!("control: {} applied at resume", control.name());
        apply_control(control, &mut state, &mut progress.cursor, plan)?;
    }
    // Partial native state (a tensor without optimizer moments, a missing file) refuses the
    // restore like a bad seal does.
    let trainer = Trainer::resume(
        policy,
        tokenizer,
        grpo_config(plan),
        &state,
        &r.snapshot.dir,
    )
    .map_err(|e| match e {
        hr_grpo::GrpoError::State(m) => TrainError::Restore(m),
        other => other.into(),
    })?;
    if trainer.step_index() != r.snapshot.manifest.step {
        return Err(TrainError::Restore(format!(
            "checkpoint {} is sealed at step {} but holds trainer state of step {}",
            r.uuid,
            r.snapshot.manifest.step,
            trainer.step_index()
        )));
    }
    let sampler = TaskSampler::at(tasks, plan.seeds.task_order, progress.cursor)?;
    tracing::info!(
        "{label}: restored step {} from checkpoint {}",
        r.snapshot.manifest.step,
        r.uuid
    );
    Ok((trainer, sampler, progress, budget))
}

/// Starts the plan from its seeds with `budget` (the deadline fixed now).
pub(crate) fn fresh<B: Backend>(
    policy: Policy<Autodiff<B>>,
    tokenizer: ChatTokenizer,
    plan: &Plan,
    tasks: Vec<Task>,
    device: &B::Device,
    budget: Budget,
) -> Result<Started<B>, TrainError> {
    let adapters = fresh_adapters(plan, &policy, device)?;
    let trainer = Trainer::new(
        policy,
        tokenizer,
        adapters,
        PolicyRng::from_seed(plan.seeds.sampling),
        grpo_config(plan),
    )?;
    let sampler = TaskSampler::new(tasks, plan.seeds.task_order)?;
    let progress = Progress {
        evidence: String::new(),
        metrics: String::new(),
        recent: VecDeque::new(),
        cursor: sampler.cursor(),
    };
    Ok((trainer, sampler, progress, budget))
}

/// Breaks the restored state on purpose (a negative control of the qualification).
fn apply_control(
    control: Control,
    state: &mut NativeState,
    cursor: &mut DataCursor,
    plan: &Plan,
) -> Result<(), TrainError> {
    let bad = |e: serde_json::Error| TrainError::Restore(format!("trainer state: {e}"));
    let mut meta: Value =
        serde_json::from_slice(&state.files[hr_grpo::TRAINER_STATE]).map_err(bad)?;
    match control {
        Control::SkipRng => {
            meta["rng"] = serde_json::to_value(PolicyRng::from_seed(plan.seeds.sampling).state())
                .map_err(bad)?
        }
        Control::DropOptimizer => meta["adam_steps"] = json!({}),
        Control::CursorOffByOne => cursor.position += 1,
    }
    state.files.insert(
        hr_grpo::TRAINER_STATE.to_owned(),
        serde_json::to_vec(&meta).map_err(bad)?,
    );
    Ok(())
}

/// The plan's adapters for `policy` as its seed initialises them.
pub(crate) fn fresh_adapters<B: Backend>(
    plan: &Plan,
    policy: &Policy<B>,
    device: &B::Device,
) -> Result<Adapters<B>, TrainError> {
    let lora = lora_config(plan, policy.config())?;
    Ok(Adapters::init(
        policy,
        lora,
        &mut PolicyRng::from_seed(plan.seeds.adapter_init),
        device,
    ))
}

/// The plan's LoRA for `model`: targets, a layer the model lacks or a regular expression that
/// selects nothing are refused naming the plan's field.
fn lora_config(plan: &Plan, model: &ModelConfig) -> Result<LoraConfig, TrainError> {
    let l = &plan.model.lora;
    let targets = l
        .targets
        .iter()
        .filter_map(|t| Target::from_name(t))
        .collect();
    let refused = |field: &str, e: hr_policy::PolicyError| {
        TrainError::Refused(format!("model.lora.{field}: {e}"))
    };
    let mut lora = match &l.target_regex {
        Some(pattern) => LoraConfig::new(l.rank, l.alpha, Target::ALL.to_vec())?
            .with_pattern(pattern)
            .map_err(|e| refused("target_regex", e))?,
        None => LoraConfig::new(l.rank, l.alpha, targets)?,
    };
    lora = lora
        .with_dropout(l.dropout)
        .map_err(|e| refused("dropout", e))?;
    lora = lora
        .with_rslora(l.use_rslora)
        .with_dora(l.use_dora)
        .with_layers(l.layers_to_transform.clone());
    let field = if l.target_regex.is_some() {
        "target_regex"
    } else if lora
        .targets
        .iter()
        .any(|t| Target::of_family(model.family).contains(t))
    {
        "layers_to_transform"
    } else {
        "targets"
    };
    lora.fit(model).map_err(|e| refused(field, e))
}
