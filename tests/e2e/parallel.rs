//! Data-parallel `train` through `hessian-recipes launch`: a plan of four shards trained by one,
//! two and four ranks (separate processes meeting over TCP) gives the same evidence, bit for bit;
//! a run stopped at two ranks resumes at four and at one with the same bits; a rank killed mid-step
//! fails the whole launch and the run resumes from its last checkpoint with the same bits; and
//! the controls (streams keyed by rank, gradients summed in arrival order) diverge at step 1.

use std::process::Command;

use hr_tests::tiny_model::{TinySpec, write_tiny_model};
use hr_tests::{Scratch, binary, text};

/// Four shards of one task each, G = 4, μ = 2 and β > 0 (old and reference scoring too), two
/// micro-batches per shard.
fn setup() -> Scratch {
    let s = Scratch::new();
    write_tiny_model(&s.path().join("model"), &TinySpec::default());
    let mut plan = crate::train::plan(4, 1);
    plan["grpo"]["tasks_per_step"] = 4.into();
    plan["grpo"]["num_iterations"] = 2.into();
    plan["grpo"]["beta"] = 0.04.into();
    plan["grpo"]["gradient_accumulation_steps"] = 8.into();
    plan["parallel"] = serde_json::json!({"shards": 4});
    s.write("plan.json", &plan.to_string());
    s
}

/// `hessian-recipes launch --nproc N -- hessian-recipes train ...` (`N` 1: `train` alone), with
/// `env` set for every rank; its exit status, stdout and stderr.
fn train(s: &Scratch, ranks: usize, args: &[&str], env: &[(&str, &str)]) -> (bool, String) {
    let bin = binary();
    let mut cmd = Command::new(&bin);
    if ranks > 1 {
        cmd.args(["launch", "--nproc", &ranks.to_string(), "--"])
            .arg(&bin);
    }
    let out = cmd
        .current_dir(s.path())
        .args(["train", "--plan", "plan.json"])
        .args(args)
        .envs(env.iter().copied())
        .output()
        .expect("run");
    let (stdout, stderr) = text(&out);
    (out.status.success(), format!("{stdout}\n{stderr}"))
}

fn ok(s: &Scratch, ranks: usize, args: &[&str]) -> String {
    let (success, output) = train(s, ranks, args, &[]);
    assert!(success, "{ranks} ranks {args:?}:\n{output}");
    output
}

fn evidence(s: &Scratch, run: &str) -> Vec<String> {
    std::fs::read_to_string(s.path().join(run).join("evidence.jsonl"))
        .unwrap_or_else(|e| panic!("{run}: {e}"))
        .lines()
        .map(str::to_owned)
        .collect()
}

#[test]
fn one_two_and_four_ranks_train_the_same_bits_and_resume_across_rank_counts() {
    let s = setup();
    ok(&s, 1, &["--output", "one"]);
    let one = evidence(&s, "one");
    assert_eq!(one.len(), 4);
    for ranks in [2, 4] {
        let run = format!("ranks-{ranks}");
        let output = ok(&s, ranks, &["--output", &run]);
        assert!(
            output.contains(&format!("[rank={}] ", ranks - 1)),
            "every rank's lines are prefixed:\n{output}"
        );
        assert_eq!(evidence(&s, &run), one, "{ranks} ranks");
        let allocations = std::fs::read_to_string(s.path().join(&run).join("allocations.jsonl"))
            .expect("allocations");
        assert!(
            allocations.contains(&format!("\"ranks\":{ranks}")),
            "{allocations}"
        );
    }
    // Stopped after step 2 at two ranks; resumed at two, at four, and at one.
    ok(&s, 2, &["--output", "stopped", "--stop-after-step", "2"]);
    assert_eq!(evidence(&s, "stopped"), one[..2]);
    for ranks in [2, 4, 1] {
        let run = format!("resumed-{ranks}");
        ok(&s, ranks, &["--output", &run, "--resume", "stopped"]);
        assert_eq!(evidence(&s, &run), one, "resumed at {ranks} ranks");
    }
}

#[test]
fn a_rank_killed_mid_step_fails_the_launch_and_the_run_resumes_with_the_same_bits() {
    let s = setup();
    ok(&s, 1, &["--output", "one"]);
    let (success, output) = train(
        &s,
        2,
        &["--output", "killed"],
        &[("HR_FAULT_KILL_RANK", "1:3")],
    );
    assert!(!success, "{output}");
    assert!(
        output.contains("launch: rank 1 ended") || output.contains("launch: rank 0 ended"),
        "{output}"
    );
    let kept = evidence(&s, "killed");
    assert_eq!(
        kept,
        evidence(&s, "one")[..2],
        "steps 1-2 kept, step 3 lost"
    );
    ok(&s, 2, &["--output", "after", "--resume", "killed"]);
    assert_eq!(evidence(&s, "after"), evidence(&s, "one"));
}

#[test]
fn streams_keyed_by_rank_or_gradients_summed_in_arrival_order_diverge_at_step_1() {
    let s = setup();
    let lines = |run: &str| {
        hr_proof::read_evidence(&s.path().join(run).join("evidence.jsonl")).expect("evidence")
    };
    // Each control at one rank and at two: one rank's bits must not hold at two.
    for (fault, field) in [("rank-keyed-rng", "tokens"), ("sequential-sum", "adapter")] {
        for ranks in [1, 2] {
            let run = format!("{fault}-{ranks}");
            let args = ["--output", &run, "--stop-after-step", "1"];
            let (success, output) = train(&s, ranks, &args, &[("HR_FAULT_PARALLEL", fault)]);
            assert!(success, "{fault} at {ranks} ranks:\n{output}");
        }
        let divergence = hr_proof::first_divergence(
            &lines(&format!("{fault}-1")),
            &lines(&format!("{fault}-2")),
        );
        assert!(
            divergence
                .as_ref()
                .is_some_and(|d| d.step == 1 && d.field.contains(field)),
            "{fault}: {divergence:?}"
        );
    }
}

#[test]
fn a_stop_signal_to_every_rank_saves_the_chiefs_step_and_the_run_resumes_with_the_same_bits() {
    use std::os::unix::process::CommandExt;
    let s = setup();
    let mut plan: serde_json::Value =
        serde_json::from_str(&std::fs::read_to_string(s.path().join("plan.json")).expect("plan"))
            .expect("json");
    plan["steps"] = 12.into();
    s.write("plan.json", &plan.to_string());
    ok(&s, 1, &["--output", "one"]);
    // As a terminal's Ctrl-C does: the signal reaches the launcher and every rank (its own
    // process group here, so the test is spared).
    let bin = binary();
    let mut child = Command::new(&bin)
        .args(["launch", "--nproc", "2", "--"])
        .arg(&bin)
        .args(["train", "--plan", "plan.json", "--output", "cut"])
        .current_dir(s.path())
        .process_group(0)
        .stdout(std::process::Stdio::piped())
        .stderr(std::process::Stdio::piped())
        .spawn()
        .expect("launch");
    let metrics = s.path().join("cut/metrics.jsonl");
    while std::fs::read_to_string(&metrics).map_or(0, |t| t.lines().count()) < 1 {
        if let Some(status) = child.try_wait().expect("wait") {
            panic!("the launch ended before its first step: {status}");
        }
        std::thread::sleep(std::time::Duration::from_millis(20));
    }
    let group = format!("-{}", child.id());
    Command::new("kill")
        .args(["-TERM", "--", &group])
        .status()
        .expect("kill");
    let out = child.wait_with_output().expect("launch output");
    let (stdout, stderr) = text(&out);
    assert_eq!(
        out.status.code(),
        Some(5),
        "the chief's resumable stop:\n{stdout}\n{stderr}"
    );
    assert!(
        stderr.contains("[rank=0] stop signal: finishing this step")
            && stderr.contains("[rank=1] worker rank: stop signal"),
        "{stderr}"
    );
    let done = evidence(&s, "cut").len();
    assert!((1..12).contains(&done), "stopped after step {done}");
    ok(&s, 2, &["--output", "resumed", "--resume", "cut"]);
    assert_eq!(evidence(&s, "resumed"), evidence(&s, "one"));
}

#[test]
fn ranks_that_do_not_divide_the_shards_are_refused_naming_both_fields() {
    let s = setup();
    let (success, output) = train(&s, 3, &["--output", "three"], &[]);
    assert!(!success);
    assert!(
        output.contains("parallel.shards") && output.contains("resources.slots_per_trial"),
        "{output}"
    );
}
