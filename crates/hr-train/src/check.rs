//! `check`: everything a run's start would refuse, found without training or writing a run
//! folder. The plan is validated and its model and data read by the caller (as `train` does
//! before anything is created); here the weights are loaded, LoRA fitted to the model, the
//! environment started (its service or reward functions, logging to a folder the caller
//! chooses), every prompt rendered against the model's context, and each batch reward called
//! once, on the first training task with an empty completion, the shortest answer a policy can
//! give. Then everything is stopped.

use burn::module::Module;
use burn::tensor::backend::Backend;
use hr_env::RewardBatch;
use hr_grpo::RewardState;
use hr_plan::Plan;
use hr_policy::ChatTokenizer;

use crate::config::load_policy;
use crate::environment::environment;
use crate::{TrainError, grpo_config};

/// What a plan's check found, for the binary to print.
#[derive(Debug, Clone, PartialEq, serde::Serialize)]
pub struct CheckReport {
    /// The model's `model_type`.
    pub model_type: String,
    /// Its decoder layers.
    pub layers: usize,
    /// Its context (`max_position_embeddings`).
    pub context: usize,
    /// The projections LoRA adapts (those of the plan's targets the model has).
    pub adapted: Vec<String>,
    /// Trainable parameters of the adapters.
    pub trainable_parameters: usize,
    /// Training tasks.
    pub tasks: usize,
    /// The plan's reward names (the dataset backend's), in order.
    pub rewards: Vec<String>,
    /// Batch rewards called once (the `python` ones).
    pub rewards_called: usize,
    /// About how many bytes one checkpoint takes: the PEFT adapter twice (in the native state
    /// and at the folder's root) and AdamW's two f32 moments per parameter; rollouts and logs
    /// add a little.
    pub checkpoint_bytes: u64,
}

/// Checks `plan` on `device` (its service and reward output go to `log`): see the module.
pub fn check<B: Backend>(
    plan: &Plan,
    device: &B::Device,
    log: &std::path::Path,
) -> Result<CheckReport, TrainError> {
    let model = &plan.model.path;
    let tokenizer = ChatTokenizer::from_file(&model.join("tokenizer.json"))?;
    let policy = load_policy::<B>(plan, device, hr_policy::Execution::default())?;
    let adapters = crate::start::fresh_adapters(plan, &policy, device)?;
    let adapted = adapters
        .config()
        .targets
        .iter()
        .map(|t| t.name().to_owned())
        .collect();
    let (tasks, service, mut env) = environment(plan, log)?;
    let first = tasks.first().ok_or_else(|| {
        TrainError::Refused("the plan's environment has no training task".to_owned())
    })?;
    hr_grpo::check_prompts(
        policy.config(),
        &tokenizer,
        &grpo_config(plan).rollout,
        &tasks,
        env.as_mut(),
    )
    .map_err(|e| TrainError::Refused(e.to_string()))?;
    let rows = [&first.payload];
    let state = RewardState {
        global_step: 0,
        max_steps: plan.steps,
    };
    let batch = RewardBatch {
        rows: &rows,
        completions: &[String::new()],
        completion_ids: &[Vec::new()],
        trainer_state: &serde_json::to_value(state).unwrap_or_default(),
    };
    let called = env.score_batch(&batch).map_err(|e| {
        TrainError::Refused(format!(
            "environment.rewards: called once on task {} with an empty completion: {e}",
            first.id
        ))
    })?;
    if let Some(service) = service {
        service.shutdown().map_err(TrainError::Environment)?;
    }
    let config = policy.config();
    let files = hr_policy::adapter_files(&adapters, &plan.model.peft_base())?;
    let adapter_bytes = (files.weights.len() + files.config.len()) as u64;
    let moments = 2 * 4 * adapters.num_params() as u64;
    Ok(CheckReport {
        checkpoint_bytes: 2 * adapter_bytes + moments,
        model_type: config.family.model_type().to_owned(),
        layers: config.num_layers,
        context: config.max_position_embeddings,
        adapted,
        trainable_parameters: adapters.num_params(),
        tasks: tasks.len(),
        rewards: match &plan.environment {
            hr_plan::Environment::Dataset { rewards, .. } => {
                rewards.iter().map(|r| r.name.clone()).collect()
            }
            _ => Vec::new(),
        },
        rewards_called: called.len(),
    })
}
