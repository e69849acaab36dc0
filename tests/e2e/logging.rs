//! Where `train` writes what it says: plain lines when stderr is piped (one per step, no escape
//! codes, library debug logs hidden), every library's logs with time, level and target under
//! `RUST_LOG=debug`, and a progress bar with ETA on a terminal (a pseudo-terminal from
//! util-linux `script`).

use std::process::Command;

use anyhow::{Context, Result};
use hr_tests::tiny_model::{TinySpec, write_tiny_model};
use hr_tests::{Scratch, binary, text};

fn setup() -> Scratch {
    let s = Scratch::new();
    write_tiny_model(&s.path().join("model"), &TinySpec::default());
    s.write("plan.json", &crate::train::plan(2, 1).to_string());
    s
}

fn train(s: &Scratch, out: &str, rust_log: Option<&str>) -> Result<String> {
    let mut cmd = Command::new(binary());
    cmd.args(["train", "--plan", "plan.json", "--output", out])
        .current_dir(s.path())
        .env_remove("RUST_LOG");
    if let Some(filter) = rust_log {
        cmd.env("RUST_LOG", filter);
    }
    let output = cmd.output().context("running train")?;
    let (stdout, stderr) = text(&output);
    assert!(output.status.success(), "{stdout}\n{stderr}");
    Ok(stderr)
}

#[test]
fn piped_output_is_one_plain_line_per_step() -> Result<()> {
    let s = setup();
    let stderr = train(&s, "runs/plain", None)?;
    for step in ["step 1/2: reward ", "step 2/2: reward "] {
        assert_eq!(
            stderr.lines().filter(|l| l.starts_with(step)).count(),
            1,
            "{stderr}"
        );
    }
    assert!(
        !stderr.contains('\u{1b}'),
        "no escape codes in logs: {stderr}"
    );
    assert!(!stderr.contains("DEBUG"), "{stderr}");
    Ok(())
}

#[test]
fn rust_log_debug_shows_the_libraries_logs() -> Result<()> {
    let s = setup();
    let stderr = train(&s, "runs/debug", Some("debug"))?;
    assert!(
        stderr.contains("DEBUG hr_policy::policy: loading the base weights"),
        "{stderr}"
    );
    assert!(
        stderr.contains("INFO hr_train::progress: step 2/2: reward"),
        "{stderr}"
    );
    let quiet = train(&s, "runs/quiet", Some("warn"))?;
    assert!(
        !quiet.contains("step 1/2"),
        "RUST_LOG=warn hides info: {quiet}"
    );
    Ok(())
}

#[test]
fn a_terminal_gets_a_progress_bar_with_eta() -> Result<()> {
    let s = setup();
    let command = format!(
        "{} train --plan plan.json --output runs/tty",
        binary().display()
    );
    let out = Command::new("script")
        .args(["-qec", &command, "/dev/null"])
        .current_dir(s.path())
        .env_remove("RUST_LOG")
        .output()
        .context("running train under util-linux `script` (a pseudo-terminal)")?;
    let (screen, stderr) = text(&out);
    assert!(out.status.success(), "{screen}\n{stderr}");
    assert!(screen.contains("2/2 ETA"), "{screen}");
    assert!(
        screen.contains("[##############################]"),
        "{screen}"
    );
    assert!(screen.contains("completed at step 2"), "{screen}");
    assert!(
        !screen.lines().any(|l| l.starts_with("step 1/2:")),
        "the bar replaces the plain step lines: {screen}"
    );
    Ok(())
}
