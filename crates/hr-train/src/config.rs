//! From a plan to what the trainer takes: the policy in the plan's dtype, the GRPO settings, and
//! the plan's digest that every snapshot is bound to.

use burn::tensor::FloatDType;
use burn::tensor::backend::Backend;
use hr_grpo::{AdamWSettings, AdvantageConfig, GrpoConfig, LossConfig, LrSchedule, RolloutConfig};
use hr_plan::{Dtype, Environment, Plan};
use hr_policy::{Policy, PolicyError};
use hr_seal::sha256_hex;

use crate::TrainError;

/// The tensor dtype of a plan's `model.dtype`.
pub fn float_dtype(dtype: Dtype) -> FloatDType {
    match dtype {
        Dtype::F32 => FloatDType::F32,
        Dtype::F16 => FloatDType::F16,
        Dtype::Bf16 => FloatDType::BF16,
    }
}

/// The plan's model on `device`, its base weights in `model.dtype`; a device that cannot hold
/// that dtype is refused naming the field.
pub(crate) fn load_policy<B: Backend>(
    plan: &Plan,
    device: &B::Device,
) -> Result<Policy<B>, TrainError> {
    let dtype = float_dtype(plan.model.dtype);
    Policy::load_as(&plan.model.path, dtype, device).map_err(|e| match e {
        PolicyError::Dtype { .. } => TrainError::Refused(format!(
            "model.dtype: {e}; change model.dtype or the device"
        )),
        e => e.into(),
    })
}

/// The plan's canonical JSON digest, which every snapshot is bound to. The evaluation section
/// (which does not change training) and where files live are left out (the model folder and the service's interpreter may be reached by other paths from
/// another machine); what they hold is checked by loading them.
pub fn plan_sha256(plan: &Plan) -> String {
    let mut canonical = plan.clone();
    canonical.model.path = Default::default();
    canonical.evaluation = None;
    match &mut canonical.environment {
        Environment::Fixture { .. } => {}
        Environment::Openenv { python, .. } | Environment::Nemo { python, .. } => {
            *python = Default::default()
        }
        // Where the files are, like the model folder; what they hold is read when the run
        // starts.
        Environment::Dataset {
            train,
            dev,
            held_out,
            rewards,
        } => {
            *train = Default::default();
            *dev = None;
            *held_out = None;
            for r in rewards {
                r.file = r.file.as_ref().map(|_| Default::default());
                r.python = None;
            }
        }
    }
    sha256_hex(&serde_json::to_vec(&canonical).expect("a plan serialises"))
}

/// The digest of a plan's family: the plan without its name, its length and its checkpoint
/// schedule. A short qualification plan and the long run it qualifies share it.
pub fn family_sha256(plan: &Plan) -> String {
    let mut family = plan.clone();
    family.name = String::new();
    family.steps = 0;
    family.checkpoints = Default::default();
    plan_sha256(&family)
}

/// The trainer's settings for a plan.
pub fn grpo_config(plan: &Plan) -> GrpoConfig {
    let g = &plan.grpo;
    let o = &plan.optimizer;
    GrpoConfig {
        rollout: RolloutConfig {
            grpo: g.clone(),
            max_concurrent_episodes: match &plan.environment {
                Environment::Openenv { max_sessions, .. } => *max_sessions,
                _ => 0,
            },
        },
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
    }
}

#[cfg(test)]
mod tests {
    use std::path::Path;

    use super::*;

    fn plan(extra: &str) -> Plan {
        let text = format!(
            r#"{{"schema_version": 1, "name": "p", "model": {{"path": "m"}},
            "environment": {{"backend": "fixture", "tasks": {{"kind": "digits", "count": 2, "seed": 1}}}},
            "steps": 4, "seeds": {{"sampling": 1, "adapter_init": 2, "task_order": 3}}{extra}}}"#
        );
        Plan::parse(Path::new("plan.json"), &text).expect("plan")
    }

    #[test]
    fn the_evaluation_section_and_the_model_path_leave_the_digest_alone_but_training_does_not() {
        let bare = plan("");
        let evaluated = plan(
            r#", "evaluation": {"checkpoints": [4], "dev": {"count": 1, "seed": 1},
                "held_out": {"count": 1, "seed": 2}}"#,
        );
        let mut moved = bare.clone();
        moved.model.path = "/elsewhere/m".into();
        assert_eq!(plan_sha256(&bare), plan_sha256(&evaluated));
        assert_eq!(plan_sha256(&bare), plan_sha256(&moved));
        let mut other = bare.clone();
        other.grpo.beta = 0.1;
        assert_ne!(plan_sha256(&bare), plan_sha256(&other));
    }
}
