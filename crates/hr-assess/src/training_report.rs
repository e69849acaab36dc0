//! The training report: `report.md` with the per-step metrics, the training plots (reward
//! with a ±std band, KL, entropy, completion length), drawn with `hr-plot`, and a few of the
//! last step's completions from the run's completions log.

use std::fmt::Write as _;
use std::path::Path;

use hr_config::DEV_REWARD;
use hr_files::IoResultExt;
use hr_plot::{Curve, PlotError, line_svg};
use hr_train::completions::{self, CompletionRecord};
use hr_train::{Sample, best_and_worst};
use serde_json::Value;

use crate::ReportError;

/// `(step, value)` of `key` in metrics rows that have it.
fn series(rows: &[Value], key: &str) -> Vec<(f64, f64)> {
    rows.iter()
        .filter_map(|r| Some((r["step"].as_f64()?, r[key].as_f64()?)))
        .collect()
}

/// The curve of `key` in metrics rows, named `name`.
fn curve(rows: &[Value], key: &str, name: &str) -> Curve {
    Curve::new(name, series(rows, key))
}

/// The training plots of metrics rows: `(file name, title, svg)` for reward (mean with a ±std
/// band, and the DEV reward where the run probed it), KL to the reference, entropy and completion length; a metric the run did not log
/// (KL when `grpo.beta` is 0) gets no plot.
pub fn training_plots(
    rows: &[Value],
) -> Result<Vec<(&'static str, &'static str, String)>, PlotError> {
    let logged = |key: &str| rows.iter().any(|r| r[key].as_f64().is_some());
    let mut reward = curve(rows, "reward", "mean reward (band: ±1 std)");
    reward.band = rows
        .iter()
        .filter_map(|r| {
            let (step, mean, std) = (
                r["step"].as_f64()?,
                r["reward"].as_f64()?,
                r["reward_std"].as_f64()?,
            );
            Some((step, mean - std, mean + std))
        })
        .collect();
    let mut rewards = vec![reward];
    if logged(DEV_REWARD) {
        rewards.push(curve(
            rows,
            DEV_REWARD,
            "DEV mean reward (the steps evaluate adopts)",
        ));
    }
    let plots = [
        (
            "reward.svg",
            "reward",
            line_svg("Reward per step", "reward", &rewards)?,
        ),
        (
            "kl.svg",
            "KL",
            line_svg(
                "KL to the reference policy",
                "kl",
                &[curve(rows, "kl", "kl")],
            )?,
        ),
        (
            "entropy.svg",
            "entropy",
            line_svg(
                "Policy entropy",
                "nats per token",
                &[curve(rows, "entropy", "entropy")],
            )?,
        ),
        (
            "completion_length.svg",
            "completion length",
            line_svg(
                "Completion length",
                "policy tokens",
                &[
                    curve(rows, "completions/mean_length", "mean"),
                    curve(
                        rows,
                        "completions/mean_terminated_length",
                        "mean of those ending on a stop token",
                    ),
                ],
            )?,
        ),
    ];
    let keys = ["reward", "kl", "entropy", "completions/mean_length"];
    Ok(plots
        .into_iter()
        .zip(keys)
        .filter(|(_, key)| logged(key))
        .map(|(plot, _)| plot)
        .collect())
}

/// Writes `report.md` and the training plots into `out` for the metrics rows of this run.
pub fn write_report(out: &Path, name: &str, rows: &[Value]) -> Result<(), ReportError> {
    let mut md = format!("# Training report: {name}\n\n");
    if rows.is_empty() {
        md.push_str("No step ran in this invocation.\n");
    } else {
        for (file, title, svg) in training_plots(rows)? {
            let path = out.join(file);
            std::fs::write(&path, svg).at("write", &path)?;
            let _ = writeln!(md, "![{title}]({file})\n");
        }
        let cols = [
            "reward",
            "reward_std",
            DEV_REWARD,
            "frac_reward_zero_std",
            "loss",
            "kl",
            "entropy",
            "grad_norm",
            "learning_rate",
            "clip_ratio/region_mean",
            "completions/mean_length",
            "completions/clipped_ratio",
            "tokens_per_second",
        ];
        let _ = writeln!(md, "| step | {} |", cols.join(" | "));
        let _ = writeln!(md, "|---|{}", "---|".repeat(cols.len()));
        for r in rows {
            let cells: Vec<String> = cols
                .iter()
                .map(|c| r[*c].as_f64().map_or("-".to_owned(), cell))
                .collect();
            let _ = writeln!(md, "| {} | {} |", r["step"], cells.join(" | "));
        }
        let run = hr_files::RunDir::new(out);
        md.push_str(&samples(&completions::last_step(&run.completions())?));
    }
    let path = hr_files::RunDir::new(out).report();
    std::fs::write(&path, md).at("write", &path)?;
    Ok(())
}

/// The last step's best and worst completions as a report section (none when the run folder
/// has no completions).
fn samples(records: &[CompletionRecord]) -> String {
    let Some(first) = records.first() else {
        return String::new();
    };
    let rewards: Vec<f64> = records.iter().map(|r| r.reward).collect();
    let chosen: Vec<Sample> = best_and_worst(&rewards)
        .into_iter()
        .map(|i| {
            let r = &records[i];
            Sample::new(
                &r.task_id,
                &r.prompt,
                &r.completion,
                r.reward,
                &r.rewards,
                Some(r.advantage),
                r.length,
                r.clipped,
            )
        })
        .collect();
    crate::samples::section(
        &format!(
            "Sample completions (step {}: the best and the worst {} of {}; all are in \
             completions.jsonl.gz)",
            first.step,
            chosen.len(),
            records.len()
        ),
        &chosen,
    )
}

/// A table cell: four decimals for values of everyday size, scientific notation for the very
/// small and very large (a learning rate of 1e-5 reads `1.000e-5`, not `0.0000`).
fn cell(v: f64) -> String {
    if v == 0.0 || (1e-3..1e6).contains(&v.abs()) {
        format!("{v:.4}")
    } else {
        format!("{v:.3e}")
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn table_cells_keep_small_and_large_values_readable() {
        assert_eq!(cell(1e-5), "1.000e-5");
        assert_eq!(cell(0.25), "0.2500");
        assert_eq!(cell(0.0), "0.0000");
        assert_eq!(cell(-3e-4), "-3.000e-4");
        assert_eq!(cell(2.5e7), "2.500e7");
    }

    fn record(task: &str, reward: f64) -> CompletionRecord {
        CompletionRecord {
            step: 3,
            task_id: task.to_owned(),
            prompt: "Q?".to_owned(),
            completion: format!("answer ```{task}```"),
            rewards: std::collections::BTreeMap::from([("accuracy".to_owned(), reward)]),
            reward,
            scorable: true,
            advantage: reward - 0.5,
            length: 4,
            clipped: task == "c",
            cut: false,
        }
    }

    #[test]
    fn samples_show_the_best_and_the_worst_completions_fenced_safely() {
        assert_eq!(samples(&[]), "");
        let md = samples(&[
            record("a", 0.5),
            record("b", 1.0),
            record("c", 0.0),
            record("d", 0.25),
            record("e", 0.75),
        ]);
        let heads: Vec<&str> = md.lines().filter(|l| l.starts_with("### ")).collect();
        assert_eq!(
            heads,
            [
                "### Task `b`: reward 1.000 (accuracy 1.000), advantage 0.500, 4 tokens",
                "### Task `e`: reward 0.750 (accuracy 0.750), advantage 0.250, 4 tokens",
                "### Task `d`: reward 0.250 (accuracy 0.250), advantage -0.250, 4 tokens",
                "### Task `c`: reward 0.000 (accuracy 0.000), advantage -0.500, 4 tokens, clipped",
            ]
        );
        assert!(md.contains("step 3: the best and the worst 4 of 5"), "{md}");
        assert!(md.contains("````text\nanswer ```b```\n````\n"), "{md}");
        let one = samples(&[record("a", 1.0)]);
        assert_eq!(one.matches("### ").count(), 1, "a completion is shown once");
    }

    #[test]
    fn the_plot_set_is_what_the_run_logged() {
        let rows: Vec<Value> = (1..=3)
            .map(|s| serde_json::json!({"step": s, "reward": 0.5, "reward_std": 0.1}))
            .collect();
        let plots = training_plots(&rows).unwrap();
        let names: Vec<&str> = plots.iter().map(|p| p.0).collect();
        assert_eq!(names, ["reward.svg"], "only what the run logged");
        assert!(plots[0].2.contains("\nstep\n") && plots[0].2.contains("±1 std"));
    }
}
