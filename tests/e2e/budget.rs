//! The run's limits in `train`: a diverging step stops the run without sealing it; the device
//! budget accumulates over allocations and the deadline is fixed at the first start, never
//! renewed by a resume.

use std::process::Command;

use hr_tests::{binary, text};
use serde_json::json;

use crate::train::{allocations, ok, plan, read, setup};

#[test]
fn a_diverging_run_stops_without_sealing_the_diverged_step() {
    // A β this large overflows the loss in step 1 (a learning rate that large is refused by
    // the plan: above 1).
    let s = setup(3, 1);
    let mut diverging = plan(3, 1);
    diverging["grpo"]["beta"] = json!(1e308);
    s.write("diverging.json", &diverging.to_string());
    let out = s.run(&["train", "--plan", "diverging.json", "--output", "runs/d"]);
    let (stdout, stderr) = text(&out);
    assert_eq!(out.status.code(), Some(1), "{stdout}\n{stderr}");
    assert!(
        stderr.contains("step 1 diverged") && stderr.contains("optimizer.learning_rate"),
        "{stderr}"
    );
    // Nothing was trained, so nothing of the run is left: no checkpoint, no adapter.
    assert!(
        !s.path().join("runs/d").exists(),
        "the diverged start left its folder"
    );
}

#[test]
fn the_device_budget_accumulates_over_three_allocations() {
    let s = setup(3, 100);
    let train = |out: &str, from: Option<&str>, stop: Option<&str>| {
        let mut args = vec!["train", "--plan", "plan.json", "--output", out];
        if let Some(from) = from {
            args.extend(["--resume", from]);
        }
        if let Some(stop) = stop {
            args.extend(["--stop-after-step", stop]);
        }
        ok(&s, &args);
    };
    train("runs/a", None, Some("1"));
    train("runs/b", Some("runs/a"), Some("2"));
    train("runs/c", Some("runs/b"), None);
    let (a, b, c) = (
        allocations(&s, "runs/a"),
        allocations(&s, "runs/b"),
        allocations(&s, "runs/c"),
    );
    let used = |r: &serde_json::Value| r["device_seconds_used"].as_u64().expect("used");
    assert_eq!(used(&a[0]), 0, "a fresh run starts with nothing used");
    assert!(
        used(&a[1]) >= 1,
        "an allocation is charged, rounded up: {a:?}"
    );
    assert_eq!(used(&b[0]), used(&a[1]), "b starts with what a used");
    assert!(used(&b[1]) > used(&b[0]), "b adds its own: {b:?}");
    assert_eq!(used(&c[0]), used(&b[1]), "c starts with what a and b used");
    assert_eq!(c[1]["ended"], "completed");
    assert_eq!(c[0]["restored_step"], 2);
}

#[test]
fn the_deadline_is_fixed_at_the_first_start_and_ends_a_resumed_run_with_a_final_save() {
    let s = setup(3, 100);
    ok(
        &s,
        &[
            "train",
            "--plan",
            "plan.json",
            "--output",
            "runs/a",
            "--stop-after-step",
            "1",
            "--max-wall-seconds",
            "100000",
        ],
    );
    let a = allocations(&s, "runs/a");
    // The resumed run's clock reads 50,000 s later (HR_FAULT_CLOCK_AHEAD_S; no test waits on
    // the wall clock): it keeps the first start's deadline (its own flag does not renew it)
    // with at least 50,000 s less of it.
    let resume = |out: &str, from: &str, ahead: &str, extra: &[&str]| {
        Command::new(binary())
            .args([
                "train",
                "--plan",
                "plan.json",
                "--output",
                out,
                "--resume",
                from,
            ])
            .args(extra)
            .env("HR_FAULT_CLOCK_AHEAD_S", ahead)
            .current_dir(s.path())
            .output()
            .expect("run hessian-recipes")
    };
    let out = resume(
        "runs/b",
        "runs/a",
        "50000",
        &["--stop-after-step", "2", "--max-wall-seconds", "1000"],
    );
    let (_, stderr) = text(&out);
    assert!(out.status.success(), "{stderr}");
    let b = allocations(&s, "runs/b");
    assert_eq!(b[0]["deadline_unix_s"], a[0]["deadline_unix_s"], "{stderr}");
    let remaining = |r: &serde_json::Value| r["deadline_remaining_s"].as_u64().expect("remaining");
    assert!(remaining(&b[0]) + 50_000 <= remaining(&a[0]), "{a:?} {b:?}");
    // Past the deadline, a resumed run saves a final checkpoint at once and exits 4; the
    // selected checkpoint at that step is reused, not published again.
    let out = resume("runs/c", "runs/b", "200000", &[]);
    let (_, stderr) = text(&out);
    assert_eq!(out.status.code(), Some(4), "{stderr}");
    assert!(stderr.contains("deadline ran out"), "{stderr}");
    let c = allocations(&s, "runs/c");
    assert_eq!(c[1]["ended"], "deadline");
    assert_eq!(
        c[1]["uuid"], c[0]["restored_uuid"],
        "reused, not republished"
    );
    let reported = read(&s, "runs/c/core/checkpoints.jsonl").lines().count();
    assert_eq!(reported, 1, "only the imported checkpoint is listed");
}
