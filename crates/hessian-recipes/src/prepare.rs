//! `hessian-recipes managed prepare`: the gate, then `hr_qualify::prepare_experiment` into a
//! fresh folder inside the checkout; prints the `det experiment create` line.

use std::process::ExitCode;

use anyhow::Context;
use hr_plan::Plan;
use hr_qualify::gate::Target;
use hr_qualify::{PrepareOptions, prepare_experiment};

use crate::Refused;
use crate::cli::PrepareArgs;
use crate::output::{clear_output, create_fresh, plain_relative};

pub(crate) fn run(args: &PrepareArgs) -> anyhow::Result<ExitCode> {
    let plan = Plan::from_file(&args.plan).map_err(|e| Refused(e.to_string()))?;
    let search = search(args)?;
    let out = &args.output;
    if !plain_relative(out) {
        return Err(Refused(format!(
            "--output {}: give a folder relative to the checkout without `..`, e.g. runs/NAME",
            out.display()
        ))
        .into());
    }
    let source = crate::source_binding()?;
    args.run
        .admit(&plan, &source, &Target::Kind(args.device.flag()))?;
    let proofs = args
        .run
        .proofs
        .as_deref()
        .map(std::path::absolute)
        .transpose()?;
    let made = !out.exists();
    create_fresh(out)?;
    let result = prepare_experiment(
        plan,
        &PrepareOptions {
            binary: std::env::current_exe().context("locating this binary")?,
            commit: env!("HR_GIT_COMMIT").to_owned(),
            root: std::env::current_dir().context("current folder")?,
            profile: args.profile,
            output: out.clone(),
            device: args.device.flag().to_owned(),
            max_wall_seconds: args.run.max_wall_seconds,
            gpu_budget_seconds: args.run.gpu_budget(args.slots),
            proofs,
            unqualified: args.run.unqualified,
            search,
            slots: args.slots,
        },
    );
    if result.is_err() {
        // Leave nothing half-prepared behind.
        clear_output(out, made);
    }
    let prepared = result?;
    let project = prepared
        .project_id
        .map(|id| format!(" --project_id {id}"))
        .unwrap_or_default();
    println!(
        "prepared {} (binary sha256 {})",
        out.display(),
        prepared.binary_sha256.as_deref().unwrap_or("-")
    );
    println!(
        "submit from the checkout: det experiment create{project} {}",
        prepared.config.display()
    );
    Ok(ExitCode::SUCCESS)
}

/// The search `--hparam`, `--searcher` and `--max-trials` ask for, if any.
fn search(args: &PrepareArgs) -> Result<Option<hr_qualify::Search>, Refused> {
    match (args.searcher, args.hparams.is_empty()) {
        (None, true) => Ok(None),
        (None, false) => Err(Refused(
            "--hparam: name the searcher that varies it: --searcher random|grid|adaptive_asha"
                .to_owned(),
        )),
        (Some(_), _) if args.run.proofs.is_some() => Err(Refused(
            "--hparam: each trial of a search trains its own values, a plan outside the family \
             the proofs qualified: pass --unqualified instead of --proofs"
                .to_owned(),
        )),
        (Some(kind), _) => Ok(Some(hr_qualify::Search {
            kind,
            fields: args.hparams.clone(),
            max_trials: args.max_trials,
        })),
    }
}
