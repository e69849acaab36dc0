//! The evaluation's sealed folder: `payload/report.json` (the [`Assessment`]), `payload/report.md`
//! and SVG plots (the run's training plots, DEV reward by checkpoint, HELD-OUT base vs selected,
//! MGSM retention by language, sample completions of the selected checkpoint and the base),
//! with any compared adapters beside them, and the services' log;
//! sealed as one snapshot bound to the plan's digest and exactly the adopted checkpoints.

use std::fmt::Write as _;
use std::path::Path;

use hr_files::IoResultExt;
use hr_plan::Plan;
use hr_plot::bars_svg;
use hr_seal::{KeyPair, RunIdentity, SnapshotWriter, SourceBinding, sha256_hex};
use serde_json::{Value, json};

use crate::samples::section;
use crate::{Assessment, ReportError, training_plots};
use hr_train::EpisodeScore;

/// The services' log while they run in the output folder (then sealed as
/// `payload/service.log`).
pub const SERVICE_LOG: &str = "service.log";

fn markdown(plan: &Plan, a: &Assessment, plots: &[(&str, &str, String)]) -> String {
    let training: String = plots
        .iter()
        .map(|(file, title, _)| format!("![{title}]({file})\n\n"))
        .collect();
    let mut md = format!(
        "# Evaluation of `{}`\n\n{training}\
         ## DEV selection\n\nRule: {}. Solved: {}.\n\n\
         | step | checkpoint | DEV mean reward | DEV solved | reward functions |\n|---|---|---|---|---|\n",
        plan.name, a.selection_rule, a.solved_rule
    );
    for c in &a.checkpoints {
        let mark = if c.checkpoint.step == a.selected_step {
            " (selected)"
        } else {
            ""
        };
        let _ = writeln!(
            md,
            "| {}{mark} | {} | {:.3} | {:.3} | {} |",
            c.checkpoint.step,
            c.checkpoint.uuid,
            c.dev.mean_reward,
            c.dev.solved,
            parts(&c.dev)
        );
    }
    let _ = write!(
        md,
        "\n![DEV reward by checkpoint](dev.svg)\n\n## HELD-OUT agent assessment\n\n\
         | policy | episodes | mean reward | solved | reward functions |\n|---|---|---|---|---|\n\
         | base | {} | {:.3} | {:.3} | {} |\n| step {} | {} | {:.3} | {:.3} | {} |\n",
        a.held_out_base.episodes,
        a.held_out_base.mean_reward,
        a.held_out_base.solved,
        parts(&a.held_out_base),
        a.selected_step,
        a.held_out_selected.episodes,
        a.held_out_selected.mean_reward,
        a.held_out_selected.solved,
        parts(&a.held_out_selected),
    );
    for c in &a.held_out_compared {
        let _ = writeln!(
            md,
            "| {} (compared) | {} | {:.3} | {:.3} | {} |",
            c.name,
            c.held_out.episodes,
            c.held_out.mean_reward,
            c.held_out.solved,
            parts(&c.held_out)
        );
    }
    let names: Vec<&str> = a
        .held_out_compared
        .iter()
        .map(|c| c.name.as_str())
        .collect();
    md.push_str("\n![HELD-OUT](held_out.svg)\n");
    let title = |set: &str, policy: String| format!("Sample completions: {set}, {policy}");
    let selected = format!("step {} (selected)", a.selected_step);
    md.push_str(&section(
        &title("HELD-OUT", selected.clone()),
        &a.held_out_selected.samples,
    ));
    md.push_str(&section(
        &title("HELD-OUT", "the base model".to_owned()),
        &a.held_out_base.samples,
    ));
    if let Some(c) = a
        .checkpoints
        .iter()
        .find(|c| c.checkpoint.step == a.selected_step)
    {
        md.push_str(&section(&title("DEV", selected), &c.dev.samples));
    }
    md.push_str(&retention_section(a, &names));
    if !a.held_out_compared.is_empty() {
        let _ = write!(
            md,
            "\nCompared adapters (SHA-256 of `adapter_model.safetensors`): {}. They run the same \
             HELD-OUT episodes (same seeds) and MGSM items on the same base model and take no \
             part in the DEV selection.\n",
            a.held_out_compared
                .iter()
                .map(|c| format!("{} `{}`", c.name, c.adapter_sha256))
                .collect::<Vec<_>>()
                .join(", ")
        );
    }
    let _ = write!(
        md,
        "\n{}Tasks: {}. DEV selects, HELD-OUT only assesses; the sets share no question.\n",
        if a.retention.is_empty() {
            ""
        } else {
            "![MGSM retention](retention.svg)\n\n"
        },
        a.task_counts
            .iter()
            .map(|(k, v)| format!("{k} {v}"))
            .collect::<Vec<_>>()
            .join(", ")
    );
    md
}

/// The MGSM retention section: each language's accuracy, or that the check was skipped.
fn retention_section(a: &Assessment, names: &[&str]) -> String {
    if a.retention.is_empty() {
        return format!("\n## MGSM retention\n\nThe set: {}.\n", a.retention_set);
    }
    let mut md = String::new();
    let _ = write!(
        md,
        "\n## MGSM retention (greedy)\n\nThe set: {}.\n\n\
         | language | items | base | selected | drop |{}\n|---|---|---|---|---|{}\n",
        a.retention_set,
        names.iter().map(|n| format!(" {n} |")).collect::<String>(),
        "---|".repeat(names.len())
    );
    for r in &a.retention {
        let _ = writeln!(
            md,
            "| {} | {} | {:.3} | {:.3} | {:+.3} |{}",
            r.lang,
            r.items,
            r.base,
            r.selected,
            r.drop,
            names
                .iter()
                .map(|n| format!(" {:.3} |", r.compared.get(*n).copied().unwrap_or_default()))
                .collect::<String>()
        );
    }
    md
}

/// Each reward function's mean score, where the environment names them.
fn parts(score: &EpisodeScore) -> String {
    if score.parts.is_empty() {
        return "—".to_owned();
    }
    score
        .parts
        .iter()
        .map(|(name, mean)| format!("{name} {mean:.3}"))
        .collect::<Vec<_>>()
        .join(", ")
}

/// Writes and seals the evaluation of `plan` (the run's metrics `rows`, the assessment `a`)
/// into `out`, by the binary `source`, signed with `key` when given.
pub fn write_evaluation(
    out: &Path,
    plan: &Plan,
    rows: &[Value],
    a: &Assessment,
    (key, source): (Option<&KeyPair>, SourceBinding),
) -> Result<(), ReportError> {
    let selected = format!("step {}", a.selected_step);
    let mut policies = vec!["base", selected.as_str()];
    policies.extend(a.held_out_compared.iter().map(|c| c.name.as_str()));
    let mut held_out = vec![a.held_out_base.mean_reward, a.held_out_selected.mean_reward];
    held_out.extend(a.held_out_compared.iter().map(|c| c.held_out.mean_reward));
    let plots = training_plots(rows)?;
    let mut files: Vec<(&str, Vec<u8>)> = vec![
        (
            "report.json",
            serde_json::to_vec_pretty(a).expect("an assessment serialises"),
        ),
        ("report.md", markdown(plan, a, &plots).into_bytes()),
        (
            "dev.svg",
            bars_svg(
                "DEV mean reward by checkpoint",
                &["DEV"],
                &a.checkpoints
                    .iter()
                    .map(|c| {
                        (
                            format!("step {}", c.checkpoint.step),
                            vec![c.dev.mean_reward],
                        )
                    })
                    .collect::<Vec<_>>(),
            )?
            .into_bytes(),
        ),
        (
            "held_out.svg",
            bars_svg(
                "HELD-OUT mean reward",
                &policies,
                &[("held-out".to_owned(), held_out)],
            )?
            .into_bytes(),
        ),
    ];
    if !a.retention.is_empty() {
        files.push((
            "retention.svg",
            bars_svg(
                "MGSM accuracy by language",
                &policies,
                &a.retention
                    .iter()
                    .map(|r| {
                        let mut bars = vec![r.base, r.selected];
                        bars.extend(
                            a.held_out_compared
                                .iter()
                                .map(|c| r.compared.get(&c.name).copied().unwrap_or_default()),
                        );
                        (r.lang.clone(), bars)
                    })
                    .collect::<Vec<_>>(),
            )?
            .into_bytes(),
        ));
    }
    files.extend(
        plots
            .iter()
            .map(|(file, _, svg)| (*file, svg.clone().into_bytes())),
    );
    // The output depends on the run's plan and exactly these checkpoints.
    let config = json!({
        "command": "evaluate",
        "plan_sha256": plan.sha256(),
        "evaluation": plan.evaluation,
        "checkpoints": a.checkpoints.iter().map(|c| &c.checkpoint).collect::<Vec<_>>(),
        "compared": a.held_out_compared.iter()
            .map(|c| json!({"name": c.name, "adapter_sha256": c.adapter_sha256}))
            .collect::<Vec<_>>(),
    });
    let mut writer = SnapshotWriter::in_place(
        out,
        RunIdentity {
            run_id: format!("evaluate:{}", plan.name),
            writer: "local".to_owned(),
        },
        a.selected_step,
        source,
        sha256_hex(config.to_string().as_bytes()),
    );
    writer
        .tool("hessian-recipes", env!("CARGO_PKG_VERSION"))
        .tool("hr-eval", hr_eval::VERSION);
    for (file, bytes) in &files {
        let role = if file.ends_with(".svg") {
            "plot"
        } else {
            "report"
        };
        writer.add_bytes(&format!("payload/{file}"), role, bytes)?;
    }
    // What the environment's services (a Python reward, a server) logged: sealed with the rest,
    // so the folder holds nothing the manifest does not list.
    let log = out.join(SERVICE_LOG);
    if log.is_file() {
        writer.add_file(&format!("payload/{SERVICE_LOG}"), "log", &log)?;
        std::fs::remove_file(&log).at("remove", &log)?;
    }
    writer.seal(key)?.commit()?;
    Ok(())
}
