//! The dataset backend: your own JSON-lines prompts scored by weighted built-in rewards train
//! the tiny model, log each reward under TRL's names, and resume bit for bit; every bad row or
//! reward is refused naming its file, line and field before any output exists.

use anyhow::Result;
use hr_tests::tiny_model::{TinySpec, write_tiny_model};
use hr_tests::{Scratch, repo_root, text};
use serde_json::{Value, json};

/// Twelve addition prompts with their answers.
fn rows() -> String {
    (0..4)
        .flat_map(|a| {
            (0..3).map(move |b| json!({"prompt": format!("What is {a} + {b}?"), "answer": a + b}))
        })
        .map(|r| format!("{r}\n"))
        .collect()
}

fn plan(train: &str) -> Value {
    json!({
        "schema_version": 1,
        "name": "dataset-tiny",
        "model": {"path": "model", "lora": {"r": 2, "lora_alpha": 4.0, "target_modules": ["q_proj", "v_proj"]}},
        "environment": {"backend": "dataset", "train": train, "rewards": [
            {"name": "correct", "rule": "final_number", "column": "answer"},
            {"name": "short", "rule": "length_penalty", "max_chars": 8, "weight": 0.5},
            {"name": "digits", "rule": "regex", "pattern": "[0-9]", "weight": 0.25}
        ]},
        "grpo": {"tasks_per_step": 2, "num_generations": 4, "max_completion_length": 8,
                 "max_turn_tokens": 8, "prompt_format": "plain"},
        "optimizer": {"learning_rate": 0.02},
        "steps": 3,
        "checkpoints": {"every": 1},
        "seeds": {"sampling": 5, "adapter_init": 11, "task_order": 7}
    })
}

fn setup() -> Scratch {
    let s = Scratch::new();
    write_tiny_model(&s.path().join("model"), &TinySpec::default());
    s.write("data/train.jsonl", &rows());
    s.write("plan.json", &plan("data/train.jsonl").to_string());
    s
}

fn run_ok(s: &Scratch, args: &[&str]) {
    let out = s.run(args);
    let (stdout, stderr) = text(&out);
    assert!(out.status.success(), "{args:?}\n{stdout}\n{stderr}");
}

fn read(s: &Scratch, rel: &str) -> String {
    std::fs::read_to_string(s.path().join(rel)).unwrap_or_else(|e| panic!("{rel}: {e}"))
}

#[test]
fn weighted_rewards_train_log_each_reward_and_resume_bit_for_bit() -> Result<()> {
    let s = setup();
    run_ok(&s, &["train", "--plan", "plan.json", "--output", "full"]);
    let rows: Vec<Value> = read(&s, "full/metrics.jsonl")
        .lines()
        .map(serde_json::from_str)
        .collect::<Result<_, _>>()?;
    assert_eq!(rows.len(), 3);
    for row in &rows {
        let part = |name: &str| row[format!("rewards/{name}/mean")].as_f64().expect(name);
        for name in ["correct", "short", "digits"] {
            assert!(row[format!("rewards/{name}/std")].is_f64(), "{name}: {row}");
        }
        // The episode reward is the weighted sum of the three.
        let weighted = part("correct") + 0.5 * part("short") + 0.25 * part("digits");
        let reward = row["reward"].as_f64().expect("reward");
        assert!((reward - weighted).abs() < 1e-9, "{reward} vs {weighted}");
    }
    run_ok(
        &s,
        &[
            "train",
            "--plan",
            "plan.json",
            "--output",
            "part",
            "--stop-after-step",
            "1",
        ],
    );
    run_ok(
        &s,
        &[
            "train",
            "--plan",
            "plan.json",
            "--output",
            "resumed",
            "--resume",
            "part",
        ],
    );
    assert_eq!(
        read(&s, "full/evidence.jsonl"),
        read(&s, "resumed/evidence.jsonl")
    );
    Ok(())
}

#[test]
fn bad_rows_and_rewards_are_refused_naming_the_field_before_any_output() {
    let s = setup();
    let cases: [(&str, &str, Value, &str); 7] = [
        (
            "missing.jsonl",
            "{\"prompt\": \"a\", \"answer\": 1}\n{\"prompt\": \"b\"}\n",
            plan("missing.jsonl"),
            "missing.jsonl line 2: `answer`: is missing",
        ),
        (
            "number.jsonl",
            "{\"prompt\": 3, \"answer\": 1}\n",
            plan("number.jsonl"),
            "number.jsonl line 1: `prompt`: must be a string",
        ),
        (
            "json.jsonl",
            "{\"prompt\": \"a\", \"answer\": 1}\nnot json\n",
            plan("json.jsonl"),
            "json.jsonl line 2: `(row)`: not a JSON object",
        ),
        (
            "text.jsonl",
            "{\"prompt\": \"a\", \"answer\": \"many\"}\n",
            plan("text.jsonl"),
            "text.jsonl line 1: `answer`: \"many\" is not a number",
        ),
        ("empty.jsonl", "\n", plan("empty.jsonl"), "holds no rows"),
        (
            "chat.jsonl",
            "{\"prompt\": [{\"role\": \"user\", \"content\": \"a\"}], \"answer\": 1}\n",
            plan("chat.jsonl"),
            "chat.jsonl line 1: `prompt`: is a list of chat messages, which needs grpo.prompt_format",
        ),
        (
            "data/train.jsonl",
            "",
            {
                let mut p = plan("data/train.jsonl");
                p["environment"]["rewards"][0] = json!({"name": "correct", "rule": "final_number"});
                p
            },
            "environment.rewards[0].column",
        ),
    ];
    for (file, content, plan, expected) in cases {
        if !content.is_empty() {
            s.write(file, content);
        }
        s.write("bad-plan.json", &plan.to_string());
        let out = s.run(&["train", "--plan", "bad-plan.json", "--output", "bad"]);
        let (_, stderr) = text(&out);
        assert_eq!(out.status.code(), Some(2), "{file}: {stderr}");
        assert!(stderr.contains(expected), "{file}: {stderr}");
        assert!(
            !s.path().join("bad").exists(),
            "{file}: the refused run left output"
        );
    }
}

#[test]
fn evaluate_draws_dev_rows_from_the_dev_file_and_refuses_a_leak() {
    let s = setup();
    s.write(
        "data/dev.jsonl",
        "{\"prompt\": \"What is 7 + 8?\", \"answer\": 15}\n{\"prompt\": \"What is 9 + 9?\", \"answer\": 18}\n",
    );
    let mut p = plan("data/train.jsonl");
    p["steps"] = json!(2);
    p["environment"]["dev"] = json!("data/dev.jsonl");
    // A Python reward: its log is sealed with the evaluation, never left beside it.
    s.write("rewards.py", REWARDS_PY);
    p["environment"]["rewards"]
        .as_array_mut()
        .expect("rewards")
        .push(
            json!({"name": "mine", "rule": "python", "file": "rewards.py",
            "function": "mentions_answer"}),
        );
    p["evaluation"] = json!({"checkpoints": [2], "dev": {"count": 1, "seed": 4},
        "held_out": {"tasks": [{"prompt": "What is 8 + 8?", "answer": 16}]},
        "num_generations": 2, "retention_max_new_tokens": 4});
    s.write("eval-plan.json", &p.to_string());
    run_ok(
        &s,
        &["train", "--plan", "eval-plan.json", "--output", "run"],
    );
    run_ok(&s, &["evaluate", "--resume", "run", "--output", "eval"]);
    assert!(s.path().join("eval/payload/report.md").is_file());
    // One call per policy and task set (1 task × 2 generations), at the checkpoint's step.
    let log = read(&s, "eval/payload/service.log");
    assert!(
        log.contains("scored 2 at step 2") && log.contains("scored 2 at step 0"),
        "{log}"
    );
    run_ok(&s, &["snapshot", "verify", "eval"]);
    // A DEV row that is also a TRAIN row: the splits leak, and evaluate says so.
    s.write(
        "data/dev.jsonl",
        "{\"prompt\": \"What is 0 + 1?\", \"answer\": 1}\n",
    );
    let out = s.run(&["evaluate", "--resume", "run", "--output", "eval-leak"]);
    let (_, stderr) = text(&out);
    assert!(
        !out.status.success() && stderr.contains("the splits leak"),
        "{stderr}"
    );
}

#[test]
fn a_plan_without_an_evaluation_section_is_evaluated_from_flags_and_solved_follows_them() {
    let s = setup();
    run_ok(&s, &["train", "--plan", "plan.json", "--output", "run"]);
    s.write(
        "data/dev.jsonl",
        "{\"prompt\": \"What is 7 + 8?\", \"answer\": 15}\n{\"prompt\": \"What is 9 + 9?\", \"answer\": 18}\n",
    );
    s.write(
        "data/held.jsonl",
        "{\"prompt\": \"What is 8 + 8?\", \"answer\": 16}\n",
    );
    let evaluate = |output: &str, extra: &[&str]| {
        let mut args = vec!["evaluate", "--resume", "run", "--output", output];
        args.extend(extra);
        let out = s.run(&args);
        let (_, stderr) = text(&out);
        (out.status.code(), stderr)
    };
    // Without the section and without both files: bad input naming the flags, nothing written.
    for (extra, expected) in [
        (&[][..], "give `evaluate` --dev FILE and --held-out FILE"),
        (&["--dev", "data/dev.jsonl"][..], "--dev / --held-out"),
    ] {
        let (code, stderr) = evaluate("refused", extra);
        assert!(code == Some(2) && stderr.contains(expected), "{stderr}");
        assert!(!s.path().join("refused").exists());
    }
    let files = ["--dev", "data/dev.jsonl", "--held-out", "data/held.jsonl"];
    let (code, stderr) = evaluate("bad", &[&files[..], &["--solved", "typo=1"]].concat());
    assert!(
        code == Some(2)
            && stderr.contains("evaluation.solved.reward")
            && stderr.contains("correct, short, digits"),
        "{stderr}"
    );
    let report = |output: &str, solved: &str| -> Value {
        let (code, stderr) = evaluate(
            output,
            &[&files[..], &["--retention", "none", "--solved", solved]].concat(),
        );
        assert_eq!(code, Some(0), "{stderr}");
        serde_json::from_str(&read(&s, &format!("{output}/payload/report.json"))).expect("json")
    };
    let strict = report("eval", "1.5");
    // Every checkpoint the run keeps (the latest two: `checkpoints.keep_last`'s default), each
    // reward's mean, no retention check.
    let steps: Vec<u64> = strict["checkpoints"]
        .as_array()
        .map(|a| a.iter().filter_map(|c| c["step"].as_u64()).collect())
        .unwrap_or_default();
    assert_eq!(steps, [2, 3], "{strict}");
    assert_eq!(strict["task_counts"]["dev"], 2);
    assert_eq!(strict["task_counts"]["held_out"], 1);
    assert_eq!(strict["retention"], json!([]));
    assert!(
        strict["retention_set"]
            .as_str()
            .unwrap_or_default()
            .starts_with("none")
    );
    assert_eq!(strict["solved_rule"], "the episode's reward ≥ 1.5");
    let parts = &strict["held_out_base"]["parts"];
    for name in ["correct", "short", "digits"] {
        assert!(parts[name].is_f64(), "{name}: {parts}");
    }
    // `final_number` scores 0 or 1, so its own score ≥ 0 holds for every episode.
    let lenient = report("eval-lenient", "correct=0");
    assert_eq!(lenient["solved_rule"], "reward `correct`'s own score ≥ 0");
    assert_eq!(lenient["held_out_base"]["solved"], 1.0, "{lenient}");
    assert_eq!(
        lenient["held_out_base"]["mean_reward"], strict["held_out_base"]["mean_reward"],
        "the rule changes only what counts as solved"
    );
    let md = read(&s, "eval/payload/report.md");
    assert!(
        md.contains("Solved: the episode's reward ≥ 1.5.")
            && md.contains("| reward functions |")
            && md.contains("correct ")
            && md.contains("## MGSM retention\n\nThe set: none"),
        "{md}"
    );
    assert!(!s.path().join("eval/payload/retention.svg").exists());
    run_ok(&s, &["snapshot", "verify", "eval"]);
}

#[test]
fn train_model_replaces_the_plans_model_folder() {
    let s = setup();
    let mut p = plan("data/train.jsonl");
    p["model"]["path"] = json!("elsewhere");
    p["steps"] = json!(1);
    s.write("moved.json", &p.to_string());
    // The plan's folder does not exist; --model names the one that does.
    let out = s.run(&["train", "--plan", "moved.json", "--output", "a"]);
    let (_, stderr) = text(&out);
    assert_eq!(out.status.code(), Some(2), "{stderr}");
    assert!(stderr.contains("model.path"), "{stderr}");
    run_ok(
        &s,
        &[
            "train",
            "--plan",
            "moved.json",
            "--model",
            "model",
            "--output",
            "b",
        ],
    );
    let out = s.run(&[
        "train",
        "--plan",
        "moved.json",
        "--model",
        "data",
        "--output",
        "c",
    ]);
    let (_, stderr) = text(&out);
    assert!(
        out.status.code() == Some(2) && stderr.contains("--model"),
        "{stderr}"
    );
    assert!(!s.path().join("c").exists());
}

/// Reward functions written for TRL 1.16's `reward_funcs` (one call per generation batch, with
/// `completion_ids` and `trainer_state`; `None` where a reward does not apply), and four that go
/// wrong.
const REWARDS_PY: &str = r#"
import sys, time
def mentions_answer(prompts, completions, completion_ids, trainer_state, answer, **kwargs):
    print("scored", len(completions), "at step", trainer_state.global_step, file=sys.stderr)
    assert len(completion_ids) == len(completions)
    return [None if a == 0 else 1.0 if str(a) in c else 0.5 * len(ids) / 100
            for c, ids, a in zip(completions, completion_ids, answer)]
async def polite(prompts, completions, **kwargs):
    return [0.1 if "please" in c else 0.0 for c in completions]
def broken(prompts, completions, **kwargs):
    raise ValueError("boom")
def not_float(prompts, completions, **kwargs):
    return ["x" for _ in completions]
def nan(prompts, completions, **kwargs):
    return [float("nan") for _ in completions]
def slow(prompts, completions, **kwargs):
    time.sleep(60)
"#;

fn python_plan(function: &str) -> Value {
    let mut p = plan("data/train.jsonl");
    let mut reward = json!({"name": "mine", "rule": "python", "file": "rewards.py",
        "function": function, "weight": 2.0});
    if function == "slow" {
        reward["timeout_s"] = json!(1);
    }
    p["environment"]["rewards"]
        .as_array_mut()
        .expect("rewards")
        .push(reward);
    p
}

#[test]
fn a_python_reward_with_trls_signature_trains_and_resumes_bit_for_bit() -> Result<()> {
    let s = setup();
    s.write("rewards.py", REWARDS_PY);
    let mut plan = python_plan("mentions_answer");
    plan["environment"]["rewards"]
        .as_array_mut()
        .expect("rewards")
        .push(
            json!({"name": "polite", "rule": "python", "file": "rewards.py", "function": "polite"}),
        );
    s.write("py.json", &plan.to_string());
    run_ok(&s, &["train", "--plan", "py.json", "--output", "full"]);
    let first: Value =
        serde_json::from_str(read(&s, "full/metrics.jsonl").lines().next().unwrap_or(""))?;
    assert!(
        first["rewards/mine/mean"].as_f64().is_some_and(|m| m > 0.0)
            && first["rewards/polite/mean"].is_number(),
        "an async function is awaited: {first}"
    );
    let log = read(&s, "full/service.log");
    assert!(
        log.contains("scored 8 at step 0") && log.contains("scored 8 at step 2"),
        "one call per generation batch (2 tasks × 4), its stderr in the run's log: {log}"
    );
    run_ok(
        &s,
        &[
            "train",
            "--plan",
            "py.json",
            "--output",
            "part",
            "--stop-after-step",
            "1",
        ],
    );
    run_ok(
        &s,
        &[
            "train", "--plan", "py.json", "--output", "resumed", "--resume", "part",
        ],
    );
    assert_eq!(
        read(&s, "full/evidence.jsonl"),
        read(&s, "resumed/evidence.jsonl")
    );
    Ok(())
}

#[test]
fn a_python_reward_that_raises_answers_no_float_or_hangs_fails_the_step_and_leaves_nothing() {
    let s = setup();
    s.write("rewards.py", REWARDS_PY);
    for (function, expected) in [
        ("broken", "ValueError: boom"),
        (
            "not_float",
            "returned \"x\" for completion 0: each reward must be a float or None",
        ),
        ("nan", "each reward must be a finite float"),
        ("slow", "gave no answer within 1 s"),
        ("absent", "has no attribute 'absent'"),
    ] {
        s.write("bad.json", &python_plan(function).to_string());
        let out = s.run(&["train", "--plan", "bad.json", "--output", function]);
        let (_, stderr) = text(&out);
        assert!(
            !out.status.success() && stderr.contains(expected),
            "{function}: {stderr}"
        );
        // Nothing was trained, so nothing is left: the corrected command runs as typed.
        assert!(
            !s.path().join(function).exists(),
            "{function}: the failed start left its folder"
        );
    }
    // An empty folder made beforehand stays, emptied again.
    std::fs::create_dir(s.path().join("made")).expect("mkdir");
    s.write("bad.json", &python_plan("broken").to_string());
    let out = s.run(&["train", "--plan", "bad.json", "--output", "made"]);
    assert!(!out.status.success());
    let left = std::fs::read_dir(s.path().join("made")).map(Iterator::count);
    assert_eq!(left.ok(), Some(0), "the user's folder stays, empty");
    s.write(
        "missing.json",
        &{
            let mut p = python_plan("mentions_answer");
            p["environment"]["rewards"][3]["file"] = json!("nowhere.py");
            p
        }
        .to_string(),
    );
    let out = s.run(&["train", "--plan", "missing.json", "--output", "missing"]);
    let (_, stderr) = text(&out);
    assert!(
        out.status.code() == Some(2) && stderr.contains("environment.rewards[3].file"),
        "{stderr}"
    );
    assert!(!s.path().join("missing").exists());
}

#[test]
fn check_starts_and_calls_every_reward_writing_nothing_and_a_reward_typo_exits_2() {
    let s = setup();
    s.write("rewards.py", REWARDS_PY);
    s.write("py.json", &python_plan("mentions_answer").to_string());
    let before = hr_tests::listing(s.path());
    let out = s.run(&["check", "--plan", "py.json"]);
    let (stdout, stderr) = text(&out);
    assert!(out.status.success(), "{stderr}");
    assert!(
        stdout.contains("LoRA: rank ")
            && stdout.contains("rewards: ")
            && stdout.contains("mine (1 batch function(s) started and called once)")
            && stdout.ends_with("ok: `train` would start this plan\n"),
        "{stdout}"
    );
    assert_eq!(hr_tests::listing(s.path()), before, "check writes nothing");
    let out = s.run(&["check", "--plan", "py.json", "--json"]);
    let summary: Value = serde_json::from_str(text(&out).0.trim()).expect("one JSON object");
    assert_eq!(summary["check"]["rewards_called"], 1);
    // A function name with a typo fails check and train alike, as bad input; one that raises
    // when called fails check.
    for (function, expected) in [
        ("absent", "has no attribute 'absent'"),
        ("broken", "with an empty completion"),
    ] {
        s.write("bad.json", &python_plan(function).to_string());
        let out = s.run(&["check", "--plan", "bad.json"]);
        let (_, stderr) = text(&out);
        assert!(
            out.status.code() == Some(2)
                && stderr.contains("environment.rewards")
                && stderr.contains(expected),
            "{function}: {stderr}"
        );
    }
    s.write("bad.json", &python_plan("absent").to_string());
    let out = s.run(&["train", "--plan", "bad.json", "--output", "typo"]);
    let (_, stderr) = text(&out);
    assert_eq!(out.status.code(), Some(2), "{stderr}");
    assert!(!s.path().join("typo").exists());
}

/// Checks that a chat row reaches the function as TRL passes a conversational one.
const CHAT_REWARD_PY: &str = r#"
def conversational(prompts, completions, answer, **kwargs):
    assert prompts[0][-1] == {"role": "user", "content": "What is 2 + 2?"}, prompts
    assert completions[0][0]["role"] == "assistant", completions
    return [1.0 + len(c[0]["content"]) * 0.0 for c in completions]
"#;

#[test]
fn chat_rows_train_and_reach_a_python_reward_as_trl_passes_them() -> Result<()> {
    let s = setup();
    s.write("rewards.py", CHAT_REWARD_PY);
    let row = json!({"prompt": [{"role": "system", "content": "Answer with a number."},
        {"role": "user", "content": "What is 2 + 2?"}], "answer": 4});
    s.write("data/chat.jsonl", &format!("{row}\n{row}\n"));
    let mut p = plan("data/chat.jsonl");
    p["grpo"]["prompt_format"] = json!("chat");
    p["grpo"]["system_prompt"] = json!("Unused: the rows bring their own.");
    p["steps"] = json!(1);
    p["environment"]["rewards"] = json!([{"name": "chat", "rule": "python",
        "file": "rewards.py", "function": "conversational"}]);
    s.write("chat.json", &p.to_string());
    run_ok(&s, &["train", "--plan", "chat.json", "--output", "chat"]);
    let row: Value =
        serde_json::from_str(read(&s, "chat/metrics.jsonl").lines().next().unwrap_or(""))?;
    assert_eq!(row["rewards/chat/mean"], json!(1.0), "{row}");
    Ok(())
}

#[test]
fn the_shipped_own_data_plan_trains_with_its_python_rewards() -> Result<()> {
    let s = Scratch::new();
    write_tiny_model(&s.path().join("model"), &TinySpec::default());
    let plan = repo_root().join("plans/smollm2-own-data.json");
    let plan = plan.to_str().expect("a UTF-8 path");
    run_ok(
        &s,
        &[
            "train",
            "--plan",
            plan,
            "--model",
            "model",
            "--output",
            "own",
            "--stop-after-step",
            "1",
        ],
    );
    let row: Value =
        serde_json::from_str(read(&s, "own/metrics.jsonl").lines().next().unwrap_or(""))?;
    for name in ["correct", "concise"] {
        assert!(
            row[format!("rewards/{name}/mean")].is_f64(),
            "{name}: {row}"
        );
    }
    Ok(())
}

#[test]
fn a_prompt_longer_than_the_models_context_is_refused_naming_its_row() {
    let s = setup();
    // About 800 byte-level tokens: with 8 completion tokens, past the tiny model's 512 positions.
    // Last of thirteen rows: refused before the first step, not when a step draws it.
    let long = json!({"prompt": "0123456789".repeat(80), "answer": 1});
    s.write("data/long.jsonl", &format!("{}{long}\n", rows()));
    s.write("long.json", &plan("data/long.jsonl").to_string());
    let out = s.run(&["train", "--plan", "long.json", "--output", "long"]);
    let (_, stderr) = text(&out);
    assert!(
        out.status.code() == Some(2)
            && stderr.contains("task long-13")
            && stderr.contains("context of 512 positions"),
        "{stderr}"
    );
    assert!(!s.path().join("long").exists(), "nothing is left");
}
