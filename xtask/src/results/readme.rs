//! The results README: both runs' per-step logs read back, the side-by-side reward and
//! metric plots, the retention summary and the page itself, with each set's own sentences.

use std::path::Path;

use anyhow::{Context, Result};
use serde_json::Value;

use super::{RunRecord, Set, plan, read_json};
use crate::bench_trl::{cpu_name, trl_versions};

/// The per-step logs of both training runs in a work folder.
pub(super) struct Logs {
    /// Our `metrics.jsonl` rows.
    pub(super) ours: Vec<Value>,
    /// TRL's logged rows (`trl_logs`: its own metric names, which ours share).
    pub(super) trl: Vec<Value>,
    /// TRL's library versions.
    pub(super) versions: Value,
}

impl Logs {
    pub(super) fn read(work: &Path) -> Result<Self> {
        let metrics = work.join("ours/metrics.jsonl");
        let ours = std::fs::read_to_string(&metrics)
            .with_context(|| format!("reading {}", metrics.display()))?
            .lines()
            .map(|l| Ok(serde_json::from_str(l)?))
            .collect::<Result<_>>()?;
        let mut trl_run: Value = serde_json::from_str(
            std::fs::read_to_string(work.join("trl.jsonl"))?
                .lines()
                .last()
                .context("no TRL result line")?,
        )?;
        let trl = serde_json::from_value(trl_run["trl_logs"].take()).context("trl_logs")?;
        Ok(Self {
            ours,
            trl,
            versions: trl_run["versions"].take(),
        })
    }
}

/// `(step, value)` of `key` in logged rows that have both.
fn curve(rows: &[Value], key: &str) -> Vec<(f64, f64)> {
    rows.iter()
        .filter_map(|r| Some((r["step"].as_f64()?, r[key].as_f64()?)))
        .collect()
}

/// `(file, title, svg)`: each metric both runs logged, ours and TRL's per step on one axis: the
/// reward, each reward function's part (`rewards/<name>/mean`), completion length and entropy.
pub(super) fn side_by_side(logs: &Logs) -> Result<Vec<(String, String, String)>> {
    let parts = logs
        .ours
        .first()
        .and_then(Value::as_object)
        .map_or_else(Vec::new, |row| {
            row.keys()
                .filter_map(|k| k.strip_prefix("rewards/")?.strip_suffix("/mean"))
                .map(|name| {
                    (
                        format!("reward-{name}.svg"),
                        format!("Reward function `{name}` per step"),
                        format!("rewards/{name}/mean"),
                        "mean score",
                    )
                })
                .collect()
        });
    let metrics = [(
        "reward.svg".to_owned(),
        "Training reward per step".to_owned(),
        "reward".to_owned(),
        "mean reward",
    )]
    .into_iter()
    .chain(parts)
    .chain([
        (
            "completion_length.svg".to_owned(),
            "Completion length per step".to_owned(),
            "completions/mean_length".to_owned(),
            "policy tokens",
        ),
        (
            "entropy.svg".to_owned(),
            "Policy entropy per step".to_owned(),
            "entropy".to_owned(),
            "nats per token",
        ),
    ]);
    let mut plots = Vec::new();
    for (file, title, key, y_desc) in metrics {
        let (ours, trl) = (curve(&logs.ours, &key), curve(&logs.trl, &key));
        if ours.is_empty() || trl.is_empty() {
            continue;
        }
        let curves = [
            hr_plot::Curve::new("hessian-recipes", ours),
            hr_plot::Curve::new("TRL", trl),
        ];
        let svg = hr_plot::line_svg(&title, y_desc, &curves)?;
        plots.push((file, title, svg));
    }
    Ok(plots)
}

/// Mean training reward per block of `block` steps.
pub(super) fn blocks(rewards: &[f64], block: usize) -> Vec<f64> {
    rewards
        .chunks(block)
        .map(|c| c.iter().sum::<f64>() / c.len() as f64)
        .collect()
}

/// MGSM accuracy over all items for each policy the evaluation answered with.
pub(super) fn retention_summary(report: &Value) -> Result<String> {
    let rows = report["retention"].as_array().context("retention")?;
    let items: u64 = rows.iter().filter_map(|r| r["items"].as_u64()).sum();
    let accuracy = |get: &dyn Fn(&Value) -> Option<f64>| {
        let correct: f64 = rows
            .iter()
            .map(|r| get(r).unwrap_or(0.0) * r["items"].as_f64().unwrap_or(0.0))
            .sum();
        correct / items.max(1) as f64
    };
    let base = accuracy(&|r| r["base"].as_f64());
    let mut text = format!(
        "MGSM retention (greedy, {items} items in {} languages): base {base:.3}, selected {:.3}",
        rows.len(),
        accuracy(&|r| r["selected"].as_f64())
    );
    for c in report["held_out_compared"].as_array().into_iter().flatten() {
        let name = c["name"].as_str().unwrap_or("?");
        text += &format!(
            ", {name} {:.3}",
            accuracy(&|r| r["compared"][name].as_f64())
        );
    }
    text += ".";
    if base == 0.0 {
        text += " The base model solves none of these multi-step problems, so this run cannot \
                 show forgetting on them; the check needs a model that solves some.";
    }
    Ok(text)
}

/// The README of the results in the finished work folder `work`.
pub(super) fn render(
    record: &RunRecord,
    work: &Path,
    logs: &Logs,
    plots: &[(String, String, String)],
) -> Result<String> {
    use std::fmt::Write;
    let o = &record.options;
    let plan = &plan(
        o,
        Path::new("<folder printed by `hessian-recipes model fetch smollm2`>"),
        None,
    )?;
    let text = SetText::of(o.set, plan);
    let report = read_json(&work.join("evaluation/payload/report.json"))?;
    let rewards =
        |rows: &[Value]| -> Vec<f64> { curve(rows, "reward").iter().map(|p| p.1).collect() };
    let (ours, trl) = (rewards(&logs.ours), rewards(&logs.trl));
    let versions = &logs.versions;
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
        "# Does it learn? SmolLM2-135M-Instruct, GRPO + LoRA on {}, beside TRL\n",
        text.task
    )?;
    writeln!(
        md,
        "Measured {} at commit {} on {} ({} threads per side, one side at a time). {}.\n",
        record.measured,
        record.commit,
        cpu_name(),
        o.threads,
        trl_versions(versions),
    )?;
    writeln!(
        md,
        "Reproduce (about {:.0} minutes on this machine):\n\n```sh\ncargo xtask results {} \
         --steps {} --learning-rate {} --threads {}\n```\n",
        record.seconds.iter().sum::<f64>() / 60.0 + 2.0,
        o.set.arg(),
        o.steps,
        o.learning_rate,
        o.threads
    )?;
    writeln!(
        md,
        "## HELD-OUT mean reward\n\n{} {} (no question shared with TRAIN or DEV; the \
         evaluation checks), {} episodes each at temperature 1, the same seeds for every \
         policy; {} Every row is scored by `hessian-recipes evaluate` on the same base weights; \
         TRL's adapter is loaded from its `save_pretrained` folder.\n",
        report["task_counts"]["held_out"],
        text.held_out,
        plan["evaluation"]["num_generations"],
        text.reward,
    )?;
    writeln!(
        md,
        "| policy | episodes | mean reward | solved |\n|---|---|---|---|"
    )?;
    for (label, (reward, solved, episodes)) in &rows {
        writeln!(md, "| {label} | {episodes} | {reward:.3} | {solved:.3} |")?;
    }
    writeln!(md, "\n{}", retention_summary(&report)?)?;
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
        "\nPer step, both runs on the same axes (each point is the mean over the step's 32 \
         completions, so single steps are noisy; the blocks above average them):\n"
    )?;
    for (file, title, _) in plots {
        writeln!(md, "![{title}]({file})\n")?;
    }
    writeln!(
        md,
        "Wall time: hessian-recipes training {:.0} s, TRL training {:.0} s (each including \
         model load), evaluation {:.0} s. These are not a speed comparison: the machine may \
         have done other work meanwhile; `cargo xtask bench grpo --vs-trl` measures speed.\n",
        record.seconds[0], record.seconds[1], record.seconds[2]
    )?;
    writeln!(
        md,
        "## What both sides ran\n\n{} 4 prompts × G = 8 per step, at most 32 new tokens, \
         temperature 1, LoRA r8 α16 on q,k,v,o, β = 0, μ = 1, DAPO loss, group-scaled \
         advantages, AdamW at a constant learning rate of {} with gradient clipping at 1, seed \
         0. What cannot be the same across two frameworks: the random streams (sampling, LoRA \
         initialisation, task order) and therefore every sampled completion. TRL saves only its \
         final adapter, so the like-for-like rows are the two finals; ours is also selected on \
         DEV as `evaluate` does for every run.\n",
        text.both_ran, o.learning_rate
    )?;
    writeln!(
        md,
        "The plan (`model.path` is the folder `hessian-recipes model fetch smollm2` prints):\n\n\
         ```json\n{}\n```\n",
        serde_json::to_string_pretty(plan)?
    )?;
    writeln!(
        md,
        "The sealed evaluation is in [`evaluation/`](evaluation/) (`hessian-recipes snapshot \
         verify docs/results/{}/evaluation`); its report with our run's training curves (reward, \
         completion length, entropy), DEV scores by checkpoint, HELD-OUT and MGSM retention bars: \
         [`evaluation/payload/report.md`](evaluation/payload/report.md).",
        o.set.docs_name()
    )?;
    Ok(md)
}

/// The sentences of a result set's README that differ between the sets.
struct SetText {
    /// What is learnt (the title's end).
    task: &'static str,
    /// What the HELD-OUT rows are, after their count.
    held_out: &'static str,
    /// How an episode is scored (a sentence).
    reward: String,
    /// What both sides were given (sentences, before the shared settings).
    both_ran: &'static str,
}

impl SetText {
    fn of(set: Set, plan: &Value) -> Self {
        match set {
            Set::Arithmetic => Self {
                task: "arithmetic",
                held_out: "arithmetic questions of the HELD-OUT split",
                reward: "reward 1 when the answer's final number is the sum.".to_owned(),
                both_ran: "The same 64 TRAIN questions (the command writes the plan's fixture \
                           draw for TRL), the same reward rule (TRL through a Python \
                           transcription of `hr-eval`'s final-number rule), the same chat prompt \
                           (SmolLM2's template with its default system message),",
            },
            Set::OwnData => {
                let weights: Vec<String> = plan["environment"]["rewards"]
                    .as_array()
                    .into_iter()
                    .flatten()
                    .map(|r| {
                        format!(
                            "{} × `{}`",
                            r["weight"],
                            r["function"].as_str().unwrap_or("?")
                        )
                    })
                    .collect();
                Self {
                    task: "your own data (a JSON-lines dataset and Python reward functions)",
                    held_out: "word problems drawn from `plans/own-data/held_out.jsonl`",
                    reward: format!(
                        "an episode's reward is {} from `plans/own-data/rewards.py` (`correct`: \
                         the last whole number is the answer; `concise`: at most 80 \
                         characters), so `solved` (reward ≥ 1) is the share answered correctly.",
                        weights.join(" + ")
                    ),
                    both_ran: "The same 64 TRAIN rows of `plans/own-data/train.jsonl` (chat \
                               messages and an `answer` column), the same reward file called the \
                               same way (TRL's `reward_funcs` with `reward_weights`; ours as \
                               `python` rewards of the plan), the same chat prompt (SmolLM2's \
                               template with its default system message),",
                }
            }
        }
    }
}
