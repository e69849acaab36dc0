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
            .map_err(crate::output::exit_error)?;
        let plan = &self.plan;
        if self.json {
            let (saved, kept) = plan.checkpoint_counts();
            println!(
                "{}",
                json!({"plan": plan.name, "device": name, "check": report,
                    "checkpoints_saved": saved, "checkpoints_kept": kept})
            );
            return Ok(ExitCode::SUCCESS);
        }
        println!(
            "plan {}: {} steps of {} tasks x {} generations, at most {} completion tokens a step",
            plan.name,
            plan.steps,
            plan.grpo.tasks_per_step,
            plan.grpo.num_generations,
            plan.grpo.tasks_per_step * plan.grpo.num_generations * plan.grpo.max_completion_length
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
        let (saved, kept) = plan.checkpoint_counts();
        println!(
            "checkpoints: {saved} saved (every {} steps and the last), about {} each; a local \
             run keeps {kept} (checkpoints.keep_last {}{}), about {} in all",
            plan.checkpoints.every,
            megabytes(report.checkpoint_bytes),
            plan.checkpoints.keep_last,
            if plan.evaluation.is_some() {
                " and the steps its evaluation adopts"
            } else {
                ""
            },
            megabytes(report.checkpoint_bytes * kept),
        );
        println!("ok: `train` would start this plan");
        Ok(ExitCode::SUCCESS)
    }
}

/// `bytes` in MB (10^6 bytes), with one decimal below 10.
fn megabytes(bytes: u64) -> String {
    let mb = bytes as f64 / 1e6;
    if mb < 10.0 {
        format!("{mb:.1} MB")
    } else {
        format!("{mb:.0} MB")
    }
}
