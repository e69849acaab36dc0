//! `hessian-recipes qualify managed`: `hr_qualify::ManagedQualification` with this binary (a
//! copy of it runs every run); prints the verdict, the interruption and the proof's path.

use std::process::ExitCode;
use std::time::Duration;

use anyhow::Context;
use hr_qualify::{ManagedQualification, ManagedQualificationOptions};

use crate::backend::DeviceKind;
use crate::cli::QualifyManagedArgs;
use crate::output::create_fresh;

pub(crate) fn run(args: &QualifyManagedArgs) -> anyhow::Result<ExitCode> {
    let qualification = ManagedQualification::new(ManagedQualificationOptions {
        binary: std::env::current_exe().context("locating this binary")?,
        commit: env!("HR_GIT_COMMIT").to_owned(),
        plan: args.plan.clone(),
        output: args.output.clone(),
        root: std::env::current_dir().context("current folder")?,
        native_proof: args.native_proof.clone(),
        master: args.master.clone(),
        device: args.device.flag().to_owned(),
        gpu: args.device == DeviceKind::Cuda,
        pause_after_step: args.pause_after_step,
        kill_during_save_at: args.kill_during_save_at,
        timeout: Duration::from_secs(args.timeout_seconds),
    })?;
    create_fresh(&args.output)?;
    let runtime = tokio::runtime::Runtime::new()?;
    let outcome = runtime.block_on(qualification.run())?;
    let (proof, managed) = (&outcome.proof, &outcome.recovery);
    let i = &managed.interruption;
    println!(
        "qualify managed ({}): {}",
        proof.backend,
        if proof.equal { "EQUAL" } else { "DIFFERENT" }
    );
    println!(
        "  experiment {} trial {}: {}{} at step {} ({}), restored {} in {}; {} checkpoints listed",
        managed.experiment_id,
        managed.trial_id,
        i.kind,
        i.pause_sent_after_step
            .map(|k| format!(" sent after step {k}'s metric, stopped"))
            .unwrap_or_default(),
        i.step,
        i.paused_allocation,
        i.uuid_at_restore,
        i.restored_allocation,
        managed.checkpoints_listed
    );
    println!(
        "  master {}, {}; source {} (binary sha256 {})",
        proof.master_version,
        proof.service_package.as_deref().unwrap_or("no service"),
        proof.source.commit,
        proof.core.binary_sha256
    );
    let (ours, theirs) = outcome.evidence_steps;
    if ours as u64 != proof.steps || theirs as u64 != proof.steps {
        println!(
            "  evidence incomplete: {ours} native and {theirs} managed steps of {}",
            proof.steps
        );
    }
    if let Some(d) = &proof.first_divergence {
        println!("  first divergence at step {} in `{}`", d.step, d.field);
    }
    println!(
        "  proof {}",
        std::path::absolute(&args.output)?
            .join(hr_proof::MANAGED_PROOF_FILE)
            .display()
    );
    Ok(if proof.equal {
        ExitCode::SUCCESS
    } else {
        ExitCode::from(1)
    })
}
