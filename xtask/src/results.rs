//! `cargo xtask results smollm2`: does our GRPO *learn* on a real model, and how does it fare
//! beside TRL? SmolLM2-135M-Instruct trains with LoRA on the fixture `arithmetic` family's TRAIN
//! split twice, once with `hessian-recipes train` and once with TRL's `GRPOTrainer` + PEFT on the
//! same 64 questions, reward rule, seeds and hyper-parameters; then `hessian-recipes evaluate`
//! adopts our checkpoints, selects one on DEV and assesses it, our final adapter, TRL's final
//! adapter and the base on the same HELD-OUT episodes and MGSM items. The sealed evaluation and
//! a README with the figures and the reproducing command go to `docs/results/smollm2-arithmetic/`.

use std::path::Path;
use std::process::Command;
use std::time::Instant;

use anyhow::{Context, Result, bail};
use serde_json::{Value, json};

use crate::bench_trl::{SMOLLM2_SYSTEM, TrlSetup, command_output, cpu_name, measured_commit};
use crate::{fetch_model, run, timestamped};

const NAME: &str = "smollm2-arithmetic";

struct Options {
    steps: u64,
    learning_rate: f64,
    threads: usize,
}

fn parse(args: &[String]) -> Result<Options> {
    let mut it = args.iter();
    match it.next().map(String::as_str) {
        Some("smollm2") => {}
        other => bail!("results {other:?}: the one result set is `smollm2`"),
    }
    let mut o = Options {
        steps: 48,
        learning_rate: 2e-4,
        threads: 2,
    };
    while let Some(flag) = it.next() {
        let value = it.next().with_context(|| format!("{flag} needs a value"))?;
        let bad = || format!("{flag} {value:?}: give a positive number");
        match flag.as_str() {
            "--steps" => o.steps = value.parse().ok().filter(|n| *n > 0).with_context(bad)?,
            "--learning-rate" => {
                o.learning_rate = value.parse().ok().filter(|x| *x > 0.0).with_context(bad)?;
            }
            "--threads" => o.threads = value.parse().ok().filter(|n| *n > 0).with_context(bad)?,
            other => bail!(
                "results smollm2: unknown argument {other:?}: use --steps N, --learning-rate X, \
                 --threads N"
            ),
        }
    }
    if !o.steps.is_multiple_of(4) {
        bail!(
            "--steps {}: give a multiple of 4 (checkpoints at every quarter)",
            o.steps
        );
    }
    Ok(o)
}

/// The plan both sides follow (TRL through its flags); `model` is filled in by the caller.
fn plan(o: &Options, model: &Path) -> Value {
    let every = o.steps / 4;
    json!({
        "schema_version": 1,
        "name": NAME,
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
        "evaluation": {"checkpoints": [every, 2 * every, 3 * every, o.steps],
            "dev": {"count": 16, "seed": 1}, "held_out": {"count": 16, "seed": 2},
            "num_generations": 4, "seed": 0, "retention_max_new_tokens": 64},
    })
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

/// `cargo xtask results smollm2 [--steps N] [--learning-rate X] [--threads N]`.
pub(crate) fn run_task(root: &Path, args: &[String]) -> Result<()> {
    let o = parse(args)?;
    let commit = measured_commit();
    let TrlSetup {
        python,
        binary,
        script,
        models,
    } = TrlSetup::prepare(root, "smollm2")?;
    let model = fetch_model::smollm2()?;
    let work = root.join("target/results").join(timestamped(NAME));
    std::fs::create_dir_all(&work)?;
    let plan_file = work.join("plan.json");
    std::fs::write(&plan_file, serde_json::to_string_pretty(&plan(&o, &model))?)?;
    let tasks = work.join("train-tasks.jsonl");
    std::fs::write(&tasks, train_rows())?;
    let threads = o.threads.to_string();

    let ours = work.join("ours");
    let mut train = Command::new(&binary);
    train
        .args(["train", "--plan"])
        .arg(&plan_file)
        .arg("--output")
        .arg(&ours)
        .env("RAYON_NUM_THREADS", &threads);
    let started = Instant::now();
    run(train)?;
    let ours_s = started.elapsed().as_secs_f64();

    let trl_out = work.join("trl.jsonl");
    let trl_adapter = work.join("trl-adapter");
    let mut trl = Command::new(&python);
    trl.arg(&script)
        .args(["--model", "smollm2", "--lora", "--tasks"])
        .arg(&tasks)
        .args(["--reward", "final-number", "--lr-scheduler", "constant"])
        .args(["--learning-rate", &o.learning_rate.to_string()])
        .args(["--steps", &o.steps.to_string(), "--warmup", "0"])
        .args(["--threads", &threads, "--tag", NAME])
        .arg("--workdir")
        .arg(&models)
        .arg("--out")
        .arg(&trl_out)
        .arg("--save-adapter")
        .arg(&trl_adapter);
    let started = Instant::now();
    run(trl)?;
    let trl_s = started.elapsed().as_secs_f64();

    let evaluation = work.join("evaluation");
    let mut evaluate = Command::new(&binary);
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
    let started = Instant::now();
    run(evaluate)?;
    let evaluate_s = started.elapsed().as_secs_f64();

    let dest = root.join("docs/results").join(NAME);
    if dest.exists() {
        eprintln!("results: replacing {}", dest.display());
        std::fs::remove_dir_all(&dest)?;
    }
    copy_dir(&evaluation, &dest.join("evaluation"))?;
    let readme = render(
        &o,
        &plan(
            &o,
            Path::new("<folder printed by `cargo xtask fetch-model smollm2`>"),
        ),
        &Runs {
            commit: &commit,
            ours: &ours,
            trl: &trl_out,
            evaluation: &evaluation,
            seconds: [ours_s, trl_s, evaluate_s],
        },
    )?;
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

struct Runs<'a> {
    /// The commit measured (read at the start).
    commit: &'a str,
    ours: &'a Path,
    trl: &'a Path,
    evaluation: &'a Path,
    /// Wall seconds of our training, TRL's training and the evaluation.
    seconds: [f64; 3],
}

fn read_json(path: &Path) -> Result<Value> {
    let text =
        std::fs::read_to_string(path).with_context(|| format!("reading {}", path.display()))?;
    serde_json::from_str(&text).with_context(|| format!("parsing {}", path.display()))
}

/// Mean training reward per block of `block` steps.
fn blocks(rewards: &[f64], block: usize) -> Vec<f64> {
    rewards
        .chunks(block)
        .map(|c| c.iter().sum::<f64>() / c.len() as f64)
        .collect()
}

fn render(o: &Options, plan: &Value, runs: &Runs) -> Result<String> {
    use std::fmt::Write;
    let report = read_json(&runs.evaluation.join("payload/report.json"))?;
    let ours: Vec<f64> = std::fs::read_to_string(runs.ours.join("metrics.jsonl"))?
        .lines()
        .map(|l| {
            let row: Value = serde_json::from_str(l)?;
            row["reward"].as_f64().context("metrics row without reward")
        })
        .collect::<Result<_>>()?;
    let trl_run: Value = serde_json::from_str(
        std::fs::read_to_string(runs.trl)?
            .lines()
            .last()
            .context("no TRL result line")?,
    )?;
    let trl: Vec<f64> = trl_run["trl_logs"]
        .as_array()
        .context("trl_logs")?
        .iter()
        .filter_map(|r| r["reward"].as_f64())
        .collect();
    let versions = &trl_run["versions"];
    let score = |v: &Value| -> Result<(f64, f64, u64)> {
        Ok((
            v["mean_reward"].as_f64().context("mean_reward")?,
            v["solved"].as_f64().context("solved")?,
            v["episodes"].as_u64().context("episodes")?,
        ))
    };
    let selected = report["selected_step"].as_u64().context("selected_step")?;
    let mut rows = vec![
        ("base model".to_owned(), score(&report["held_out_base"])?),
        (
            format!("hessian-recipes, step {selected} (selected on DEV)"),
            score(&report["held_out_selected"])?,
        ),
    ];
    for c in report["held_out_compared"].as_array().into_iter().flatten() {
        let label = match c["name"].as_str() {
            Some("ours-final") => format!("hessian-recipes, step {} (final)", o.steps),
            Some("trl-final") => format!("TRL GRPOTrainer + PEFT, step {} (final)", o.steps),
            other => other.unwrap_or("?").to_owned(),
        };
        rows.push((label, score(&c["held_out"])?));
    }

    let mut md = String::new();
    writeln!(
        md,
        "# Does it learn? SmolLM2-135M-Instruct, GRPO + LoRA on arithmetic, beside TRL\n"
    )?;
    writeln!(
        md,
        "Measured {} at commit {} on {} ({} threads per side, one side at a time). TRL {} (torch \
         {}, transformers {}, peft {}).\n",
        command_output("date", &["-u", "+%Y-%m-%d %H:%M UTC"]),
        runs.commit,
        cpu_name(),
        o.threads,
        versions["trl"].as_str().unwrap_or("?"),
        versions["torch"].as_str().unwrap_or("?"),
        versions["transformers"].as_str().unwrap_or("?"),
        versions["peft"].as_str().unwrap_or("?"),
    )?;
    writeln!(
        md,
        "Reproduce (about {:.0} minutes on this machine):\n\n```sh\ncargo xtask results smollm2 \
         --steps {} --learning-rate {} --threads {}\n```\n",
        runs.seconds.iter().sum::<f64>() / 60.0 + 2.0,
        o.steps,
        o.learning_rate,
        o.threads
    )?;
    writeln!(
        md,
        "## HELD-OUT mean reward\n\n{} arithmetic questions of the HELD-OUT split (no question \
         shared with TRAIN or DEV; the evaluation checks), {} episodes each at temperature 1, \
         the same seeds for every policy; reward 1 when the answer's final number is the sum. \
         Every row is scored by `hessian-recipes evaluate` on the same base weights; TRL's \
         adapter is loaded from its `save_pretrained` folder.\n",
        report["task_counts"]["held_out"], plan["evaluation"]["num_generations"]
    )?;
    writeln!(
        md,
        "| policy | episodes | mean reward | solved |\n|---|---|---|---|"
    )?;
    for (label, (reward, solved, episodes)) in &rows {
        writeln!(md, "| {label} | {episodes} | {reward:.3} | {solved:.3} |")?;
    }
    writeln!(
        md,
        "\n## Training reward (mean of each block of {} steps)\n",
        o.steps / 4
    )?;
    let block = (o.steps / 4) as usize;
    let (ours_b, trl_b) = (blocks(&ours, block), blocks(&trl, block));
    writeln!(md, "| steps | hessian-recipes | TRL |\n|---|---|---|")?;
    for (i, (a, b)) in ours_b.iter().zip(&trl_b).enumerate() {
        writeln!(
            md,
            "| {}–{} | {a:.3} | {b:.3} |",
            i * block + 1,
            (i + 1) * block
        )?;
    }
    writeln!(
        md,
        "\nWall time: hessian-recipes training {:.0} s, TRL training {:.0} s (each including \
         model load), evaluation {:.0} s.\n",
        runs.seconds[0], runs.seconds[1], runs.seconds[2]
    )?;
    writeln!(
        md,
        "## What both sides ran\n\nThe same 64 TRAIN questions (`train-tasks` written from the \
         plan's fixture draw), the same reward rule (TRL through a Python transcription of \
         `hr-eval`'s final-number rule), the same chat prompt (SmolLM2's template with its \
         default system message), 4 prompts × G = 8 per step, at most 32 new tokens, \
         temperature 1, LoRA r8 α16 on q,k,v,o, β = 0, μ = 1, DAPO loss, group-scaled \
         advantages, AdamW at a constant learning rate of {} with gradient clipping at 1, seed \
         0. What cannot be the same across two frameworks: the random streams (sampling, LoRA \
         initialisation, task order) and therefore every sampled completion. TRL saves only its \
         final adapter, so the like-for-like rows are the two finals; ours is also selected on \
         DEV as `evaluate` does for every run.\n",
        o.learning_rate
    )?;
    writeln!(
        md,
        "The plan (`model.path` is the folder `cargo xtask fetch-model smollm2` prints):\n\n\
         ```json\n{}\n```\n",
        serde_json::to_string_pretty(plan)?
    )?;
    writeln!(
        md,
        "The sealed evaluation is in [`evaluation/`](evaluation/) (`hessian-recipes snapshot \
         verify docs/results/{NAME}/evaluation`); its report with the reward and loss curves, \
         DEV scores by checkpoint, HELD-OUT and MGSM retention bars: \
         [`evaluation/payload/report.md`](evaluation/payload/report.md)."
    )?;
    Ok(md)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn args(words: &[&str]) -> Vec<String> {
        words.iter().map(|w| (*w).to_owned()).collect()
    }

    #[test]
    fn the_written_plan_is_one_hr_plan_accepts() {
        let o = parse(&args(&["smollm2", "--steps", "8"])).expect("options");
        let text = serde_json::to_string(&plan(&o, Path::new("/models/smollm2"))).expect("json");
        let plan = hr_plan::Plan::parse(Path::new("plan.json"), &text).expect("a valid plan");
        let eval = plan.evaluation.expect("evaluation section");
        assert_eq!(eval.checkpoints, [2, 4, 6, 8]);
        assert_eq!(plan.checkpoints.every, 2);
    }

    #[test]
    fn bad_arguments_name_the_flag() {
        for (words, needle) in [
            (&["tiny"][..], "the one result set is `smollm2`"),
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
    fn blocks_average_each_run_of_steps() {
        assert_eq!(blocks(&[1.0, 0.0, 0.5, 0.5, 1.0], 2), [0.5, 0.5, 1.0]);
    }
}
