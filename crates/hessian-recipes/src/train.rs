//! `hessian-recipes train` and `hessian-recipes managed-training`: thin adapters over the one
//! training lifecycle (`hr_train::run`). `train` runs it on a local Core context in
//! `OUTPUT/core/` (checkpoints as Determined would hold them, metrics, events); a `--resume`
//! source is imported there first and restored by the same verified path as a
//! scheduler-selected checkpoint. `managed-training` runs it on the trial's Core context.

use std::path::{Path, PathBuf};
use std::process::ExitCode;

use burn::tensor::backend::Backend;
use hr_collective::World;
use hr_core::CoreContext;
use hr_plan::{Environment, Plan};
use hr_train::{AllocationOptions, Outcome, Ranks, RunOptions, import_checkpoint};
use serde_json::json;

use crate::backend::{OnBackend, dispatch};
use crate::cli::{ManagedTrainingArgs, PlanBackend, TrainArgs};
use crate::output::{Invalid, clear_output, create_fresh, exit_error};
use crate::{Refused, source_binding};
use hr_assess::write_report;
use hr_qualify::gate::Target;

/// Exit status of a run that stopped because its deadline or device budget ran out.
pub(crate) const EXIT_OUT_OF_BUDGET: u8 = 4;
/// Exit status of a local run stopped by SIGTERM or Ctrl-C after saving its step (resumable).
pub(crate) const EXIT_STOPPED: u8 = 5;

/// The plan, its model folder replaced by `model` when one is given, with the model's
/// `config.json` and a dataset's every row checked before anything is created.
pub(crate) fn load_plan(path: &Path, model: Option<&Path>) -> anyhow::Result<Plan> {
    let mut plan = Plan::from_file(path).map_err(|e| Refused(e.to_string()))?;
    let what = match model {
        Some(dir) => {
            plan.model.path = crate::model_folder::resolve(dir, "--model")?;
            "--model"
        }
        None => "model.path",
    };
    crate::model_folder::check(&plan.model.path, what)?;
    hr_train::check_dataset(&plan).map_err(|e| Refused(e.to_string()))?;
    Ok(plan)
}

pub(crate) fn run(args: &TrainArgs) -> anyhow::Result<ExitCode> {
    let world = crate::launch::world()?;
    if let Some(w) = world.as_ref().filter(|w| !w.is_chief()) {
        return crate::launch::work(args.device, w);
    }
    let mut plan = load_plan(&args.plan, args.model.as_deref())?;
    // The run folder's copy of the plan (which `evaluate` reads) names its files absolutely.
    plan.make_paths_absolute()?;
    if args.stop_after_step == Some(0) {
        return Err(Refused("--stop-after-step must be at least 1".to_owned()).into());
    }
    if let Some(src) = args.resume.as_ref().filter(|p| !p.exists()) {
        return Err(Refused(format!("--resume {}: no such folder", src.display())).into());
    }
    let (keys, source) = (
        (args.signing.load()?, args.trust.load()?),
        source_binding()?,
    );
    let device = crate::backend::identify(args.device)?;
    let out = args.output.clone();
    // An empty folder the user made stays; one this invocation makes goes with a failed start.
    let made = !out.exists();
    create_fresh(&out)?;
    let result = start(args, plan, &out, keys, source, (device, world.as_ref()));
    // Bad input, a refused resume, or any failure before a step ended (a tokenizer, the weights,
    // a reward that does not start) trained nothing: the folder this invocation created goes
    // with it, so no half-started run is left behind and the corrected command runs as typed.
    if let Err(e) = &result
        && (e.downcast_ref::<Invalid>().is_some()
            || e.downcast_ref::<Refused>().is_some()
            || no_step_ended(&out))
    {
        clear_output(&out, made);
    }
    result
}

/// Whether the run in `out` has not ended a step: its `metrics.jsonl` (a line per step, the
/// restored history of a resume included) is absent or empty.
fn no_step_ended(out: &Path) -> bool {
    !std::fs::metadata(hr_files::RunDir::new(out).metrics()).is_ok_and(|m| m.len() > 0)
}

fn start(
    args: &TrainArgs,
    plan: Plan,
    out: &Path,
    (signing_key, trust): (Option<hr_seal::KeyPair>, hr_seal::Trust),
    source: hr_seal::SourceBinding,
    (device, world): (hr_proof::Device, Option<&World>),
) -> anyhow::Result<ExitCode> {
    let ranks = crate::launch::meet(world, &plan, &source)?;
    let core_dir = hr_files::RunDir::new(out).core();
    if let Some(src) = &args.resume {
        import_checkpoint(&core_dir, src).map_err(exit_error)?;
    }
    let core = CoreContext::local(&core_dir, plan.steps)?;
    let local = Local {
        resume_command: resume_command(args),
        stop_after_step: args.stop_after_step,
        json: args.json,
    };
    let opts = RunOptions {
        run_id: plan.name.clone(),
        plan,
        run_dir: out.to_owned(),
        source,
        accept_source_change: args.allow_source_change,
        signing_key,
        trust,
        allocation: AllocationOptions::local(
            device,
            crate::backend::execution(args.device),
            args.stop_after_step,
            args.control,
            args.max_wall_seconds,
        )
        .map_err(exit_error)?,
    };
    dispatch(
        args.device,
        Job {
            opts,
            core,
            local: Some(local),
            ranks,
        },
    )
}

/// The command that continues the run `args` started, into a fresh sibling folder
/// (`OUTPUT-resumed`, or `-resumed-2`, ...), with the flags that matter to a resume.
fn resume_command(args: &TrainArgs) -> String {
    let next = (1..)
        .map(|n| {
            let mut name = args.output.as_os_str().to_owned();
            name.push(if n == 1 {
                "-resumed".to_owned()
            } else {
                format!("-resumed-{n}")
            });
            PathBuf::from(name)
        })
        .find(|p| !p.exists())
        .unwrap_or_default();
    let program = std::env::args()
        .next()
        .unwrap_or_else(|| "hessian-recipes".to_owned());
    let text = |p: &Path| p.to_string_lossy().into_owned();
    let mut words = vec![
        program,
        "train".to_owned(),
        "--plan".to_owned(),
        text(&args.plan),
        "--output".to_owned(),
        text(&next),
        "--resume".to_owned(),
        text(&args.output),
    ];
    if let Some(model) = &args.model {
        words.extend(["--model".to_owned(), text(model)]);
    }
    if args.device != crate::backend::DeviceKind::Cpu {
        words.extend(["--device".to_owned(), args.device.flag().to_owned()]);
    }
    if let Some(key) = &args.signing.signing_key {
        words.extend(["--signing-key".to_owned(), text(key)]);
    }
    for trust in &args.trust.trust {
        words.extend(["--trust".to_owned(), trust.clone()]);
    }
    shlex::try_join(words.iter().map(String::as_str)).unwrap_or_else(|_| words.join(" ")) // only a NUL byte cannot be quoted
}

/// The plan with `--backend` and `--service-python` applied: the backend must be the plan's;
/// the service Python, when given, replaces the plan's (the cluster's interpreter path need not
/// be the one the plan was prepared with; it is not part of the plan's digest).
fn managed_plan(args: &ManagedTrainingArgs) -> anyhow::Result<Plan> {
    let mut plan = load_plan(&args.plan, None)?;
    let name = plan.environment.backend();
    let python = match &mut plan.environment {
        Environment::Fixture { .. } | Environment::Dataset { .. } => None,
        Environment::Openenv { python, .. } | Environment::Nemo { python, .. } => Some(python),
    };
    if args.backend.name() != name {
        return Err(Refused(format!(
            "--backend {} but the plan's environment.backend is `{name}`: pass --backend {name} \
             or prepare a plan for {}",
            args.backend.name(),
            args.backend.name()
        ))
        .into());
    }
    match (python, &args.service_python) {
        (Some(python), Some(given)) => *python = given.clone(),
        (None, Some(_)) => {
            return Err(Refused(format!(
                "--service-python: the {name} backend starts no service; drop the flag"
            ))
            .into());
        }
        (_, None) => {}
    }
    Ok(plan)
}

pub(crate) fn managed(args: &ManagedTrainingArgs) -> anyhow::Result<ExitCode> {
    let world = crate::launch::world()?;
    if let Some(w) = world.as_ref().filter(|w| !w.is_chief()) {
        return crate::launch::work(args.device, w);
    }
    let plan = managed_plan(args)?;
    let source = source_binding()?;
    let device = crate::backend::identify(args.device)?;
    args.run.admit(&plan, &source, &Target::Device(&device))?;
    let core = CoreContext::for_chief(world.as_ref().map_or(1, |w| w.size)).map_err(|e| {
        Refused(format!(
            "managed-training runs inside a Determined trial (the experiment's entrypoint): {e}; \
             use `hessian-recipes train` to run a plan locally"
        ))
    })?;
    let info = core.info();
    // A search's values for this trial: its plan, digest and checkpoints are its own, and the
    // gate admits that plan too (a search outside the proofs' family runs --unqualified).
    let searched = hr_config::searched_values(&info.config["hyperparameters"], &info.hparams);
    let varied = plan
        .with_hparams(&searched, &args.plan)
        .map_err(|e| Refused(format!("the trial's hyperparameters: {e}")))?;
    if varied != plan {
        args.run.admit(&varied, &source, &Target::Device(&device))?;
    }
    let plan = varied;
    let ranks = crate::launch::meet(world.as_ref(), &plan, &source)?;
    let run_dir = hr_files::RunDir::managed(core.storage_dir(), info.experiment_id, info.trial_id)
        .root()
        .to_owned();
    let opts = RunOptions {
        run_id: hr_train::managed_run_id(&plan.name, info.experiment_id, info.trial_id),
        plan,
        run_dir,
        source,
        accept_source_change: false,
        signing_key: args.signing.load()?,
        trust: args.trust.load()?,
        allocation: AllocationOptions::managed(
            device,
            crate::backend::execution(args.device),
            args.run.max_wall_seconds,
            args.run.gpu_budget(ranks.count()),
            args.run.unqualified,
        )
        .map_err(exit_error)?,
    };
    dispatch(
        args.device,
        Job {
            opts,
            core,
            local: None,
            ranks,
        },
    )
}

struct Job {
    opts: RunOptions,
    core: CoreContext,
    /// For `train` (a local run); `None` inside a Determined trial, where a stop is the
    /// scheduler's preemption and exits 0.
    local: Option<Local>,
    /// The workers this chief leads (none alone).
    ranks: Ranks,
}

/// What a local run says when it stops before its plan's end.
struct Local {
    resume_command: String,
    stop_after_step: Option<u64>,
    /// `--json`: one summary object on stdout instead of the human lines.
    json: bool,
}

impl OnBackend for Job {
    type Output = ExitCode;

    fn run<B: Backend>(self, device: B::Device, name: &str) -> anyhow::Result<ExitCode> {
        let Job {
            opts,
            core,
            local,
            mut ranks,
        } = self;
        let json = local.as_ref().is_some_and(|l| l.json);
        let (run_dir, plan_name): (PathBuf, String) =
            (opts.run_dir.clone(), opts.plan.name.clone());
        let outcome =
            hr_train::run_ranked::<B>(opts, core, &device, name, &mut ranks).map_err(exit_error)?;
        let rows = hr_train::read_metrics(&run_dir).map_err(exit_error)?;
        let report = hr_files::RunDir::new(&run_dir).report();
        let (summary, code) = match outcome {
            Outcome::Completed { step } => {
                write_report(&run_dir, &plan_name, &rows)?;
                human(json, || {
                    println!("completed step {step}; report {}", report.display());
                });
                (
                    json!({"outcome": "completed", "step": step, "report": report}),
                    0,
                )
            }
            Outcome::OperationDone { step, uuid } => {
                human(json, || {
                    println!(
                        "the searcher's operation ended at step {step}; checkpoint {uuid} (a \
                         promotion continues from it)"
                    );
                });
                (
                    json!({"outcome": "operation_done", "step": step, "checkpoint": uuid}),
                    0,
                )
            }
            Outcome::Stopped { step, uuid } => {
                let resume = local.as_ref().map(|l| l.resume_command.as_str());
                human(json, || {
                    println!("stopped after step {step}; checkpoint {uuid} (resumable)");
                    if let Some(command) = resume {
                        println!("resume with: {command}");
                    }
                });
                let code = match &local {
                    // A signal, not the stop it was asked for.
                    Some(l) if l.stop_after_step != Some(step) => EXIT_STOPPED,
                    _ => 0,
                };
                (
                    json!({"outcome": "stopped", "step": step, "checkpoint": uuid,
                           "resume_command": resume}),
                    code,
                )
            }
            Outcome::OutOfBudget { step, uuid, reason } => {
                write_report(&run_dir, &plan_name, &rows)?;
                eprintln!(
                    "error: the run's {reason} ran out at step {step}; final checkpoint {uuid}. \
                     Neither pause nor restart renews it."
                );
                (
                    json!({"outcome": "out_of_budget", "step": step, "checkpoint": uuid,
                           "ran_out": reason, "report": report}),
                    EXIT_OUT_OF_BUDGET,
                )
            }
        };
        if json {
            let mut summary = summary;
            summary["run_dir"] = json!(run_dir);
            summary["exit_code"] = json!(code);
            println!("{summary}");
        }
        Ok(ExitCode::from(code))
    }
}

/// Prints the human lines unless `--json` asked for the summary object alone.
fn human(json: bool, print: impl FnOnce()) {
    if !json {
        print();
    }
}

impl PlanBackend {
    fn name(self) -> &'static str {
        match self {
            PlanBackend::Fixture => "fixture",
            PlanBackend::Openenv => "openenv",
            PlanBackend::Nemo => "nemo",
            PlanBackend::Dataset => "dataset",
        }
    }
}
