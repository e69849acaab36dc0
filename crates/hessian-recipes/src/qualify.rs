//! `managed-trial cpu`, `qualify cpu` and `proof verify`.

use std::{process::ExitCode, time::Duration};

use anyhow::Context;
use hr_qualify::{
    Control, QualifyOptions, TrialControls, managed_trial_cpu, qualify_cpu, record_source,
};

use crate::{cli::QualifyCpuArgs, output};

pub(crate) fn managed_trial() -> anyhow::Result<ExitCode> {
    managed_trial_cpu(crate::source_binding()?, &TrialControls::from_env())?;
    Ok(ExitCode::SUCCESS)
}

pub(crate) fn cpu(args: &QualifyCpuArgs) -> anyhow::Result<ExitCode> {
    let control = match args.control.as_deref() {
        None => None,
        Some("skip-rng-restore") => Some(Control::SkipRngRestore),
        Some("stale-uuid") => Some(Control::StaleUuid),
        Some("kill-during-save") => Some(Control::KillDuringSave),
        Some(other) => {
            return Err(output::Refused(format!(
                "--control {other}: use skip-rng-restore, stale-uuid or kill-during-save"
            ))
            .into());
        }
    };
    output::create_fresh(&args.output)?;
    let root = std::env::current_dir().context("current folder")?;
    let output = std::path::absolute(&args.output)?;
    let binary = std::env::current_exe().context("locating this binary")?;
    let record = record_source(&binary, env!("HR_GIT_COMMIT"), &root, &output)?;
    let opts = QualifyOptions {
        output: output.clone(),
        root,
        master: args.master.clone(),
        pause_after_step: args.pause_after_step,
        pause_delay: Duration::from_millis(args.pause_delay_ms),
        step_seconds: args.step_seconds,
        control,
        binary,
        commit: env!("HR_GIT_COMMIT").to_owned(),
        timeout: Duration::from_secs(args.timeout_seconds),
    };
    let runtime = tokio::runtime::Runtime::new()?;
    let proof = runtime.block_on(qualify_cpu(&opts, &record))?;
    println!(
        "managed CPU lifecycle: {}",
        if proof.equal { "EQUAL" } else { "DIFFERENT" }
    );
    println!(
        "  reference  experiment {} trial {} ({} checkpoints)",
        proof.reference.experiment_id,
        proof.reference.trial_id,
        proof.reference.steps.len()
    );
    println!(
        "  resumed    experiment {} trial {} allocations {}",
        proof.resumed.experiment_id,
        proof.resumed.trial_id,
        proof.resumed.allocations.join(", ")
    );
    let i = &proof.interruption;
    println!(
        "  {} at step {}: receipt {:?}, restored {} in {} (run {})",
        i.kind,
        i.step,
        i.uuid_at_pause,
        i.uuid_at_restore,
        i.restored_allocation,
        i.restored_run_id
    );
    if let Some(step) = proof.first_divergent_step {
        println!(
            "  first divergent step {step} ({})",
            proof.first_divergent_field.as_deref().unwrap_or("?")
        );
    }
    println!(
        "  final state sha256:{}",
        proof.final_state_sha256.as_deref().unwrap_or("-")
    );
    println!("  proof {}", output.join("proof.json").display());
    Ok(if proof.equal {
        ExitCode::SUCCESS
    } else {
        ExitCode::from(1)
    })
}

/// `proof verify`: re-checks a CPU lifecycle, native or managed proof by its schema.
pub(crate) fn verify(path: &std::path::Path, json: bool) -> anyhow::Result<ExitCode> {
    let checked = hr_qualify::verify_any_proof(path).map(|v| (v.what, v.equal, v.device));
    match checked {
        Ok((what, equal, device)) => {
            if json {
                println!(
                    "{}",
                    serde_json::json!({"proof": path, "holds": true, "equal": equal, "what": what,
                                       "device": device})
                );
            } else {
                println!("proof holds: {what}; equal: {equal}");
            }
            Ok(if equal {
                ExitCode::SUCCESS
            } else {
                ExitCode::from(1)
            })
        }
        Err(e) => {
            if json {
                println!(
                    "{}",
                    serde_json::json!({"proof": path, "holds": false, "error": e.to_string()})
                );
            } else {
                println!("proof does not hold: {e}");
            }
            Ok(ExitCode::from(3))
        }
    }
}
