//! `cargo xtask conformance tensorboard`: the event files `train` writes, read back by the real
//! `tensorboard` package (`xtask/conformance/read_tfevents.py`, in its own cached venv): every
//! number of every metrics row is a `train/<name>` scalar at its step, for a run stopped after
//! step 2 and for its resume into a new folder (whose event file carries the restored history),
//! and each step this folder ran has its completions as a text summary beside the run's
//! `completions.jsonl.gz`.

use std::{path::Path, process::Command};

use anyhow::{Context, Result};

use crate::cache::venv;
use crate::conformance::{target_dir, training_plan};

/// The reader's venv.
const TB_VENV: &str = "venv-tensorboard-2.21.0";
const TB_PACKAGES: &[&str] = &["tensorboard==2.21.0"];

/// Returns (passed, failed).
pub(crate) fn tensorboard(root: &Path) -> Result<(u64, u64)> {
    let python = venv(TB_VENV, TB_PACKAGES)?.join("bin/python");
    let bin = crate::debug_binaries(root)?.join("hessian-recipes");
    let work = target_dir(root)
        .join("conformance")
        .join(format!("tensorboard-{}", std::process::id()));
    std::fs::create_dir_all(&work)?;
    let environment = serde_json::json!({"backend": "fixture",
        "tasks": {"kind": "digits", "count": 4, "seed": 1}});
    let grpo = serde_json::json!({"tasks_per_step": 2, "num_generations": 2,
        "max_completion_length": 8, "max_turn_tokens": 8, "prompt_format": "plain"});
    let plan = training_plan(root, &work, "tensorboard", &environment, &grpo, 3)?;
    let (stopped, resumed) = (work.join("stopped"), work.join("resumed"));
    let mut first = Command::new(&bin);
    first
        .arg("train")
        .arg("--plan")
        .arg(&plan)
        .arg("--output")
        .arg(&stopped)
        .args(["--stop-after-step", "2"]);
    crate::run(first)?;
    let mut second = Command::new(&bin);
    second
        .arg("train")
        .arg("--plan")
        .arg(&plan)
        .arg("--output")
        .arg(&resumed)
        .arg("--resume")
        .arg(&stopped);
    crate::run(second)?;
    let script = root.join("xtask/conformance/read_tfevents.py");
    let (mut passed, mut failed) = (0, 0);
    for (run, steps, first) in [(&stopped, 2, 1), (&resumed, 3, 3)] {
        let out = Command::new(&python)
            .arg(&script)
            .arg(run)
            .arg(steps.to_string())
            .arg(first.to_string())
            .output()
            .context("running read_tfevents.py")?;
        let verdict = String::from_utf8_lossy(&out.stdout);
        if out.status.success() {
            println!("ok   tensorboard: {} {}", run.display(), verdict.trim());
            passed += 1;
        } else {
            println!(
                "FAIL tensorboard: {} {} {}",
                run.display(),
                verdict.trim(),
                String::from_utf8_lossy(&out.stderr)
            );
            failed += 1;
        }
    }
    if failed == 0 {
        std::fs::remove_dir_all(&work)?;
    }
    Ok((passed, failed))
}
