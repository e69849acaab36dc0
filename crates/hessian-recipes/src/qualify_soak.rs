//! `hessian-recipes qualify soak`: `hr_qualify::SoakQualification` with this binary; prints the
//! summary it wrote to `soak.json`.

use std::process::ExitCode;
use std::time::Duration;

use anyhow::Context;
use hr_qualify::SoakQualification;

use crate::cli::QualifySoakArgs;
use crate::output::create_fresh;

pub(crate) fn run(args: &QualifySoakArgs) -> anyhow::Result<ExitCode> {
    let soak = SoakQualification::new(
        std::env::current_exe().context("locating this binary")?,
        &args.plan,
        &args.output,
        (args.kills, args.seed),
        Duration::from_secs(args.timeout_seconds),
    )?;
    create_fresh(&args.output)?;
    let runtime = tokio::runtime::Runtime::new().context("starting the async runtime")?;
    let s = runtime.block_on(soak.run(&std::env::current_dir()?))?;
    println!(
        "kill soak: {} kills, {} allocations, master restarted keeping {} checkpoints and {} \
         metric reports, {:.1} s; evidence {} the native run",
        s.kills,
        s.allocations,
        s.checkpoints_kept_over_master_restart,
        s.metrics_kept_over_master_restart,
        s.seconds,
        if s.evidence_equal {
            "equals"
        } else {
            "DIFFERS from"
        }
    );
    Ok(if s.evidence_equal {
        ExitCode::SUCCESS
    } else {
        ExitCode::from(1)
    })
}
