//! `hessian-recipes qualify soak`: the kill soak (`hr_qualify::kill_soak`) of a plan, judged
//! against the plan's native uninterrupted run; writes `soak.json` (create-only).

use std::process::{Command, ExitCode};
use std::time::Duration;

use anyhow::{Context, bail};
use hr_plan::Plan;
use hr_qualify::{SoakOptions, kill_soak};
use serde_json::json;

use crate::Refused;
use crate::cli::QualifySoakArgs;
use crate::output::create_fresh;

pub(crate) fn run(args: &QualifySoakArgs) -> anyhow::Result<ExitCode> {
    let plan = Plan::from_file(&args.plan).map_err(|e| Refused(e.to_string()))?;
    if args.kills == 0 {
        return Err(Refused("--kills must be at least 1".to_owned()).into());
    }
    let out = std::path::absolute(&args.output)?;
    create_fresh(&out)?;
    let exe = std::env::current_exe().context("locating this binary")?;
    let plan_path = std::path::absolute(&args.plan)?;
    let reference = out.join("reference");
    eprintln!(
        "qualify soak: the native uninterrupted run -> {}",
        reference.display()
    );
    let native = Command::new(&exe)
        .arg("train")
        .arg("--plan")
        .arg(&plan_path)
        .arg("--output")
        .arg(&reference)
        .output()
        .context("running the native reference")?;
    if !native.status.success() {
        bail!(
            "the native reference failed ({}): {}",
            native.status,
            String::from_utf8_lossy(&native.stderr)
        );
    }
    let opts = SoakOptions {
        output: out.clone(),
        root: std::env::current_dir()?,
        entrypoint: vec![
            exe.display().to_string(),
            "managed-training".to_owned(),
            "--plan".to_owned(),
            plan_path.display().to_string(),
            "--backend".to_owned(),
            crate::gate::backend(&plan).to_owned(),
            "--max-wall-seconds".to_owned(),
            args.timeout_seconds.to_string(),
            "--unqualified".to_owned(),
        ],
        steps: plan.steps,
        kills: args.kills,
        seed: args.seed,
        timeout: Duration::from_secs(args.timeout_seconds),
    };
    eprintln!(
        "qualify soak: {} SIGKILLs of the worker (seed {}) and one master crash",
        args.kills, args.seed
    );
    let runtime = tokio::runtime::Runtime::new().context("starting the async runtime")?;
    let report = runtime.block_on(kill_soak(&opts))?;
    let theirs = std::fs::read_to_string(hr_files::RunDir::new(&report.run_dir).evidence())?;
    let ours = std::fs::read_to_string(hr_files::RunDir::new(&reference).evidence())?;
    let equal = theirs == ours && ours.lines().count() as u64 == plan.steps;
    let summary = json!({
        "plan": plan.name, "steps": plan.steps, "kills": report.kills, "seed": args.seed,
        "master_restarts": 1, "allocations": report.allocations,
        "checkpoints_kept_over_master_restart": report.checkpoints_kept_over_master_restart,
        "metrics_kept_over_master_restart": report.metrics_kept_over_master_restart,
        "seconds": report.seconds, "evidence_equal": equal,
        "run_dir": report.run_dir,
    });
    std::fs::write(out.join("soak.json"), serde_json::to_vec_pretty(&summary)?)?;
    println!(
        "kill soak: {} kills, {} allocations, master restarted keeping {} checkpoints and {} \
         metric reports, {:.1} s; evidence {} the native run",
        report.kills,
        report.allocations,
        report.checkpoints_kept_over_master_restart,
        report.metrics_kept_over_master_restart,
        report.seconds,
        if equal { "equals" } else { "DIFFERS from" }
    );
    Ok(if equal {
        ExitCode::SUCCESS
    } else {
        ExitCode::from(1)
    })
}
