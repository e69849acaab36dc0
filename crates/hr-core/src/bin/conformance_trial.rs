//! The Rust twin of `xtask/conformance/core_trial.py` for the devmaster conformance check: a
//! trial on `hr-core` that restores `state.json` from the latest checkpoint, reports a metric and
//! a checkpoint per step, and on preemption acknowledges and exits 0 (with `HOLD_AT_STEP=N` its
//! first run waits after step N until preempted). With `BENCH_REPORTS=N` it
//! instead times N synchronous metric reports, N queued ones (delivered when flushed) and N
//! checkpoints (`cargo xtask bench core`). Not a user tool.
#![allow(clippy::print_stdout)]

use std::{process::ExitCode, time::Duration};

use hr_core::CoreContext;
use serde_json::json;

fn main() -> ExitCode {
    match run() {
        Ok(()) => ExitCode::SUCCESS,
        Err(e) => {
            println!("error: {e}");
            ExitCode::from(1)
        }
    }
}

fn run() -> Result<(), Box<dyn std::error::Error>> {
    // `--local DIR`: the same trial off-cluster (8 steps, SIGTERM/SIGINT preempt).
    let args: Vec<String> = std::env::args().collect();
    let ctx = match args
        .iter()
        .position(|a| a == "--local")
        .and_then(|i| args.get(i + 1))
    {
        Some(dir) => CoreContext::local(std::path::Path::new(dir), 8)?,
        None => CoreContext::from_environment()?,
    };
    if let Some(n) = std::env::var("BENCH_REPORTS")
        .ok()
        .and_then(|s| s.parse::<u64>().ok())
    {
        return bench(&ctx, n);
    }
    let step_seconds: f64 = std::env::var("STEP_SECONDS")
        .ok()
        .and_then(|s| s.parse().ok())
        .unwrap_or(0.5);
    // HOLD_AT_STEP=N: the first run waits after step N until a preemption comes (at most ten
    // minutes), so a pause sent on seeing that step's line lands there however slowly it is sent.
    let hold_at: Option<u64> = std::env::var("HOLD_AT_STEP")
        .ok()
        .and_then(|s| s.parse().ok())
        .filter(|_| ctx.info().trial_run_id == 1);
    let mut step = 0u64;
    if let Some(uuid) = ctx.info().latest_checkpoint.clone() {
        let state: serde_json::Value =
            serde_json::from_slice(&std::fs::read(ctx.restore_path(&uuid)?.join("state.json"))?)?;
        step = state["step"].as_u64().unwrap_or(0);
        println!(
            "restored {uuid} at step {step} run {}",
            ctx.info().trial_run_id
        );
    }
    while let Some(op) = ctx.searcher_operation()? {
        while step < op.length {
            step += 1;
            ctx.report_training_metrics(step, json!({"loss": 1.0 / step as f64}))?;
            let ck = ctx.store_path()?;
            std::fs::write(
                ck.path().join("state.json"),
                json!({"step": step}).to_string(),
            )?;
            let uuid = ctx.report_checkpoint(ck, step, json!({}))?;
            ctx.report_progress(step as f64)?;
            // The step's line comes after the preemption check, so a caller that signals on
            // seeing it knows the trial has decided to go on (and sleeps STEP_SECONDS).
            let mut preempted = ctx.should_preempt();
            println!("step {step} checkpoint {uuid}");
            if !preempted && hold_at == Some(step) {
                let held = std::time::Instant::now();
                while !ctx.should_preempt() && held.elapsed() < Duration::from_secs(600) {
                    std::thread::sleep(Duration::from_millis(20));
                }
                preempted = ctx.should_preempt();
            }
            if preempted {
                ctx.acknowledge_preemption()?;
                println!("preempted at step {step}");
                return Ok(());
            }
            std::thread::sleep(Duration::from_secs_f64(step_seconds));
        }
        ctx.complete_operation(op, 1.0 / step as f64)?;
    }
    println!("completed at step {step}");
    Ok(())
}

/// N training-metric reports, then N checkpoints of one small file, each timed as a whole.
fn bench(ctx: &CoreContext, n: u64) -> Result<(), Box<dyn std::error::Error>> {
    let loss = |step: u64| json!({"loss": 1.0 / step as f64});
    // Synchronous: each call returns once its report is delivered.
    let started = std::time::Instant::now();
    for step in 1..=n {
        ctx.report_training_metrics(step, loss(step))?;
    }
    println!(
        "bench metrics-sync {n} {:.6}",
        started.elapsed().as_secs_f64()
    );
    // Queued, as determined.core does, then flushed: every report delivered.
    let started = std::time::Instant::now();
    for step in n + 1..=2 * n {
        ctx.queue_training_metrics(step, loss(step))?;
    }
    println!(
        "bench metrics-queued {n} {:.6}",
        started.elapsed().as_secs_f64()
    );
    ctx.flush_metrics()?;
    println!("bench metrics {n} {:.6}", started.elapsed().as_secs_f64());
    let started = std::time::Instant::now();
    for step in 1..=n {
        let ck = ctx.store_path()?;
        std::fs::write(
            ck.path().join("state.json"),
            json!({"step": step}).to_string(),
        )?;
        ctx.report_checkpoint(ck, step, json!({}))?;
    }
    println!(
        "bench checkpoints {n} {:.6}",
        started.elapsed().as_secs_f64()
    );
    Ok(())
}
