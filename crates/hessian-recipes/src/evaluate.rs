//! `hessian-recipes evaluate`: the assessment of a finished run (`hr_assess::adopt`,
//! `hr_assess::assess`) written and sealed by `hr_assess::write_evaluation`; this file resolves
//! `--resume`, checks the flags, picks the backend and prints the summary.

use std::path::PathBuf;
use std::process::ExitCode;

use burn::tensor::backend::Backend;
use hr_assess::{Adopted, SERVICE_LOG, write_evaluation};
use hr_plan::Plan;
use serde_json::{Value, json};

use crate::Refused;
use crate::backend::{OnBackend, dispatch};
use crate::cli::EvaluateArgs;
use crate::output::exit_error;
use crate::output::{create_fresh, ensure_fresh};

pub(crate) fn run(args: &EvaluateArgs) -> anyhow::Result<ExitCode> {
    ensure_fresh(&args.output)?;
    for (i, c) in args.compare.iter().enumerate() {
        if args.compare[..i].iter().any(|o| o.name == c.name) {
            return Err(Refused(format!(
                "--compare {}: the name is given twice; each compared adapter needs its own",
                c.name
            ))
            .into());
        }
    }
    let resume = hr_assess::resolve_run_folder(&args.resume, args.master.as_deref()).map_err(
        |e| match e {
            hr_assess::RunFolderError::Refused(m) => Refused(m).into(),
            e => anyhow::Error::from(e),
        },
    )?;
    let plan_path = hr_files::RunDir::new(&resume).plan();
    if !plan_path.is_file() {
        return Err(Refused(format!(
            "--resume {}: not a run folder (no plan.json); give a `train` output folder, a \
             managed run folder <checkpoint storage>/hr-run-<experiment>-<trial> or an \
             experiment id",
            resume.display()
        ))
        .into());
    }
    let plan = Plan::from_file(&plan_path).map_err(|e| Refused(e.to_string()))?;
    let flags = hr_assess::EvaluationFlags {
        dev: args.dev.clone(),
        held_out: args.held_out.clone(),
        retention: args.retention.clone(),
        checkpoints: args.checkpoints.clone(),
        solved: args.solved.clone(),
    };
    let plan = hr_assess::with_flags(plan, &resume, &flags).map_err(exit_error)?;
    // Every checkpoint is verified before anything is written.
    let key = args.signing.load()?;
    let trust = args.trust.load()?;
    let adopted = hr_assess::adopt(&resume, &plan, &trust).map_err(exit_error)?;
    let rows = hr_train::read_metrics(&resume).map_err(exit_error)?;
    create_fresh(&args.output)?;
    let job = Job {
        plan,
        adopted,
        rows,
        compare: args.compare.clone(),
        output: args.output.clone(),
        key,
        json: args.json,
        execution: crate::backend::execution(args.device),
    };
    let result = dispatch(args.device, job);
    if result.is_err() {
        // The folder is this invocation's own and holds no sealed report: leave nothing behind.
        let _ = std::fs::remove_dir_all(&args.output);
    }
    result
}

struct Job {
    plan: Plan,
    adopted: Vec<Adopted>,
    rows: Vec<Value>,
    compare: Vec<hr_assess::Comparison>,
    output: PathBuf,
    key: Option<hr_seal::KeyPair>,
    json: bool,
    execution: hr_policy::Execution,
}

impl OnBackend for Job {
    type Output = ExitCode;

    fn run<B: Backend>(self, device: B::Device, _name: &str) -> anyhow::Result<ExitCode> {
        let log = self.output.join(SERVICE_LOG);
        let assessment = hr_assess::assess::<B>(
            &self.plan,
            self.adopted,
            &self.compare,
            &device,
            self.execution,
            &log,
        )
        .map_err(exit_error)?;
        write_evaluation(
            &self.output,
            &self.plan,
            &self.rows,
            &assessment,
            (self.key.as_ref(), crate::source_binding()?),
        )?;
        let a = &assessment;
        let report = self.output.join("payload/report.md");
        if self.json {
            let compared: serde_json::Map<String, Value> = a
                .held_out_compared
                .iter()
                .map(|c| (c.name.clone(), json!(c.held_out.mean_reward)))
                .collect();
            println!(
                "{}",
                json!({
                    "selected_step": a.selected_step,
                    "held_out_mean_reward": {
                        "base": a.held_out_base.mean_reward,
                        "selected": a.held_out_selected.mean_reward,
                        "compared": compared,
                    },
                    "report": report,
                    "output": self.output,
                })
            );
        } else {
            let compared: String = a
                .held_out_compared
                .iter()
                .map(|c| format!(", {} {:.3}", c.name, c.held_out.mean_reward))
                .collect();
            println!(
                "selected step {} on DEV; HELD-OUT mean reward: base {:.3}, selected {:.3}{compared}",
                a.selected_step, a.held_out_base.mean_reward, a.held_out_selected.mean_reward
            );
            println!("wrote and sealed {}", report.display());
        }
        Ok(ExitCode::SUCCESS)
    }
}
