//! From a plan to what the trainer takes: the policy in the plan's dtype and the GRPO settings.

use burn::tensor::FloatDType;
use burn::tensor::backend::Backend;
use hr_grpo::{
    AdamWSettings, AdaptiveEntropy, AdvantageConfig, GrpoConfig, LossConfig, LrSchedule,
    RolloutConfig, Vespo,
};
use hr_plan::{Dtype, Environment, Plan};
use hr_policy::{Execution, Policy, PolicyError};

use crate::TrainError;

/// The tensor dtype of a plan's `model.dtype`.
pub fn float_dtype(dtype: Dtype) -> FloatDType {
    match dtype {
        Dtype::F32 => FloatDType::F32,
        Dtype::F16 => FloatDType::F16,
        Dtype::Bf16 => FloatDType::BF16,
    }
}

/// The plan's model on `device`, its base weights in `model.dtype`, laid out as `execution` says
/// (`Policy::with_execution`: training and `evaluate` pass the same one for a device kind, so
/// they sample alike); a device that cannot hold that dtype is refused naming the field.
pub fn load_policy<B: Backend>(
    plan: &Plan,
    device: &B::Device,
    execution: Execution,
) -> Result<Policy<B>, TrainError> {
    let dtype = float_dtype(plan.model.dtype);
    Policy::load_as(&plan.model.path, dtype, device)
        .map(|policy| policy.with_execution(execution))
        .map_err(|e| match e {
            PolicyError::Dtype { .. } => TrainError::Refused(format!(
                "model.dtype: {e}; change model.dtype or the device"
            )),
            e => e.into(),
        })
}

/// The trainer's settings for a plan.
pub fn grpo_config(plan: &Plan) -> GrpoConfig {
    let g = &plan.grpo;
    let o = &plan.optimizer;
    GrpoConfig {
        rollout: RolloutConfig::of(
            g,
            match &plan.environment {
                Environment::Openenv { max_sessions, .. } => *max_sessions,
                _ => 0,
            },
        ),
        advantage: AdvantageConfig {
            scale_rewards: g.scale_rewards,
            leave_one_out: g.leave_one_out,
            epsilon: g.advantage_epsilon,
        },
        loss: LossConfig {
            epsilon_low: g.epsilon_low,
            epsilon_high: g.epsilon_high,
            beta: g.beta,
            loss_type: g.loss_type,
            max_completion_length: g.max_completion_length,
            importance_sampling_level: g.importance_sampling_level,
            delta: g.delta,
            use_bias_correction_kl: g.use_bias_correction_kl,
            sapo_temperature_pos: g.sapo_temperature_pos,
            sapo_temperature_neg: g.sapo_temperature_neg,
            vespo: Vespo {
                k_pos: g.vespo_k_pos,
                lambda_pos: g.vespo_lambda_pos,
                k_neg: g.vespo_k_neg,
                lambda_neg: g.vespo_lambda_neg,
            },
            off_policy_mask_threshold: g.off_policy_mask_threshold,
            top_entropy_quantile: g.top_entropy_quantile,
            entropy_coef: g.entropy_coef,
            adaptive_entropy: g.use_adaptive_entropy.then_some(AdaptiveEntropy {
                coef_min: g.entropy_coef_min,
                coef_max: g.entropy_coef_max,
                coef_delta: g.entropy_coef_delta,
                target: g.entropy_target,
            }),
        },
        num_iterations: g.num_iterations,
        adamw: AdamWSettings {
            beta1: o.beta1,
            beta2: o.beta2,
            epsilon: o.adam_epsilon,
            weight_decay: o.weight_decay,
        },
        schedule: LrSchedule {
            learning_rate: o.learning_rate,
            warmup_steps: o.warmup_steps,
            decay: o.decay,
            total_steps: plan.steps,
        },
        max_grad_norm: o.max_grad_norm,
        gradient_accumulation_steps: g.gradient_accumulation_steps,
        mask_truncated_completions: g.mask_truncated_completions,
        shards: plan.parallel.shards,
    }
}
