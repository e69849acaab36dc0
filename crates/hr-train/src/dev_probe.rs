//! The DEV reward of a run while it trains: at each step whose checkpoint `evaluate` adopts
//! (`evaluation.checkpoints`), the live adapters play the plan's DEV tasks, sampled exactly as
//! `evaluate` samples that checkpoint (the evaluation's seed and `num_generations`). The values
//! join that step's metrics row (`dev_reward`, `dev_solved`, `eval_<name>`: TensorBoard, the
//! report's reward plot) and, on a Determined master, are reported as validation metrics, so the
//! web UI, `det trial describe` and `list-checkpoints --best` rank checkpoints as the selection
//! will. The trainer's RNG and state are untouched, so the run's training equals one that
//! probes nothing.

use burn::tensor::backend::AutodiffBackend;
use hr_config::DEV_REWARD;
use hr_env::{Split, Task};
use hr_grpo::{EnvironmentFactory, Trainer};
use hr_plan::{Plan, Solved};
use serde_json::{Value, json};

use crate::TrainError;
use crate::environment::task_set;
use crate::score::episode_score;

/// The DEV tasks and their sampling, and the steps they are played at.
pub(crate) struct DevProbe {
    tasks: Vec<Task>,
    steps: Vec<u64>,
    num_generations: usize,
    seed: u64,
    solved: Solved,
}

impl DevProbe {
    /// The probe of `plan`'s evaluation section, if it has one.
    pub(crate) fn of(plan: &Plan) -> Result<Option<Self>, TrainError> {
        let Some(eval) = &plan.evaluation else {
            return Ok(None);
        };
        Ok(Some(Self {
            tasks: task_set(plan, &eval.dev, Split::Dev)?,
            steps: eval.checkpoints.clone(),
            num_generations: eval.num_generations,
            seed: eval.seed,
            solved: eval.solved.clone(),
        }))
    }

    /// The validation metrics at `step` (after it was taken), when it is one `evaluate` adopts.
    pub(crate) fn metrics<B: AutodiffBackend>(
        &self,
        step: u64,
        trainer: &Trainer<B>,
        envs: &mut dyn EnvironmentFactory,
    ) -> Result<Option<Value>, TrainError> {
        if !self.steps.contains(&step) {
            return Ok(None);
        }
        let episodes =
            trainer.episodes_from_seed(&self.tasks, envs, self.num_generations, self.seed)?;
        // What the rewards logged while scoring DEV is DEV's (TRL's `eval_` metrics), never the
        // next training step's.
        let logged = envs.reward_metrics()?;
        let score = episode_score(&episodes, &self.solved);
        tracing::info!("dev: step {step} mean reward {:.3}", score.mean_reward);
        let mut metrics = json!({ DEV_REWARD: score.mean_reward, "dev_solved": score.solved });
        for (name, value) in logged {
            metrics[format!("eval_{name}")] = json!(value);
        }
        Ok(Some(metrics))
    }
}
