//! `cargo xtask bench core`: Core API throughput (training-metric reports/s and checkpoints/s)
//! and `det experiment pause` latency, our `hr-core` against Python `determined.core` 0.35, on
//! one devmaster in one run (`xtask/conformance/bench_core.py` drives the real `det`). Prints a
//! table and writes it to `docs/bench/core.md`.

use std::fmt::Write as _;
use std::io::{BufRead, BufReader};
use std::path::Path;
use std::process::Stdio;

use anyhow::{Context, Result, bail};
use serde_json::Value;

use crate::bench_trl::measured_commit;
use crate::cache::venv;
use crate::conformance::{DETERMINED, det_driver, start_devmaster, target_dir};
use crate::{cargo, release_binary, run, timestamped};

/// `cargo xtask bench core [--reports N] [--rounds N] [--pauses N]`.
pub(crate) fn run_task(root: &Path, args: &[String]) -> Result<()> {
    let mut driver_args = Vec::new();
    let mut it = args.iter();
    while let Some(flag) = it.next() {
        match flag.as_str() {
            "--reports" | "--rounds" | "--pauses" => {
                let value = it
                    .next()
                    .with_context(|| format!("{flag} needs a number"))?;
                if value.parse::<u32>().ok().filter(|n| *n > 0).is_none() {
                    bail!("{flag} {value:?}: give a positive whole number");
                }
                driver_args.extend([flag.clone(), value.clone()]);
            }
            other => bail!(
                "bench core: unknown argument {other:?}: use --reports N, --rounds N, --pauses N"
            ),
        }
    }
    let venv = venv("venv-determined-0.35.0", &[DETERMINED])?;
    let bin = release_binary(root, &[])?
        .parent()
        .context("the release folder")?
        .to_owned();
    let mut build = cargo();
    build.args([
        "build",
        "--release",
        "--locked",
        "--package",
        "hr-core",
        "--bins",
    ]);
    run(build)?;
    let work = target_dir(root)
        .join("bench-core")
        .join(timestamped("core"));
    let state = work.join("state");
    std::fs::create_dir_all(&work)?;
    let (devmaster, url) = start_devmaster(&bin.join("hessian-recipes"), &state, &[])?;
    let script = root.join("xtask/conformance/bench_core.py");
    let mut driver = det_driver(&venv, &script, &url, &bin, &state);
    driver
        .arg("--work")
        .arg(&work)
        .args(&driver_args)
        .stdout(Stdio::piped());
    let mut child = driver.spawn().context("starting bench_core.py")?;
    let stdout = child.stdout.take().context("driver stdout")?;
    let mut summary = None;
    for line in BufReader::new(stdout).lines() {
        let line = line?;
        eprintln!("{line}");
        if let Some(json) = line.strip_prefix("bench-core: {") {
            summary = Some(serde_json::from_str::<Value>(&format!("{{{json}"))?);
        }
    }
    let status = child.wait()?;
    drop(devmaster);
    let summary = match (status.success(), summary) {
        (true, Some(s)) => s,
        _ => bail!(
            "bench_core.py failed ({status}); its work is in {}",
            work.display()
        ),
    };
    let table = render(&summary)?;
    println!("{table}");
    let doc = root.join("docs/bench/core.md");
    std::fs::write(&doc, &table)?;
    eprintln!("bench: wrote {}", doc.display());
    Ok(())
}

fn render(s: &Value) -> Result<String> {
    let num = |kind: &str, key: &str| -> Result<f64> {
        s[kind][key]
            .as_f64()
            .with_context(|| format!("{kind}.{key} in the driver's summary"))
    };
    let mut md = String::new();
    writeln!(
        md,
        "# Core API: hr-core and Python determined.core 0.35, side by side\n"
    )?;
    writeln!(
        md,
        "Measured at commit {} with `cargo xtask bench core` ({} reports and {} checkpoints per \
         trial, {} rounds alternating, {} pauses per kind) against one devmaster on this machine \
         ({} cores). Throughput: medians over the rounds of N calls timed as a whole inside a \
         trial: queued reports (`queue_training_metrics` in hr-core, up to 8 in flight; \
         `report_training_metrics` in determined.core, one background sender) until all are \
         delivered, hr-core's synchronous reports alone, and checkpoints. Pause: from the start \
         of `det experiment pause` until the trial has saved its step, acknowledged the \
         preemption and printed so, and `det experiment describe` says PAUSED (the trial steps \
         every 0.2 s, so up to one step of waiting is in it); median. The devmaster stores each \
         change durably before it answers (group commit).\n",
        measured_commit(),
        s["reports"],
        s["reports"],
        s["rounds"],
        s["pauses"],
        std::thread::available_parallelism().map_or(0, |n| n.get()),
    )?;
    writeln!(
        md,
        "| client | queued reports/s delivered | queue calls returned/s | synchronous reports/s | checkpoints/s | pause → acked and PAUSED |"
    )?;
    writeln!(md, "|---|---|---|---|---|---|")?;
    for (name, kind) in [
        ("hr-core (Rust)", "rust"),
        ("determined.core 0.35 (Python)", "python"),
    ] {
        let sync = s[kind]["metrics_sync_per_s"]
            .as_f64()
            .map_or_else(|| "—".to_owned(), |v| format!("{v:.0}"));
        writeln!(
            md,
            "| {name} | {:.0} | {:.0} | {sync} | {:.0} | {:.2} s |",
            num(kind, "metrics_per_s")?,
            num(kind, "metrics_queued_per_s")?,
            num(kind, "checkpoints_per_s")?,
            num(kind, "pause_s")?
        )?;
    }
    writeln!(
        md,
        "\n**Ratios (Rust ÷ Python): queued reports/s delivered {:.1}×, queue calls returned/s \
         {:.2}×, hr-core synchronous ÷ Python delivered {:.1}×, checkpoints/s {:.1}×.** Goal: ≥ 5× \
         reports/s; pause within 1 s plus the snapshot write.",
        num("rust", "metrics_per_s")? / num("python", "metrics_per_s")?,
        num("rust", "metrics_queued_per_s")? / num("python", "metrics_queued_per_s")?,
        num("rust", "metrics_sync_per_s")? / num("python", "metrics_per_s")?,
        num("rust", "checkpoints_per_s")? / num("python", "checkpoints_per_s")?,
    )?;
    Ok(md)
}
