//! `cargo xtask results smollm2|smollm2-own-data`: does our GRPO *learn* on a real model, and
//! how does it fare beside TRL? SmolLM2-135M-Instruct trains with LoRA twice, once with
//! `hessian-recipes train` and once with TRL's `GRPOTrainer` + PEFT on the same rows, reward
//! functions, seeds and hyper-parameters; then `hessian-recipes evaluate` adopts our
//! checkpoints, selects one on DEV and assesses it, our final adapter, TRL's final adapter and
//! the base on the same HELD-OUT episodes and MGSM items. `smollm2` learns the fixture
//! `arithmetic` family (TRL scores with a transcription of our final-number rule);
//! `smollm2-own-data` learns `plans/smollm2-own-data.json`, a user's dataset (chat-message rows)
//! scored by the Python reward functions of `plans/own-data/rewards.py`, which TRL calls too.
//! The sealed evaluation and a README with the figures and the reproducing command go to
//! `docs/results/<set>/`. The work folder keeps everything (`run.json`: options, commit, wall
//! times), so `--render WORK` rewrites the docs from it without training again.

use std::path::{Path, PathBuf};
use std::process::Command;
use std::time::Instant;

use anyhow::{Context, Result, bail};
use serde::{Deserialize, Serialize};
use serde_json::{Value, json};

use crate::bench_trl::{SMOLLM2_SYSTEM, TrlSetup, command_output, measured_commit};
use crate::{fetch_model, run, timestamped};

mod readme;

use readme::{Logs, render, side_by_side};
#[cfg(test)]
use readme::{blocks, retention_summary};

/// The plan `smollm2-own-data` trains, relative to the checkout.
const OWN_DATA_PLAN: &str = "plans/smollm2-own-data.json";

/// Which task both sides learn.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default, Serialize, Deserialize)]
enum Set {
    /// `smollm2`: the fixture `arithmetic` family.
    #[default]
    #[serde(rename = "smollm2")]
    Arithmetic,
    /// `smollm2-own-data`: the shipped dataset plan and its Python rewards.
    #[serde(rename = "smollm2-own-data")]
    OwnData,
}

impl Set {
    /// The name on the command line.
    fn arg(self) -> &'static str {
        match self {
            Self::Arithmetic => "smollm2",
            Self::OwnData => "smollm2-own-data",
        }
    }

    /// The folder under `docs/results/` (and the work folder's prefix).
    fn docs_name(self) -> &'static str {
        match self {
            Self::Arithmetic => "smollm2-arithmetic",
            Self::OwnData => "smollm2-own-data",
        }
    }
}

/// What a run was given, with what it measured (`run.json` in the work folder).
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
struct Options {
    /// Which result set (runs before the field existed were `smollm2`).
    #[serde(default)]
    set: Set,
    steps: u64,
    learning_rate: f64,
    threads: usize,
}

#[derive(Debug, Serialize, Deserialize)]
struct RunRecord {
    options: Options,
    /// The commit measured (read at the start).
    commit: String,
    /// When the measurement finished (UTC).
    measured: String,
    /// Wall seconds of our training, TRL's training and the evaluation.
    seconds: [f64; 3],
}

enum Task {
    Run(Options),
    /// Rewrite the docs from a finished work folder.
    Render(PathBuf),
}

fn parse(args: &[String]) -> Result<Task> {
    let mut it = args.iter();
    let set = match it.next().map(String::as_str) {
        Some("smollm2") => Set::Arithmetic,
        Some("smollm2-own-data") => Set::OwnData,
        other => bail!("results {other:?}: the result sets are `smollm2` and `smollm2-own-data`"),
    };
    let mut o = Options {
        set,
        steps: 48,
        learning_rate: 2e-4,
        threads: 2,
    };
    while let Some(flag) = it.next() {
        let value = it.next().with_context(|| format!("{flag} needs a value"))?;
        let bad = || format!("{flag} {value:?}: give a positive number");
        match flag.as_str() {
            "--render" if args.len() == 3 => return Ok(Task::Render(PathBuf::from(value))),
            "--render" => bail!("--render WORK takes no other flag: the options are the run's"),
            "--steps" => o.steps = value.parse().ok().filter(|n| *n > 0).with_context(bad)?,
            "--learning-rate" => {
                o.learning_rate = value.parse().ok().filter(|x| *x > 0.0).with_context(bad)?;
            }
            "--threads" => o.threads = value.parse().ok().filter(|n| *n > 0).with_context(bad)?,
            other => bail!(
                "results {}: unknown argument {other:?}: use --steps N, --learning-rate X, \
                 --threads N, or --render WORK",
                set.arg()
            ),
        }
    }
    if !o.steps.is_multiple_of(4) {
        bail!(
            "--steps {}: give a multiple of 4 (checkpoints at every quarter)",
            o.steps
        );
    }
    Ok(Task::Run(o))
}

/// The plan both sides follow (TRL through its flags) with `model` as its model folder. The
/// own-data plan's files are made absolute against the checkout `root` when one is given (the
/// plan is written elsewhere), else left as the shipped plan names them.
fn plan(o: &Options, model: &Path, root: Option<&Path>) -> Result<Value> {
    let every = o.steps / 4;
    let checkpoints = json!([every, 2 * every, 3 * every, o.steps]);
    if o.set == Set::OwnData {
        let shipped = Path::new(env!("CARGO_MANIFEST_DIR"))
            .join("..")
            .join(OWN_DATA_PLAN);
        let mut plan = read_json(&shipped)?;
        plan["model"]["path"] = json!(model);
        plan["steps"] = json!(o.steps);
        plan["checkpoints"]["every"] = json!(every);
        plan["evaluation"]["checkpoints"] = checkpoints;
        plan["optimizer"]["learning_rate"] = json!(o.learning_rate);
        if let Some(root) = root {
            let plans = root.join("plans");
            let env = &mut plan["environment"];
            for split in ["train", "dev", "held_out"] {
                env[split] = json!(plans.join(env[split].as_str().context("a dataset file")?));
            }
            for reward in env["rewards"].as_array_mut().context("rewards")? {
                if let Some(file) = reward["file"].as_str() {
                    reward["file"] = json!(plans.join(file));
                }
            }
        }
        return Ok(plan);
    }
    Ok(json!({
        "schema_version": 1,
        "name": o.set.docs_name(),
        "model": {"path": model, "lora": {"rank": 8, "alpha": 16.0,
            "targets": ["q_proj", "k_proj", "v_proj", "o_proj"]}},
        "environment": {"backend": "fixture", "tasks": {"kind": "arithmetic", "count": 64, "seed": 0}},
        "grpo": {"tasks_per_step": 4, "num_generations": 8, "max_completion_length": 32,
            "max_turn_tokens": 32, "num_iterations": 1, "beta": 0.0, "temperature": 1.0,
            "loss_type": "dapo", "scale_rewards": "group", "system_prompt": SMOLLM2_SYSTEM},
        "optimizer": {"learning_rate": o.learning_rate, "warmup_steps": 0, "decay": "constant",
            "weight_decay": 0.0, "max_grad_norm": 1.0},
        "steps": o.steps,
        "checkpoints": {"every": every},
        "seeds": {"sampling": 0, "adapter_init": 0, "task_order": 0},
        "evaluation": {"checkpoints": checkpoints,
            "dev": {"count": 16, "seed": 1}, "held_out": {"count": 16, "seed": 2},
            "num_generations": 4, "seed": 0, "retention_max_new_tokens": 64},
    }))
}

/// TRL's training rows and reward arguments for `plan` (written into `work` when they are
/// the fixture draw): the own-data plan's TRAIN file and its Python functions with their
/// weights, else the arithmetic questions and the final-number rule.
fn trl_task_args(o: &Options, plan: &Value, work: &Path) -> Result<Vec<String>> {
    if o.set == Set::Arithmetic {
        let tasks = work.join("train-tasks.jsonl");
        std::fs::write(&tasks, train_rows())?;
        return Ok(vec![
            "--tasks".into(),
            tasks.display().to_string(),
            "--reward".into(),
            "final-number".into(),
        ]);
    }
    let env = &plan["environment"];
    let mut args = vec![
        "--tasks".into(),
        env["train"].as_str().context("train")?.to_owned(),
        "--system-prompt".into(),
        plan["grpo"]["system_prompt"]
            .as_str()
            .context("system_prompt")?
            .to_owned(),
        "--max-prompt-length".into(),
        "128".into(),
    ];
    let mut file = None;
    for reward in env["rewards"].as_array().context("rewards")? {
        let (Some(path), Some(function)) = (reward["file"].as_str(), reward["function"].as_str())
        else {
            bail!("{OWN_DATA_PLAN}: TRL can call only python rewards: {reward}");
        };
        if reward["name"].as_str() != Some(function) || file.is_some_and(|f| f != path) {
            bail!(
                "{OWN_DATA_PLAN}: TRL here takes one reward file, each reward named as its \
                 function (as TRL logs it): {reward}"
            );
        }
        file = Some(path);
        let weight = reward["weight"].as_f64().unwrap_or(1.0);
        args.extend(["--reward-func".into(), format!("{function}:{weight}")]);
    }
    args.extend([
        "--reward-file".into(),
        file.context("no rewards")?.to_owned(),
    ]);
    Ok(args)
}

/// The plan's TRAIN questions as TRL dataset rows.
fn train_rows() -> String {
    hr_env::fixture_tasks(hr_plan::FixtureKind::Arithmetic, 64, 0)
        .iter()
        .map(|t| {
            format!(
                "{}\n",
                json!({"question": t.payload["question"], "answer": t.payload["answer"]})
            )
        })
        .collect()
}

/// `cargo xtask results smollm2 [--steps N] [--learning-rate X] [--threads N] | --render WORK`.
pub(crate) fn run_task(root: &Path, args: &[String]) -> Result<()> {
    match parse(args)? {
        Task::Run(o) => {
            let work = root
                .join("target/results")
                .join(timestamped(o.set.docs_name()));
            measure(root, o, &work)?;
            publish(root, &work)
        }
        Task::Render(work) => publish(root, &work),
    }
}

/// Trains both sides and evaluates into `work`, ending with its `run.json`.
fn measure(root: &Path, o: Options, work: &Path) -> Result<()> {
    let commit = measured_commit();
    let trl_setup = TrlSetup::prepare(root, "smollm2")?;
    let (python, binary, script, models) = (
        &trl_setup.python,
        &trl_setup.binary,
        &trl_setup.script,
        &trl_setup.models,
    );
    let model = fetch_model::smollm2(binary)?;
    std::fs::create_dir_all(work)?;
    let plan = plan(&o, &model, Some(root))?;
    let plan_file = work.join("plan.json");
    std::fs::write(&plan_file, serde_json::to_string_pretty(&plan)?)?;
    let trl_tasks = trl_task_args(&o, &plan, work)?;
    let threads = o.threads.to_string();

    let ours = work.join("ours");
    let mut train = Command::new(binary);
    train
        .args(["train", "--plan"])
        .arg(&plan_file)
        .arg("--output")
        .arg(&ours)
        .env("RAYON_NUM_THREADS", &threads);
    let ours_s = timed(train)?;

    let trl_out = work.join("trl.jsonl");
    let trl_adapter = work.join("trl-adapter");
    let mut trl = Command::new(python);
    trl.arg(script)
        .args(["--model", "smollm2", "--lora"])
        .args(&trl_tasks)
        .args(["--lr-scheduler", "constant"])
        .args(["--learning-rate", &o.learning_rate.to_string()])
        .args(["--steps", &o.steps.to_string(), "--warmup", "0"])
        .args(["--threads", &threads, "--tag", o.set.docs_name()])
        .arg("--workdir")
        .arg(models)
        .arg("--out")
        .arg(&trl_out)
        .arg("--save-adapter")
        .arg(&trl_adapter);
    let trl_s = timed(trl)?;

    let evaluation = work.join("evaluation");
    let mut evaluate = Command::new(binary);
    evaluate
        .args(["evaluate", "--resume"])
        .arg(&ours)
        .arg("--output")
        .arg(&evaluation)
        .arg("--compare")
        .arg(format!("ours-final={}", ours.join("adapter").display()))
        .arg("--compare")
        .arg(format!("trl-final={}", trl_adapter.display()))
        .env("RAYON_NUM_THREADS", &threads);
    let evaluate_s = timed(evaluate)?;
    let record = RunRecord {
        options: o,
        commit,
        measured: command_output("date", &["-u", "+%Y-%m-%d %H:%M UTC"]),
        seconds: [ours_s, trl_s, evaluate_s],
    };
    std::fs::write(
        work.join("run.json"),
        serde_json::to_string_pretty(&record)?,
    )?;
    Ok(())
}

/// Runs `cmd` ([`run`]) and returns its wall seconds.
fn timed(cmd: Command) -> Result<f64> {
    let started = Instant::now();
    run(cmd)?;
    Ok(started.elapsed().as_secs_f64())
}

/// Writes `docs/results/NAME/` from a finished work folder.
fn publish(root: &Path, work: &Path) -> Result<()> {
    let record: RunRecord = serde_json::from_value(read_json(&work.join("run.json"))?)
        .with_context(|| format!("{}: not a finished results run", work.display()))?;
    let evaluation = work.join("evaluation");
    // Everything read and drawn before the old docs are replaced.
    let logs = Logs::read(work)?;
    let plots = side_by_side(&logs)?;
    let dest = root
        .join("docs/results")
        .join(record.options.set.docs_name());
    if dest.exists() {
        eprintln!("results: replacing {}", dest.display());
        std::fs::remove_dir_all(&dest)?;
    }
    copy_dir(&evaluation, &dest.join("evaluation"))?;
    for (file, _, svg) in &plots {
        std::fs::write(dest.join(file), svg)?;
    }
    let readme = render(&record, work, &logs, &plots)?;
    std::fs::write(dest.join("README.md"), &readme)?;
    println!("{readme}");
    eprintln!(
        "results: wrote {} (runs in {})",
        dest.display(),
        work.display()
    );
    Ok(())
}

fn copy_dir(from: &Path, to: &Path) -> Result<()> {
    std::fs::create_dir_all(to)?;
    for entry in std::fs::read_dir(from)? {
        let entry = entry?;
        let target = to.join(entry.file_name());
        if entry.file_type()?.is_dir() {
            copy_dir(&entry.path(), &target)?;
        } else {
            std::fs::copy(entry.path(), &target)
                .with_context(|| format!("copying {}", entry.path().display()))?;
        }
    }
    Ok(())
}

fn read_json(path: &Path) -> Result<Value> {
    let text =
        std::fs::read_to_string(path).with_context(|| format!("reading {}", path.display()))?;
    serde_json::from_str(&text).with_context(|| format!("parsing {}", path.display()))
}

#[cfg(test)]
mod tests {
    use super::*;

    fn args(words: &[&str]) -> Vec<String> {
        words.iter().map(|w| (*w).to_owned()).collect()
    }

    #[test]
    fn the_written_plan_is_one_hr_plan_accepts() {
        let Ok(Task::Run(o)) = parse(&args(&["smollm2", "--steps", "8"])) else {
            panic!("options");
        };
        let text =
            serde_json::to_string(&plan(&o, Path::new("/models/smollm2"), None).expect("plan"))
                .expect("json");
        let plan = hr_plan::Plan::parse(Path::new("plan.json"), &text).expect("a valid plan");
        let eval = plan.evaluation.expect("evaluation section");
        assert_eq!(eval.checkpoints, [2, 4, 6, 8]);
        assert_eq!(plan.checkpoints.every, 2);
    }

    #[test]
    fn the_own_data_plan_is_the_shipped_one_with_its_files_found_and_its_rewards_for_trl() {
        let Ok(Task::Run(o)) = parse(&args(&["smollm2-own-data", "--steps", "8"])) else {
            panic!("options");
        };
        let root = Path::new(env!("CARGO_MANIFEST_DIR")).join("..");
        let plan = plan(&o, Path::new("/models/smollm2"), Some(&root)).expect("plan");
        let parsed = hr_plan::Plan::parse(Path::new("/elsewhere/plan.json"), &plan.to_string())
            .expect("a valid plan");
        assert_eq!(parsed.steps, 8);
        assert_eq!(
            parsed.evaluation.expect("evaluation").checkpoints,
            [2, 4, 6, 8]
        );
        let mut files = parsed.environment.clone();
        for file in files.dataset_files_mut() {
            assert!(file.is_file(), "{}", file.display());
        }
        let trl = trl_task_args(&o, &plan, Path::new("/unused")).expect("TRL arguments");
        let funcs: Vec<&str> = trl
            .windows(2)
            .filter(|w| w[0] == "--reward-func")
            .map(|w| w[1].as_str())
            .collect();
        assert_eq!(funcs, ["correct:1", "concise:0.25"]);
        assert!(trl.iter().any(|a| a.ends_with("plans/own-data/rewards.py")));
    }

    #[test]
    fn bad_arguments_name_the_flag() {
        for (words, needle) in [
            (&["tiny"][..], "the result sets are `smollm2` and"),
            (&["smollm2", "--steps", "6"], "a multiple of 4"),
            (&["smollm2", "--steps", "0"], "--steps \"0\""),
            (&["smollm2", "--learning-rate"], "needs a value"),
            (
                &["smollm2", "--rounds", "2"],
                "unknown argument \"--rounds\"",
            ),
        ] {
            let err = parse(&args(words)).err().expect("refused").to_string();
            assert!(err.contains(needle), "{words:?}: {err}");
        }
    }

    #[test]
    fn the_train_rows_are_the_plans_fixture_draw() {
        let rows = train_rows();
        assert_eq!(rows.lines().count(), 64);
        let first: Value = serde_json::from_str(rows.lines().next().expect("row")).expect("json");
        let task = &hr_env::fixture_tasks(hr_plan::FixtureKind::Arithmetic, 64, 0)[0];
        assert_eq!(first["question"], task.payload["question"]);
        assert_eq!(first["answer"], task.payload["answer"]);
    }

    #[test]
    fn render_takes_a_work_folder() {
        assert!(matches!(
            parse(&args(&["smollm2", "--render", "target/results/x"])),
            Ok(Task::Render(p)) if p == Path::new("target/results/x")
        ));
    }

    #[test]
    fn the_retention_summary_weighs_languages_by_items_and_says_when_nothing_can_drop() {
        let report = json!({"retention": [
            {"lang": "de", "items": 2, "base": 0.5, "selected": 0.0, "compared": {"trl": 1.0}},
            {"lang": "en", "items": 1, "base": 1.0, "selected": 1.0, "compared": {"trl": 0.0}}],
            "held_out_compared": [{"name": "trl"}]});
        let text = retention_summary(&report).expect("summary");
        assert!(
            text.contains("3 items in 2 languages): base 0.667, selected 0.333, trl 0.667."),
            "{text}"
        );
        assert!(!text.contains("cannot show forgetting"));
        let zero = json!({"retention": [{"lang": "de", "items": 2, "base": 0.0, "selected": 0.0}]});
        assert!(
            retention_summary(&zero)
                .expect("summary")
                .contains("cannot show forgetting")
        );
    }

    #[test]
    fn side_by_side_plots_only_what_both_runs_logged() {
        let rows = |r: f64| -> Vec<Value> {
            (1..=4)
                .map(|s| json!({"step": s, "reward": r * f64::from(s), "entropy": 0.5}))
                .collect()
        };
        let mut logs = Logs {
            ours: rows(0.1),
            trl: rows(0.2),
            versions: Value::Null,
        };
        for r in &mut logs.trl {
            r["entropy"] = Value::Null;
        }
        let plots = side_by_side(&logs).expect("plots");
        let files: Vec<&str> = plots.iter().map(|p| p.0.as_str()).collect();
        assert_eq!(files, ["reward.svg"], "entropy is ours alone");
        assert!(plots[0].2.contains("\nTRL\n") && plots[0].2.contains("\nhessian-recipes\n"));
    }

    #[test]
    fn blocks_average_each_run_of_steps() {
        assert_eq!(blocks(&[1.0, 0.0, 0.5, 0.5, 1.0], 2), [0.5, 0.5, 1.0]);
    }
}
