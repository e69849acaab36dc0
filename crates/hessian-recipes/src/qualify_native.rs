//! `hessian-recipes qualify native`: `hr_qualify::NativeQualification` with this binary's
//! `train`; prints the verdict.

use std::process::ExitCode;

use anyhow::Context;
use hr_qualify::{NativeOptions, NativeQualification};

use crate::cli::QualifyNativeArgs;
use crate::output::create_fresh;

pub(crate) fn run(args: &QualifyNativeArgs) -> anyhow::Result<ExitCode> {
    let qualification = NativeQualification::new(NativeOptions {
        binary: std::env::current_exe().context("locating this binary")?,
        plan: args.plan.clone(),
        output: args.output.clone(),
        device: args.device.flag().to_owned(),
        stop_after_step: args.stop_after_step,
        control: args.control,
        source: crate::source_binding()?,
    })?;
    create_fresh(&args.output)?;
    let proof = qualification.run()?;
    Ok(match proof.first_divergence {
        None => {
            println!(
                "qualify native: equal at every step and field ({} steps, stopped after {})",
                proof.steps, proof.stopped_after
            );
            ExitCode::SUCCESS
        }
        Some(d) => {
            println!(
                "qualify native: NOT equal: first divergence at step {} in `{}`",
                d.step, d.field
            );
            ExitCode::from(1)
        }
    })
}
