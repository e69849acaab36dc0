//! `hessian-recipes check`: a plan, its model, data and rewards checked as `train` would start
//! them (`hr_train::check`), without training and without writing a run folder.

use std::process::ExitCode;

use burn::tensor::backend::Backend;
use hr_plan::Plan;
use serde_json::json;

use crate::backend::{OnBackend, dispatch};
use crate::cli::CheckArgs;

pub(crate) fn run(args: &CheckArgs) -> anyhow::Result<ExitCode> {
    let plan = crate::train::load_plan(&args.plan, args.model.as_deref())?;
    crate::backend::identify(args.device)?;
    dispatch(
        args.device,
        Check {
            plan,
            json: args.json,
        },
    )
}

struct Check {
    plan: Plan,
    json: bool,
}

impl OnBackend for Check {
    type Output = ExitCode;

    fn run<B: Backend>(self, device: B::Device, name: &str) -> anyhow::Result<ExitCode> {
        // The service's and the rewards' output, kept only while they run (a failure's error
        // carries its tail).
        let logs = tempfile::tempdir()?;
        let report = hr_train::check::<B>(&self.plan, &device, &logs.path().join("service.log"))
            .map_err(crate::train::exit_error)?;
        let plan = &self.plan;
        if self.json {
            println!(
                "{}",
                json!({"plan": plan.name, "device": name, "check": report})
            );
            return Ok(ExitCode::SUCCESS);
        }
        println!(
            "plan {}: {} steps of {} tasks x {} generations",
            plan.name, plan.steps, plan.grpo.tasks_per_step, plan.grpo.num_generations
        );
        println!(
            "model: {} with {} layers and a context of {} positions, loaded on {name}",
            report.model_type, report.layers, report.context
        );
        println!(
            "LoRA: rank {} on {} ({} trainable parameters)",
            plan.model.lora.rank,
            report.adapted.join(", "),
            report.trainable_parameters
        );
        println!(
            "data: {} training tasks, each prompt within the context with {} completion tokens",
            report.tasks, plan.grpo.max_completion_length
        );
        if !report.rewards.is_empty() {
            println!(
                "rewards: {} ({} batch function(s) started and called once)",
                report.rewards.join(", "),
                report.rewards_called
            );
        }
        println!("ok: `train` would start this plan");
        Ok(ExitCode::SUCCESS)
    }
}
