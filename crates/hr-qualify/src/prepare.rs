//! A source-bound managed training experiment (`hessian-recipes managed prepare`): into a fresh
//! folder inside the checkout, the experiment plan (paths made absolute, as the trial reads it
//! on the shared mount), an immutable copy of the binary with its source binding (`source/`),
//! and the experiment config whose entrypoint runs that copy, so later builds cannot alter a
//! live run. The config carries the plan's training sections as constant hyperparameters, ranks
//! checkpoints by the DEV reward when the plan has an evaluation, and must pass `cluster check`.

use std::collections::BTreeMap;
use std::path::{Path, PathBuf};

use hr_config::{
    ClusterProfile, ConfigKind, ProfileName, Searcher, YamlConfig, check_file, training_experiment,
};
use hr_files::IoResultExt;
use hr_plan::Plan;
use serde_json::{Value, json};

use crate::{QualifyError, record_source};

/// What the experiment runs and where.
#[derive(Debug, Clone)]
pub struct PrepareOptions {
    /// The binary copied into the folder and run by the trial.
    pub binary: PathBuf,
    /// The commit it was built from.
    pub commit: String,
    /// The checkout.
    pub root: PathBuf,
    /// The cluster profile whose checkout paths the config names.
    pub profile: ProfileName,
    /// The folder, relative to the checkout (the caller made it fresh).
    pub output: PathBuf,
    /// `--device` of the trial; `cuda` asks for one GPU.
    pub device: String,
    /// The trial's wall-clock limit, seconds.
    pub max_wall_seconds: u64,
    /// The trial's device-seconds budget.
    pub gpu_budget_seconds: u64,
    /// The proofs the trial's gate checks again (absolute), or none.
    pub proofs: Option<PathBuf>,
    /// Run without proofs by choice.
    pub unqualified: bool,
}

/// What was prepared.
#[derive(Debug, Clone)]
pub struct Prepared {
    /// The experiment config (`experiment.yaml` in the folder).
    pub config: PathBuf,
    /// The sha256 of the binary's copy.
    pub binary_sha256: Option<String>,
    /// The project id the profile names, for `det experiment create --project_id`.
    pub project_id: Option<u64>,
}

/// Writes the experiment for `plan` (admitted by the gate) into `o.output`.
pub fn prepare_experiment(mut plan: Plan, o: &PrepareOptions) -> Result<Prepared, QualifyError> {
    let profile = ClusterProfile::by_name(o.profile, &o.root);
    // The trial reads the plan on the shared mount: every path in it must be absolute there.
    plan.make_paths_absolute()
        .map_err(|e| QualifyError::Failed(format!("making the plan's paths absolute: {e}")))?;
    // What the trial will read must be there (as `cluster preflight` checks it).
    crate::preflight::plan_inputs(&plan, &crate::preflight::TrialView::of_profile(&profile))
        .map_err(|e| QualifyError::Refused(format!("the plan `{}`: {e}", plan.name)))?;
    let out = &o.output;
    let backend = plan.environment.backend();
    let rel = |p: &str| format!("{}/{p}", out.display());
    let plan_file = out.join("experiment-plan.json");
    let text = serde_json::to_vec_pretty(&plan).expect("a plan serialises");
    std::fs::write(&plan_file, text).at("write", &plan_file)?;
    let record = record_source(&o.binary, &o.commit, &o.root, out)?;
    let mut entrypoint = vec![
        profile.in_checkout(&rel(&record.binary)),
        "managed-training".to_owned(),
        "--plan".to_owned(),
        profile.in_checkout(&rel("experiment-plan.json")),
        "--backend".to_owned(),
        backend.to_owned(),
        "--max-wall-seconds".to_owned(),
        o.max_wall_seconds.to_string(),
        "--gpu-budget-seconds".to_owned(),
        o.gpu_budget_seconds.to_string(),
        "--device".to_owned(),
        o.device.clone(),
    ];
    match &o.proofs {
        Some(dir) => entrypoint.extend(["--proofs".to_owned(), dir.display().to_string()]),
        None if o.unqualified => entrypoint.push("--unqualified".to_owned()),
        None => {}
    }
    let mut config = training_experiment(
        &profile,
        format!(
            "hessian-recipes {} ({} steps, {backend})",
            plan.name, plan.steps
        ),
        entrypoint,
        o.device == "cuda",
        plan.steps,
    );
    config.hyperparameters = plan_hyperparameters(&plan);
    if plan.evaluation.is_some() {
        // The run reports its DEV reward at the steps `evaluate` adopts: it ranks them.
        config.searcher = Searcher::dev_reward(plan.steps);
    }
    let config_path = out.join("experiment.yaml");
    std::fs::write(&config_path, config.to_yaml()?).at("write", &config_path)?;
    check(&config_path)?;
    Ok(Prepared {
        config: config_path,
        binary_sha256: record.binding.binary_sha256,
        project_id: profile.project_id,
    })
}

/// The prepared config passes `cluster check`, or every finding is named.
fn check(path: &Path) -> Result<(), QualifyError> {
    let (_, mut findings) = check_file(path, Some(ConfigKind::Experiment))?;
    findings.retain(hr_config::Finding::is_problem);
    if findings.is_empty() {
        return Ok(());
    }
    let listed: Vec<String> = findings.iter().map(ToString::to_string).collect();
    Err(QualifyError::Failed(format!(
        "the prepared config {} does not pass `cluster check`: {}",
        path.display(),
        listed.join("; ")
    )))
}

/// The plan's training settings as the experiment's hyperparameters, each section a constant,
/// so the web UI and `det trial describe` show what the trial trains with (the trial itself reads
/// the plan file: these are for people).
fn plan_hyperparameters(plan: &Plan) -> BTreeMap<String, Value> {
    let constant = |v: Value| json!({"type": "const", "val": v});
    let value = |v: Result<Value, serde_json::Error>| v.expect("plan sections serialise");
    [
        ("grpo", value(serde_json::to_value(&plan.grpo))),
        ("lora", value(serde_json::to_value(&plan.model.lora))),
        ("optimizer", value(serde_json::to_value(&plan.optimizer))),
        ("steps", plan.steps.into()),
    ]
    .into_iter()
    .map(|(name, value)| (name.to_owned(), constant(value)))
    .collect()
}
