//! `hessian-recipes train` on a tiny random model with the fixture environment: checkpoints on
//! schedule, stop-and-resume and SIGTERM-and-resume in new processes end in the same evidence
//! as an uninterrupted run, bit for bit; a bad plan is refused before any work; TRL's loss
//! variants train; a Hub id is found in the cache. The run's limits are in `budget.rs`, what a
//! resume refuses in `restore.rs`; both use the helpers here.

use std::path::Path;
use std::process::{Command, Stdio};
use std::time::{Duration, Instant};

use anyhow::Result;
use hr_tests::tiny_model::{TinySpec, write_tiny_model};
use hr_tests::{Scratch, binary, text};
use serde_json::json;

/// The tiny fixture plan the e2e tests train (digits tasks, G = 4, 8 tokens).
pub(crate) fn plan(steps: u64, every: u64) -> serde_json::Value {
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

pub(crate) fn setup(steps: u64, every: u64) -> Scratch {
    let s = Scratch::new();
    write_tiny_model(&s.path().join("model"), &TinySpec::default());
    s.write("plan.json", &plan(steps, every).to_string());
    s
}

pub(crate) fn ok(s: &Scratch, args: &[&str]) {
    let out = s.run(args);
    let (stdout, stderr) = text(&out);
    assert!(out.status.success(), "{args:?}\n{stdout}\n{stderr}");
}

pub(crate) fn read(s: &Scratch, rel: &str) -> String {
    std::fs::read_to_string(s.path().join(rel)).unwrap_or_else(|e| panic!("{rel}: {e}"))
}

/// The checkpoint folder of `run` at `step` (relative to the scratch folder), from the local
/// Core's record of reported checkpoints; `None` when none was published at that step or it was
/// deleted (`checkpoints.keep_last`).
pub(crate) fn checkpoint(s: &Scratch, run: &str, step: u64) -> Option<String> {
    let listed = std::fs::read_to_string(s.path().join(run).join("core/checkpoints.jsonl")).ok()?;
    let lines: Vec<serde_json::Value> = listed
        .lines()
        .filter_map(|l| serde_json::from_str(l).ok())
        .collect();
    let deleted = |uuid: &serde_json::Value| {
        lines
            .iter()
            .any(|c| c["deleted"] == true && c["uuid"] == *uuid)
    };
    lines
        .iter()
        .rfind(|c| c["steps_completed"] == step && !deleted(&c["uuid"]))
        .map(|c| {
            format!(
                "{run}/core/checkpoints/{}",
                c["uuid"].as_str().unwrap_or("")
            )
        })
}

pub(crate) fn snapshot(s: &Scratch, run: &str, step: u64) -> String {
    checkpoint(s, run, step).unwrap_or_else(|| panic!("{run}: no checkpoint at step {step}"))
}

/// The run's allocation records (start and end lines).
pub(crate) fn allocations(s: &Scratch, run: &str) -> Vec<serde_json::Value> {
    read(s, &format!("{run}/allocations.jsonl"))
        .lines()
        .map(|l| serde_json::from_str(l).expect("allocation record"))
        .collect()
}

#[test]
fn a_local_run_keeps_its_latest_checkpoints_and_those_its_evaluation_adopts() -> Result<()> {
    let s = setup(20, 1);
    let mut p = plan(20, 1);
    p["evaluation"] = json!({"checkpoints": [10, 20], "dev": {"count": 1, "seed": 1},
        "held_out": {"count": 1, "seed": 2}, "num_generations": 1, "retention": false});
    s.write("plan.json", &p.to_string());
    ok(
        &s,
        &[
            "train",
            "--plan",
            "plan.json",
            "--output",
            "runs/a",
            "--stop-after-step",
            "15",
        ],
    );
    let kept = |run: &str| -> Vec<u64> {
        (1..=20)
            .filter(|step| checkpoint(&s, run, *step).is_some())
            .collect()
    };
    assert_eq!(kept("runs/a"), [10, 14, 15]);
    // Every folder the list no longer holds is gone; the list marks each one deleted.
    let folders = std::fs::read_dir(s.path().join("runs/a/core/checkpoints"))?.count();
    assert_eq!(folders, 3);
    let marks = read(&s, "runs/a/core/checkpoints.jsonl")
        .lines()
        .filter(|l| l.contains("\"deleted\":true"))
        .count();
    assert_eq!(marks, 12);
    // The run resumes from its latest, into a new folder, and evaluate finds the adopted steps
    // along the chain.
    ok(
        &s,
        &[
            "train",
            "--plan",
            "plan.json",
            "--output",
            "runs/b",
            "--resume",
            "runs/a",
        ],
    );
    assert_eq!(kept("runs/b"), [19, 20]);
    ok(&s, &["evaluate", "--resume", "runs/b", "--output", "eval"]);
    // 0 keeps every one.
    p["checkpoints"]["keep_last"] = json!(0);
    s.write("all.json", &p.to_string());
    ok(&s, &["train", "--plan", "all.json", "--output", "runs/all"]);
    assert_eq!(kept("runs/all"), (1..=20).collect::<Vec<_>>());
    Ok(())
}

#[test]
fn stop_and_resume_in_new_processes_matches_the_uninterrupted_run() -> Result<()> {
    let s = setup(4, 2);
    ok(
        &s,
        &["train", "--plan", "plan.json", "--output", "runs/full"],
    );
    assert_eq!(read(&s, "runs/full/metrics.jsonl").lines().count(), 4);
    for file in [
        "report.md",
        "reward.svg",
        "entropy.svg",
        "plan.json",
        "completions.jsonl.gz",
    ] {
        assert!(s.path().join("runs/full").join(file).is_file(), "{file}");
    }
    let report = read(&s, "runs/full/report.md");
    assert!(
        report.contains("## Sample completions (step 4: the best and the worst"),
        "{report}"
    );
    for step in [2, 4] {
        assert!(
            s.path()
                .join(snapshot(&s, "runs/full", step))
                .join("SEAL.dsse.json")
                .is_file(),
            "snapshot {step}"
        );
    }
    assert!(
        checkpoint(&s, "runs/full", 1).is_none(),
        "every 2 steps only"
    );

    let part = s.run(&[
        "train",
        "--plan",
        "plan.json",
        "--output",
        "runs/part",
        "--stop-after-step",
        "2",
        "--json",
    ]);
    let (stdout, stderr) = text(&part);
    assert_eq!(
        part.status.code(),
        Some(0),
        "the stop it asked for: {stderr}"
    );
    // --json: stdout is one summary object.
    let summary: serde_json::Value = serde_json::from_str(stdout.trim())?;
    assert_eq!(
        (&summary["outcome"], &summary["step"], &summary["exit_code"]),
        (&json!("stopped"), &json!(2), &json!(0))
    );
    let resume = snapshot(&s, "runs/part", 2);
    assert!(resume.ends_with(summary["checkpoint"].as_str().unwrap_or("?")));
    ok(&s, &["snapshot", "verify", &resume]);
    // The stop is a terminal save: published once, then the durable receipt.
    let receipt: serde_json::Value =
        serde_json::from_str(&read(&s, "runs/part/preempted_at_checkpoint.json"))?;
    assert_eq!(receipt["step"], 2);
    assert!(resume.ends_with(receipt["uuid"].as_str().unwrap_or("?")));
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
    // The metrics history travels in the snapshot too: the resumed run's file is complete and
    // equal but for wall-clock throughput.
    assert_eq!(untimed(&s, "runs/rest"), untimed(&s, "runs/full"));
    assert_eq!(untimed(&s, "runs/rest").len(), 4);
    exported_adapters_are_the_last_snapshots(&s)?;
    // The raw rollouts of the last two steps (the default window) travel with each snapshot.
    let raw: serde_json::Value = serde_json::from_str(&read(
        &s,
        &format!("{}/payload/rollouts.json", snapshot(&s, "runs/rest", 4)),
    ))?;
    let steps: Vec<u64> = raw.as_array().map_or(vec![], |a| {
        a.iter().filter_map(|r| r["step"].as_u64()).collect()
    });
    assert_eq!(steps, [3, 4]);
    assert_eq!(raw[1]["episodes"].as_array().map(Vec::len), Some(8));

    // Resuming under a changed plan is refused (exit 3, nothing adopted): the checkpoint is bound
    // to the plan's digest.
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
    assert_eq!(out.status.code(), Some(3), "{stderr}");
    assert!(
        stderr.contains("restore refused: config mismatch"),
        "{stderr}"
    );
    assert!(!s.path().join("runs/other/evidence.jsonl").exists());
    Ok(())
}

/// The rows of a run's `metrics.jsonl` without their wall-clock fields.
fn untimed(s: &Scratch, run: &str) -> Vec<serde_json::Value> {
    read(s, &format!("{run}/metrics.jsonl"))
        .lines()
        .map(|l| {
            let mut row: serde_json::Value = serde_json::from_str(l).expect("row");
            if let Some(m) = row.as_object_mut() {
                m.retain(|k, _| k != "tokens_per_second" && !k.starts_with("timing/"));
            }
            row
        })
        .collect()
}

/// `runs/rest` (resumed) and `runs/full` end with the same adapter, and the finished adapter
/// outside the snapshots is it, as PEFT loads it: the same weights, `base_model_name_or_path`
/// naming the model folder; `generate --adapter` loads it. `runs/part` (stopped) exports none.
fn exported_adapters_are_the_last_snapshots(s: &Scratch) -> Result<()> {
    let last = |run: &str| {
        std::fs::read(
            s.path()
                .join(snapshot(s, run, 4))
                .join("payload/native/adapter_model.safetensors"),
        )
    };
    assert_eq!(last("runs/rest")?, last("runs/full")?);
    let exported =
        |run: &str| std::fs::read(s.path().join(run).join("adapter/adapter_model.safetensors"));
    assert_eq!(exported("runs/rest")?, last("runs/full")?);
    let config: serde_json::Value =
        serde_json::from_str(&read(s, "runs/full/adapter/adapter_config.json"))?;
    assert_eq!(
        config["base_model_name_or_path"],
        s.path().join("model").to_string_lossy().as_ref()
    );
    ok(
        s,
        &[
            "generate",
            "--model",
            "model",
            "--adapter",
            "runs/full/adapter",
            "--prompt",
            "hi",
            "--max-new-tokens",
            "2",
        ],
    );
    assert!(
        !s.path().join("runs/part/adapter").exists(),
        "only a finished run exports its adapter"
    );
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
fn sigterm_snapshots_the_current_step_exits_5_and_the_printed_command_resumes_exactly() -> Result<()>
{
    let s = setup(12, 100);
    ok(
        &s,
        &["train", "--plan", "plan.json", "--output", "runs/full"],
    );
    let child = Command::new(binary())
        .args(["train", "--plan", "plan.json", "--output", "runs/cut"])
        .current_dir(s.path())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()?;
    wait_for_lines(&s.path().join("runs/cut/metrics.jsonl"), 1);
    Command::new("kill")
        .args(["-TERM", &child.id().to_string()])
        .status()?;
    let out = child.wait_with_output()?;
    let (stdout, stderr) = text(&out);
    assert_eq!(
        out.status.code(),
        Some(5),
        "a signal stop is not a completion: {stdout}{stderr}"
    );
    assert!(
        stderr.contains("stop signal: finishing this step"),
        "{stderr}"
    );
    let done = read(&s, "runs/cut/metrics.jsonl").lines().count() as u64;
    assert!((1..12).contains(&done), "stopped early, after step {done}");
    ok(&s, &["snapshot", "verify", &snapshot(&s, "runs/cut", done)]);
    // The printed command resumes from the run folder's latest checkpoint: the one the SIGTERM
    // saved.
    let command = stdout
        .lines()
        .find_map(|l| l.strip_prefix("resume with: "))
        .unwrap_or_else(|| panic!("no resume command in {stdout}"));
    let words = shlex::split(command).expect("a shell command");
    assert_eq!(
        words[1..],
        [
            "train",
            "--plan",
            "plan.json",
            "--output",
            "runs/cut-resumed",
            "--resume",
            "runs/cut"
        ]
    );
    let resumed = Command::new(&words[0])
        .args(&words[1..])
        .current_dir(s.path())
        .output()?;
    assert_eq!(resumed.status.code(), Some(0), "{:?}", text(&resumed));
    assert_eq!(
        read(&s, "runs/cut-resumed/evidence.jsonl"),
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

    // A model folder without a loadable config is bad input too, found before any output.
    let mut missing = plan(4, 2);
    missing["model"]["path"] = json!("no-model");
    s.write("missing.json", &missing.to_string());
    let out = s.run(&[
        "train",
        "--plan",
        "missing.json",
        "--output",
        "runs/missing",
    ]);
    let (_, stderr) = text(&out);
    assert_eq!(out.status.code(), Some(2), "{stderr}");
    assert!(
        stderr.contains("model.path: no model folder at")
            && stderr.contains("no-model:")
            && stderr.contains("pass --model DIR"),
        "{stderr}"
    );
    assert!(
        !s.path().join("runs/missing").exists(),
        "nothing was created"
    );
}

#[test]
fn a_plan_with_trl_1_16s_loss_variants_trains_and_logs_trls_metrics() -> Result<()> {
    let s = setup(2, 1);
    let mut variants = plan(2, 1);
    for (key, value) in [
        ("loss_type", json!("luspo")),
        ("importance_sampling_level", json!("sequence")),
        ("epsilon", json!(0.1)),
        ("delta", json!(1.5)),
        ("beta", json!(0.04)),
        ("top_entropy_quantile", json!(0.5)),
        ("entropy_coef", json!(0.01)),
        ("off_policy_mask_threshold", json!(0.5)),
        ("num_iterations", json!(2)),
        ("sync_ref_model", json!(false)),
    ] {
        variants["grpo"][key] = value;
    }
    s.write("variants.json", &variants.to_string());
    ok(
        &s,
        &["train", "--plan", "variants.json", "--output", "runs/v"],
    );
    let rows: Vec<serde_json::Value> = read(&s, "runs/v/metrics.jsonl")
        .lines()
        .map(serde_json::from_str)
        .collect::<Result<_, _>>()?;
    let metrics = &rows[1];
    // TRL's running token count and fractional epoch (5 tasks, 2 a step).
    let tokens = |row: &serde_json::Value| row["step_tokens"].as_f64().unwrap_or(-1.0);
    assert_eq!(
        metrics["num_tokens"].as_f64(),
        Some(tokens(&rows[0]) + tokens(metrics))
    );
    assert_eq!(metrics["epoch"].as_f64(), Some(0.8));
    for key in [
        "clip_ratio/low_min",
        "clip_ratio/high_max",
        "clip_ratio/region_mean",
        "policy_loss",
        "entropy_coef",
        "kl",
        "entropy",
    ] {
        assert!(metrics[key].is_number(), "{key} in {metrics}");
    }
    // Not offered yet: refused naming the field and what to use instead, before any work.
    variants["grpo"]["sync_ref_model"] = json!(true);
    s.write("sync.json", &variants.to_string());
    let out = s.run(&["train", "--plan", "sync.json", "--output", "runs/sync"]);
    let (_, stderr) = text(&out);
    assert_eq!(out.status.code(), Some(2), "{stderr}");
    assert!(
        stderr.contains("`grpo.sync_ref_model`") && stderr.contains("grpo.beta"),
        "{stderr}"
    );
    assert!(!s.path().join("runs/sync").exists());
    Ok(())
}

/// `train` in `s` with the Hugging Face cache at `s/hf-cache`.
fn train_with_hub_cache(s: &Scratch, plan: &str, run: &str) -> std::process::Output {
    Command::new(binary())
        .args(["train", "--plan", plan, "--output", run])
        .env("HF_HUB_CACHE", s.path().join("hf-cache"))
        .current_dir(s.path())
        .output()
        .expect("run hessian-recipes")
}

#[test]
fn a_model_named_by_hub_id_is_found_in_the_cache_and_adapters_name_their_base() -> Result<()> {
    let s = setup(2, 1);
    // Named by its folder: every checkpoint's adapter and the final one give its absolute path.
    ok(
        &s,
        &["train", "--plan", "plan.json", "--output", "runs/path"],
    );
    let base_of = |dir: &str| -> Result<String> {
        let config: serde_json::Value =
            serde_json::from_str(&read(&s, &format!("{dir}/adapter_config.json")))?;
        Ok(config["base_model_name_or_path"]
            .as_str()
            .unwrap_or_default()
            .to_owned())
    };
    let model = s.path().join("model").display().to_string();
    assert_eq!(
        base_of(&format!("{}/payload/native", snapshot(&s, "runs/path", 1)))?,
        model
    );
    assert_eq!(base_of("runs/path/adapter")?, model);

    // Named by its Hub id alone: absent from the cache, a bad id, then present.
    let mut by_id = plan(2, 1);
    by_id["model"] = json!({"hub_id": "tiny-org/tiny-llama",
        "lora": {"rank": 2, "alpha": 4.0, "targets": ["q_proj", "v_proj"]}});
    s.write("by-id.json", &by_id.to_string());
    let out = train_with_hub_cache(&s, "by-id.json", "runs/absent");
    let (_, stderr) = text(&out);
    assert_eq!(out.status.code(), Some(2), "{stderr}");
    assert!(
        stderr.contains("`model.hub_id`") && stderr.contains("hf download tiny-org/tiny-llama"),
        "{stderr}"
    );
    assert!(
        !s.path().join("runs/absent").exists(),
        "nothing was created"
    );
    let mut bad_id = by_id.clone();
    bad_id["model"]["hub_id"] = json!("../model");
    s.write("bad-id.json", &bad_id.to_string());
    let out = train_with_hub_cache(&s, "bad-id.json", "runs/bad-id");
    let (_, stderr) = text(&out);
    assert_eq!(out.status.code(), Some(2), "{stderr}");
    assert!(stderr.contains("`model.hub_id`"), "{stderr}");

    let repo = s.path().join("hf-cache/models--tiny-org--tiny-llama");
    write_tiny_model(&repo.join("snapshots/c0ffee"), &TinySpec::default());
    s.write("hf-cache/models--tiny-org--tiny-llama/refs/main", "c0ffee");
    let out = train_with_hub_cache(&s, "by-id.json", "runs/by-id");
    let (stdout, stderr) = text(&out);
    assert!(out.status.success(), "{stdout}\n{stderr}");
    assert_eq!(
        base_of(&format!("{}/payload/native", snapshot(&s, "runs/by-id", 1)))?,
        "tiny-org/tiny-llama"
    );
    assert_eq!(base_of("runs/by-id/adapter")?, "tiny-org/tiny-llama");
    // generate takes the same id.
    let generate = |model: &str| {
        Command::new(binary())
            .args([
                "generate", "--raw", "--json", "--prompt", "the", "--model", model,
            ])
            .env("HF_HUB_CACHE", s.path().join("hf-cache"))
            .current_dir(s.path())
            .output()
            .expect("run hessian-recipes")
    };
    let by_id = generate("tiny-org/tiny-llama");
    assert!(by_id.status.success(), "{}", text(&by_id).1);
    let by_folder = generate("hf-cache/models--tiny-org--tiny-llama/snapshots/c0ffee");
    assert_eq!(by_id.stdout, by_folder.stdout);
    let absent = generate("tiny-org/absent");
    assert_eq!(absent.status.code(), Some(2), "{}", text(&absent).1);
    assert!(text(&absent).1.contains("hf download tiny-org/absent"));
    // Same weights, same seeds: the same training, whichever way the model was named.
    assert_eq!(
        read(&s, "runs/by-id/evidence.jsonl"),
        read(&s, "runs/path/evidence.jsonl")
    );
    Ok(())
}
