//! `hessian-recipes train` on a tiny random model with the fixture environment: snapshots on
//! schedule, stop-and-resume and SIGTERM-and-resume in new processes end in the same evidence
//! as an uninterrupted run, bit for bit; a bad plan is refused before any work.

use std::path::Path;
use std::process::{Command, Stdio};
use std::time::{Duration, Instant};

use anyhow::Result;
use hr_tests::tiny_model::{TinySpec, write_tiny_model};
use hr_tests::{Scratch, binary, text};
use serde_json::json;

fn plan(steps: u64, every: u64) -> serde_json::Value {
    json!({
        "schema_version": 1,
        "name": "native-tiny",
        "model": {"path": "model", "lora": {"rank": 2, "alpha": 4.0, "targets": ["q_proj", "v_proj"]}},
        "environment": {"backend": "fixture", "tasks": {"kind": "digits", "count": 5, "seed": 3}},
        "grpo": {"tasks_per_step": 2, "num_generations": 4, "max_completion_length": 8, "max_turn_tokens": 8},
        "optimizer": {"learning_rate": 0.02, "warmup_steps": 1, "decay": "cosine"},
        "steps": steps,
        "checkpoints": {"every": every},
        "seeds": {"sampling": 5, "adapter_init": 11, "task_order": 7}
    })
}

fn setup(steps: u64, every: u64) -> Scratch {
    let s = Scratch::new();
    write_tiny_model(&s.path().join("model"), &TinySpec::default());
    s.write("plan.json", &plan(steps, every).to_string());
    s
}

fn ok(s: &Scratch, args: &[&str]) {
    let out = s.run(args);
    let (stdout, stderr) = text(&out);
    assert!(out.status.success(), "{args:?}\n{stdout}\n{stderr}");
}

fn read(s: &Scratch, rel: &str) -> String {
    std::fs::read_to_string(s.path().join(rel)).unwrap_or_else(|e| panic!("{rel}: {e}"))
}

fn snapshot(step: u64) -> String {
    format!("checkpoints/snapshots/{step:020}")
}

#[test]
fn stop_and_resume_in_new_processes_matches_the_uninterrupted_run() -> Result<()> {
    let s = setup(4, 2);
    ok(
        &s,
        &["train", "--plan", "plan.json", "--output", "runs/full"],
    );
    assert_eq!(read(&s, "runs/full/metrics.jsonl").lines().count(), 4);
    for file in ["report.md", "reward.svg", "loss.svg", "plan.json"] {
        assert!(s.path().join("runs/full").join(file).is_file(), "{file}");
    }
    for step in [2, 4] {
        assert!(
            s.path()
                .join("runs/full")
                .join(snapshot(step))
                .join("SEAL.dsse.json")
                .is_file(),
            "snapshot {step}"
        );
    }
    assert!(
        !s.path().join("runs/full").join(snapshot(1)).exists(),
        "every 2 steps only"
    );

    ok(
        &s,
        &[
            "train",
            "--plan",
            "plan.json",
            "--output",
            "runs/part",
            "--stop-after-step",
            "2",
        ],
    );
    let resume = format!("runs/part/{}", snapshot(2));
    ok(&s, &["snapshot", "verify", &resume]);
    ok(
        &s,
        &[
            "train",
            "--plan",
            "plan.json",
            "--output",
            "runs/rest",
            "--resume",
            &resume,
        ],
    );
    assert_eq!(
        read(&s, "runs/rest/evidence.jsonl"),
        read(&s, "runs/full/evidence.jsonl")
    );
    let last = |run: &str| {
        std::fs::read(
            s.path()
                .join(run)
                .join(snapshot(4))
                .join("payload/native/adapter_model.safetensors"),
        )
    };
    assert_eq!(last("runs/rest")?, last("runs/full")?);
    // The raw rollouts of the last two steps (the default window) travel with each snapshot.
    let raw: serde_json::Value = serde_json::from_str(&read(
        &s,
        &format!("runs/rest/{}/payload/rollouts.json", snapshot(4)),
    ))?;
    let steps: Vec<u64> = raw.as_array().map_or(vec![], |a| {
        a.iter().filter_map(|r| r["step"].as_u64()).collect()
    });
    assert_eq!(steps, [3, 4]);
    assert_eq!(raw[1]["episodes"].as_array().map(Vec::len), Some(8));

    // Resuming under a changed plan is refused: the snapshot is bound to the plan's digest.
    let mut changed = plan(4, 2);
    changed["optimizer"]["learning_rate"] = json!(0.03);
    s.write("changed.json", &changed.to_string());
    let out = s.run(&[
        "train",
        "--plan",
        "changed.json",
        "--output",
        "runs/other",
        "--resume",
        &resume,
    ]);
    let (_, stderr) = text(&out);
    assert_eq!(out.status.code(), Some(2), "{stderr}");
    assert!(stderr.contains("config"), "{stderr}");
    Ok(())
}

fn wait_for_lines(path: &Path, lines: usize) {
    let deadline = Instant::now() + Duration::from_secs(120);
    while std::fs::read_to_string(path).map_or(0, |t| t.lines().count()) < lines {
        assert!(
            Instant::now() < deadline,
            "no progress in {}",
            path.display()
        );
        std::thread::sleep(Duration::from_millis(20));
    }
}

#[test]
fn sigterm_snapshots_the_current_step_exits_0_and_resume_reaches_the_same_state() -> Result<()> {
    let s = setup(12, 100);
    ok(
        &s,
        &["train", "--plan", "plan.json", "--output", "runs/full"],
    );
    let mut child = Command::new(binary())
        .args(["train", "--plan", "plan.json", "--output", "runs/cut"])
        .current_dir(s.path())
        .stdout(Stdio::null())
        .stderr(Stdio::piped())
        .spawn()?;
    wait_for_lines(&s.path().join("runs/cut/metrics.jsonl"), 1);
    Command::new("kill")
        .args(["-TERM", &child.id().to_string()])
        .status()?;
    let status = child.wait()?;
    assert_eq!(status.code(), Some(0), "SIGTERM exits cleanly");
    let done = read(&s, "runs/cut/metrics.jsonl").lines().count() as u64;
    assert!((1..12).contains(&done), "stopped early, after step {done}");
    let resume = format!("runs/cut/{}", snapshot(done));
    ok(&s, &["snapshot", "verify", &resume]);
    ok(
        &s,
        &[
            "train",
            "--plan",
            "plan.json",
            "--output",
            "runs/rest",
            "--resume",
            &resume,
        ],
    );
    assert_eq!(
        read(&s, "runs/rest/evidence.jsonl"),
        read(&s, "runs/full/evidence.jsonl")
    );
    Ok(())
}

#[test]
fn a_bad_plan_is_refused_before_any_work() {
    let s = setup(4, 2);
    let mut bad = plan(4, 2);
    bad["grpo"]["beta"] = json!(-0.5);
    s.write("bad.json", &bad.to_string());
    let out = s.run(&["train", "--plan", "bad.json", "--output", "runs/bad"]);
    let (_, stderr) = text(&out);
    assert_eq!(out.status.code(), Some(2), "{stderr}");
    assert!(stderr.contains("`grpo.beta`"), "{stderr}");
    assert!(!s.path().join("runs/bad").exists(), "nothing was created");
}
