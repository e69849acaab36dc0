//! `hessian-recipes managed prepare`: a freshly prepared, source-bound managed training
//! experiment. Into a fresh folder inside the checkout it writes the experiment plan (paths made
//! absolute), an immutable copy of this binary with its source binding (`source/`), and the
//! experiment config whose entrypoint runs that copy, so later builds cannot alter a live run.

use std::process::ExitCode;

use anyhow::Context;
use hr_config::{ClusterProfile, ConfigKind, YamlConfig, check_file, training_experiment};
use hr_plan::Plan;
use hr_qualify::record_source;

use crate::Refused;
use crate::backend::DeviceKind;
use crate::cli::PrepareArgs;
use crate::output::{create_fresh, plain_relative};
use hr_qualify::gate::Target;

pub(crate) fn run(args: &PrepareArgs) -> anyhow::Result<ExitCode> {
    let mut plan = Plan::from_file(&args.plan).map_err(|e| Refused(e.to_string()))?;
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
    let root = std::env::current_dir().context("current folder")?;
    let profile = ClusterProfile::by_name(args.profile, &root);
    // The trial reads the plan on the shared mount: every path in it must be absolute there.
    plan.make_paths_absolute()
        .context("making the plan's paths absolute")?;
    let backend = plan.environment.backend();
    create_fresh(out)?;
    let rel = |p: &str| format!("{}/{p}", out.display());
    std::fs::write(
        out.join("experiment-plan.json"),
        serde_json::to_vec_pretty(&plan)?,
    )?;
    let binary = std::env::current_exe().context("locating this binary")?;
    let record = record_source(&binary, env!("HR_GIT_COMMIT"), &root, out)?;
    let mut entrypoint = vec![
        profile.in_checkout(&rel(&record.binary)),
        "managed-training".to_owned(),
        "--plan".to_owned(),
        profile.in_checkout(&rel("experiment-plan.json")),
        "--backend".to_owned(),
        backend.to_owned(),
        "--max-wall-seconds".to_owned(),
        args.run.max_wall_seconds.to_string(),
        "--gpu-budget-seconds".to_owned(),
        args.run.gpu_budget_seconds.to_string(),
        "--device".to_owned(),
        args.device.flag().to_owned(),
    ];
    match &proofs {
        Some(dir) => entrypoint.extend(["--proofs".to_owned(), dir.display().to_string()]),
        None if args.run.unqualified => entrypoint.push("--unqualified".to_owned()),
        None => {}
    }
    let mut config = training_experiment(
        &profile,
        format!(
            "hessian-recipes {} ({} steps, {backend})",
            plan.name, plan.steps
        ),
        entrypoint,
        args.device == DeviceKind::Cuda,
        plan.steps,
    );
    config.hyperparameters = plan_hyperparameters(&plan)?;
    if plan.evaluation.is_some() {
        // The run reports its DEV reward at the steps `evaluate` adopts: it ranks them.
        config.searcher = hr_config::Searcher::dev_reward(plan.steps);
    }
    let config_path = out.join("experiment.yaml");
    std::fs::write(&config_path, config.to_yaml()?)?;
    let (_, findings) = check_file(&config_path, Some(ConfigKind::Experiment))?;
    if !findings.is_empty() {
        for f in &findings {
            eprintln!("{}: {f}", config_path.display());
        }
        anyhow::bail!("the prepared config does not pass `cluster check`");
    }
    let project = profile
        .project_id
        .map(|id| format!(" --project_id {id}"))
        .unwrap_or_default();
    println!(
        "prepared {} (binary sha256 {})",
        out.display(),
        record.binding.binary_sha256.as_deref().unwrap_or("-")
    );
    println!(
        "submit from the checkout: det experiment create{project} {}",
        config_path.display()
    );
    Ok(ExitCode::SUCCESS)
}

/// The plan's training settings as the experiment's hyperparameters, each section a constant,
/// so the web UI and `det trial describe` show what the trial trains with (the trial itself reads
/// the plan file: these are for people).
fn plan_hyperparameters(
    plan: &Plan,
) -> anyhow::Result<std::collections::BTreeMap<String, serde_json::Value>> {
    let constant = |v: serde_json::Value| serde_json::json!({"type": "const", "val": v});
    Ok([
        ("grpo", serde_json::to_value(&plan.grpo)?),
        ("lora", serde_json::to_value(&plan.model.lora)?),
        ("optimizer", serde_json::to_value(&plan.optimizer)?),
        ("steps", plan.steps.into()),
    ]
    .into_iter()
    .map(|(name, value)| (name.to_owned(), constant(value)))
    .collect())
}
