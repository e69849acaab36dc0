//! A source-bound managed training experiment (`hessian-recipes managed prepare`): into a fresh
//! folder inside the checkout, the experiment plan (paths made absolute, as the trial reads it
//! on the shared mount), an immutable copy of the binary with its source binding (`source/`),
//! and the experiment config whose entrypoint runs that copy, so later builds cannot alter a
//! live run. The config carries the plan's training sections as constant hyperparameters, ranks
//! checkpoints by the DEV reward when the plan has an evaluation, and must pass `cluster check`.

use std::collections::BTreeMap;
use std::path::{Path, PathBuf};

use hr_config::{
    ClusterProfile, ConfigKind, ProfileName, SearchKind, SearchedField, Searcher, YamlConfig,
    check_file, training_experiment,
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
    /// A hyperparameter search of the plan's fields, or none (`single`).
    pub search: Option<Search>,
    /// GPUs of the trial, one rank each (`hessian-recipes launch` before `managed-training`
    /// when more than one; the plan's `parallel.shards` must be a multiple).
    pub slots: usize,
}

/// A search of a plan's fields with one of Determined's searchers.
#[derive(Debug, Clone)]
pub struct Search {
    /// The searcher.
    pub kind: SearchKind,
    /// The searched fields.
    pub fields: Vec<SearchedField>,
    /// Trials of a `random` or `adaptive_asha` search.
    pub max_trials: u64,
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
    if o.slots > 1 && (o.device != "cuda" || !plan.parallel.admits(o.slots)) {
        return Err(QualifyError::Refused(format!(
            "--slots {}: a rank per GPU needs --device cuda and a plan whose parallel.shards ({}) \
             is a multiple of the slots; set parallel.shards in `{}`",
            o.slots, plan.parallel.shards, plan.name
        )));
    }
    let out = &o.output;
    let backend = plan.environment.backend();
    let rel = |p: &str| format!("{}/{p}", out.display());
    let plan_file = out.join("experiment-plan.json");
    let text = serde_json::to_vec_pretty(&plan).expect("a plan serialises");
    std::fs::write(&plan_file, text).at("write", &plan_file)?;
    let record = record_source(&o.binary, &o.commit, &o.root, out)?;
    let binary = profile.in_checkout(&rel(&record.binary));
    // One rank per slot: the copy's own launcher starts them.
    let launcher = [binary.clone(), "launch".to_owned(), "--".to_owned()];
    let mut entrypoint: Vec<String> = launcher.into_iter().filter(|_| o.slots > 1).collect();
    entrypoint.extend([
        binary,
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
    ]);
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
    if o.slots > 1 {
        config.resources.slots_per_trial = Some(u32::try_from(o.slots).unwrap_or(u32::MAX));
    }
    if plan.evaluation.is_some() {
        // The run reports its DEV reward at the steps `evaluate` adopts: it ranks them.
        config.searcher = Searcher::dev_reward(plan.steps);
    }
    let searched = match &o.search {
        Some(search) => {
            check_search(&plan, search, &plan_file)?;
            // Ranked by what a trial reports when its operation completes: its last loss.
            config.searcher =
                Searcher::search(search.kind, "loss", true, plan.steps, search.max_trials);
            &search.fields[..]
        }
        None => &[],
    };
    config.hyperparameters = plan_hyperparameters(&plan, searched);
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

/// The plan's training settings as the experiment's hyperparameters, so the web UI and `det
/// trial describe` show what the trial trains with: each section a constant, except that a
/// section with searched fields holds one spec per field (the searched ones Determined's, the
/// others constants). The trial writes the values it is handed over the plan file's
/// (`Plan::with_hparams`): the constants equal them, the searched ones vary them.
fn plan_hyperparameters(plan: &Plan, searched: &[SearchedField]) -> BTreeMap<String, Value> {
    let constant = |v: Value| json!({"type": "const", "val": v});
    let plan_value = serde_json::to_value(plan).expect("a plan serialises");
    let mut out: BTreeMap<String, Value> = hr_plan::SEARCHABLE
        .iter()
        .map(|(name, pointer)| {
            let section = plan_value.pointer(pointer).cloned().unwrap_or_default();
            let fields: Vec<&SearchedField> =
                searched.iter().filter(|f| f.section == *name).collect();
            let spec = match (fields.is_empty(), section) {
                (false, Value::Object(values)) => {
                    let mut specs: serde_json::Map<String, Value> =
                        values.into_iter().map(|(k, v)| (k, constant(v))).collect();
                    for f in fields {
                        specs.insert(f.field.clone(), f.spec.clone());
                    }
                    Value::Object(specs)
                }
                (_, section) => constant(section),
            };
            ((*name).to_owned(), spec)
        })
        .collect();
    out.insert("steps".to_owned(), constant(plan.steps.into()));
    out
}

/// Each searched field takes the ends of its range (every value of a categorical one) on the
/// plan, checked as the trial will check it: a field the plan has not, a spelling other than the
/// plan's, or a value it refuses is refused naming `--hparam`; a grid needs a count per range.
fn check_search(plan: &Plan, search: &Search, plan_file: &Path) -> Result<(), QualifyError> {
    let refused = |f: &SearchedField, why: String| {
        QualifyError::Refused(format!("--hparam {}.{}: {why}", f.section, f.field))
    };
    if search.fields.is_empty() {
        return Err(QualifyError::Refused(format!(
            "--searcher {}: name the fields it varies with --hparam SECTION.FIELD=SPEC",
            search.kind.name()
        )));
    }
    for f in &search.fields {
        if !hr_plan::SEARCHABLE
            .iter()
            .any(|(name, _)| *name == f.section)
        {
            return Err(refused(
                f,
                "a search varies fields of grpo, optimizer or lora".into(),
            ));
        }
        let spec = &f.spec;
        let samples: Vec<Value> = match spec["type"].as_str() {
            Some("categorical") => spec["vals"].as_array().cloned().unwrap_or_default(),
            Some("log") => [&spec["minval"], &spec["maxval"]]
                .iter()
                .filter_map(|e| e.as_f64())
                .map(|e| json!(10f64.powf(e)))
                .collect(),
            _ => vec![spec["minval"].clone(), spec["maxval"].clone()],
        };
        if search.kind == SearchKind::Grid
            && spec["type"] != "categorical"
            && spec.get("count").is_none()
        {
            return Err(refused(
                f,
                "a grid needs the number of points of each range: add `:COUNT`".into(),
            ));
        }
        for sample in samples {
            let hparams = json!({ f.section.clone(): { f.field.clone(): sample.clone() } });
            plan.with_hparams(&hparams, plan_file).map_err(|e| {
                let e = e.to_string();
                refused(
                    f,
                    if e.contains("duplicate field") {
                        format!("{e}: name the field as the plan writes it (see docs/plan.md)")
                    } else {
                        format!("the plan refuses {sample}: {e}")
                    },
                )
            })?;
        }
    }
    Ok(())
}
