//! `hessian-recipes qualify managed`: `hr_qualify::ManagedQualification` with this binary (a
//! copy of it runs every run), and `qualify openenv|nemo`: `hr_qualify::BackendQualification`,
//! the native then the managed half into one proofs folder; both print the verdicts.

use std::process::ExitCode;
use std::time::Duration;

use anyhow::Context;
use hr_qualify::{
    BackendQualification, ManagedOutcome, ManagedQualification, ManagedQualificationOptions,
};

use crate::backend::DeviceKind;
use crate::cli::{QualifyBackendArgs, QualifyManagedArgs};
use crate::output::create_fresh;

/// `qualify openenv|nemo`.
pub(crate) fn backend(backend: &str, args: &QualifyBackendArgs) -> anyhow::Result<ExitCode> {
    let qualification = BackendQualification::new(
        backend,
        ManagedQualificationOptions {
            binary: std::env::current_exe().context("locating this binary")?,
            commit: env!("HR_GIT_COMMIT").to_owned(),
            plan: args.plan.clone(),
            output: args.output.clone(),
            root: std::env::current_dir().context("current folder")?,
            native_proof: None,
            master: args.trial.master.clone(),
            device: args.trial.device.flag().to_owned(),
            gpu: args.trial.device == DeviceKind::Cuda,
            pause_after_step: 1,
            kill_during_save_at: None,
            ranks: 1,
            kill_rank_at: None,
            timeout: Duration::from_secs(args.trial.timeout_seconds),
        },
        crate::source_binding()?,
    )?;
    // The proofs folder may hold the plan it qualifies; its two halves must be fresh.
    let proofs = hr_proof::ProofsDir::new(&args.output);
    for half in [proofs.native(), proofs.managed()] {
        crate::output::ensure_fresh(&half)?;
    }
    let runtime = tokio::runtime::Runtime::new()?;
    let outcome = runtime.block_on(qualification.run())?;
    let native = &outcome.native;
    match &native.first_divergence {
        None => println!(
            "qualify {backend}: native equal at every step and field ({} steps, stopped after {})",
            native.steps, native.stopped_after
        ),
        Some(d) => println!(
            "qualify {backend}: native NOT equal: first divergence at step {} in `{}`; the \
             managed half did not run",
            d.step, d.field
        ),
    }
    if let Some(managed) = &outcome.managed {
        print_managed(managed, &args.output.join("managed"))?;
    }
    Ok(if outcome.equal() {
        ExitCode::SUCCESS
    } else {
        ExitCode::from(1)
    })
}

pub(crate) fn run(args: &QualifyManagedArgs) -> anyhow::Result<ExitCode> {
    let qualification = ManagedQualification::new(ManagedQualificationOptions {
        binary: std::env::current_exe().context("locating this binary")?,
        commit: env!("HR_GIT_COMMIT").to_owned(),
        plan: args.plan.clone(),
        output: args.output.clone(),
        root: std::env::current_dir().context("current folder")?,
        native_proof: args.native_proof.clone(),
        master: args.trial.master.clone(),
        device: args.trial.device.flag().to_owned(),
        gpu: args.trial.device == DeviceKind::Cuda,
        pause_after_step: args.pause_after_step,
        kill_during_save_at: args.kill_during_save_at,
        ranks: args.ranks,
        kill_rank_at: args.kill_rank_at,
        timeout: Duration::from_secs(args.trial.timeout_seconds),
    })?;
    create_fresh(&args.output)?;
    let runtime = tokio::runtime::Runtime::new()?;
    let outcome = runtime.block_on(qualification.run())?;
    print_managed(&outcome, &args.output)?;
    Ok(if outcome.proof.equal {
        ExitCode::SUCCESS
    } else {
        ExitCode::from(1)
    })
}

/// The managed verdict, the interruption and where the proof is (in `output`).
fn print_managed(outcome: &ManagedOutcome, output: &std::path::Path) -> anyhow::Result<()> {
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
        std::path::absolute(output)?
            .join(hr_proof::MANAGED_PROOF_FILE)
            .display()
    );
    Ok(())
}
