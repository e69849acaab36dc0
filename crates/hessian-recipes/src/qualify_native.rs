//! `hessian-recipes qualify native`: the plan uninterrupted, stopped after step K, and resumed in
//! a new process (all three by this same binary), compared field by field at every step.

use std::path::Path;
use std::process::{Command, ExitCode};

use anyhow::{Context, bail};
use hr_plan::Plan;
use hr_proof::{NATIVE_PROOF_SCHEMA, NativeProof, first_divergence};

use crate::Refused;
use crate::cli::QualifyNativeArgs;
use crate::output::create_fresh;

fn train(args: &QualifyNativeArgs, out: &Path, extra: &[String]) -> anyhow::Result<()> {
    let exe = std::env::current_exe().context("locating this binary")?;
    let mut cmd = Command::new(exe);
    cmd.arg("train")
        .arg("--plan")
        .arg(&args.plan)
        .arg("--output")
        .arg(out)
        .args(["--device", args.device.flag()])
        .args(extra);
    eprintln!(
        "qualify native: train --output {} {}",
        out.display(),
        extra.join(" ")
    );
    let status = cmd.status().context("running train")?;
    if !status.success() {
        bail!("train --output {} failed ({status})", out.display());
    }
    Ok(())
}

fn evidence(run: &Path) -> anyhow::Result<Vec<hr_proof::EvidenceLine>> {
    Ok(hr_proof::read_evidence(
        &hr_files::RunDir::new(run).evidence(),
    )?)
}

pub(crate) fn run(args: &QualifyNativeArgs) -> anyhow::Result<ExitCode> {
    let plan = Plan::from_file(&args.plan).map_err(|e| Refused(e.to_string()))?;
    if args.stop_after_step == 0 || args.stop_after_step >= plan.steps {
        return Err(Refused(format!(
            "--stop-after-step {} must be between 1 and the plan's steps - 1 ({})",
            args.stop_after_step,
            plan.steps - 1
        ))
        .into());
    }
    create_fresh(&args.output)?;
    let out = &args.output;
    let (reference, interrupted, resumed) = (
        out.join("reference"),
        out.join("interrupted"),
        out.join("resumed"),
    );
    train(args, &reference, &[])?;
    train(
        args,
        &interrupted,
        &[
            "--stop-after-step".to_owned(),
            args.stop_after_step.to_string(),
        ],
    )?;
    // The interrupted run's latest checkpoint: the one its stop saved.
    let mut extra = vec!["--resume".to_owned(), interrupted.display().to_string()];
    if let Some(control) = args.control {
        extra.extend(["--control".to_owned(), control.name().to_owned()]);
    }
    train(args, &resumed, &extra)?;
    let (ours, theirs) = (evidence(&reference)?, evidence(&resumed)?);
    // Empty or truncated evidence is never "equal".
    for (name, lines) in [("reference", &ours), ("resumed", &theirs)] {
        if lines.len() as u64 != plan.steps {
            bail!(
                "the {name} run left {} steps of evidence, not {}",
                lines.len(),
                plan.steps
            );
        }
    }
    let divergence = first_divergence(&ours, &theirs);
    // The plan as the runs read it, digested as every snapshot (and the managed proof) does.
    let ran = Plan::from_file(&hr_files::RunDir::new(&reference).plan())
        .map_err(|e| anyhow::anyhow!("the reference run's plan: {e}"))?;
    let device = hr_qualify::runs_device(&[&reference, &interrupted, &resumed])?;
    let proof = NativeProof {
        schema: NATIVE_PROOF_SCHEMA.to_owned(),
        plan_sha256: ran.sha256(),
        steps: plan.steps,
        stopped_after: args.stop_after_step,
        control: args.control.map(|c| format!("{c:?}")),
        reference,
        interrupted,
        resumed,
        equal: divergence.is_none(),
        first_divergence: divergence.clone(),
        source: crate::source_binding()?,
        device,
    };
    proof.write(&out.join(hr_proof::NATIVE_PROOF_FILE))?;
    match divergence {
        None => {
            println!(
                "qualify native: equal at every step and field ({} steps, stopped after {})",
                plan.steps, args.stop_after_step
            );
            Ok(ExitCode::SUCCESS)
        }
        Some(d) => {
            println!(
                "qualify native: NOT equal: first divergence at step {} in `{}`",
                d.step, d.field
            );
            Ok(ExitCode::from(1))
        }
    }
}
