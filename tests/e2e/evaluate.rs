//! `hessian-recipes evaluate` on a finished tiny run: it adopts exactly the checkpoints the plan
//! lists, selects on DEV, assesses HELD-OUT and MGSM retention and writes a sealed report; a
//! tampered, missing or foreign-base checkpoint and leaking task sets are refused (exit 3) with nothing left
//! behind; a plan without an evaluation section is bad input (exit 2).

use hr_tests::tiny_model::{TinySpec, write_tiny_model};
use hr_tests::{Scratch, text};
use serde_json::{Value, json};

/// The e2e training plan with an evaluation section adopting steps 2 and 4.
fn plan(evaluation: Option<Value>) -> Value {
    let mut plan = crate::train::plan(4, 2);
    if let Some(e) = evaluation {
        plan["evaluation"] = e;
    }
    plan
}

fn evaluation() -> Value {
    json!({"checkpoints": [2, 4], "dev": {"count": 3, "seed": 1},
           "held_out": {"count": 3, "seed": 2}, "num_generations": 2,
           "retention_max_new_tokens": 4})
}

/// A scratch folder holding a finished run `run/` of `plan`.
fn trained(plan: &Value) -> Scratch {
    let s = Scratch::new();
    write_tiny_model(&s.path().join("model"), &TinySpec::default());
    s.write("plan.json", &plan.to_string());
    let out = s.run(&["train", "--plan", "plan.json", "--output", "run"]);
    let (stdout, stderr) = text(&out);
    assert!(out.status.success(), "{stdout}\n{stderr}");
    s
}

/// The folder of the run's checkpoint at `step`.
fn checkpoint_dir(s: &Scratch, step: u64) -> std::path::PathBuf {
    let listed =
        std::fs::read_to_string(s.path().join("run/core/checkpoints.jsonl")).expect("list");
    let uuid = listed
        .lines()
        .map(|l| serde_json::from_str::<Value>(l).expect("line"))
        .find(|c| c["steps_completed"] == step)
        .unwrap_or_else(|| panic!("no checkpoint at step {step}"))["uuid"]
        .as_str()
        .expect("uuid")
        .to_owned();
    s.path().join(format!("run/core/checkpoints/{uuid}"))
}

/// `evaluate --resume run --output eval` with `extra` arguments.
fn evaluate(s: &Scratch, extra: &[&str]) -> std::process::Output {
    let mut args = vec!["evaluate", "--resume", "run", "--output", "eval"];
    args.extend(extra);
    s.run(&args)
}

/// The sealed `report.json` of `evaluate --output eval`.
fn sealed_report(s: &Scratch) -> Value {
    serde_json::from_slice(
        &std::fs::read(s.path().join("eval/payload/report.json")).expect("report.json"),
    )
    .expect("report json")
}

fn refused(s: &Scratch, code: i32, needle: &str) {
    let out = evaluate(s, &[]);
    let (_, stderr) = text(&out);
    assert_eq!(out.status.code(), Some(code), "{stderr}");
    assert!(stderr.contains(needle), "expected {needle:?} in: {stderr}");
    assert!(!s.path().join("eval").exists(), "nothing is written");
}

#[test]
fn evaluate_adopts_the_listed_checkpoints_selects_on_dev_and_writes_a_sealed_report() {
    let s = trained(&plan(Some(evaluation())));
    let out = evaluate(&s, &["--json"]);
    let (stdout, stderr) = text(&out);
    assert!(out.status.success(), "{stdout}\n{stderr}");
    let report = sealed_report(&s);
    // --json: stdout is one summary object that agrees with the sealed report.
    let summary: Value = serde_json::from_str(stdout.trim()).expect("one JSON object");
    assert_eq!(summary["selected_step"], report["selected_step"]);
    assert_eq!(
        summary["held_out_mean_reward"]["base"],
        report["held_out_base"]["mean_reward"]
    );
    assert!(
        summary["report"]
            .as_str()
            .is_some_and(|r| r.ends_with("eval/payload/report.md")),
        "{summary}"
    );
    let steps: Vec<u64> = report["checkpoints"]
        .as_array()
        .expect("checkpoints")
        .iter()
        .map(|c| c["step"].as_u64().expect("step"))
        .collect();
    assert_eq!(steps, [2, 4]);
    // The selection follows the documented rule on the DEV scores it reports.
    let dev: Vec<f64> = report["checkpoints"]
        .as_array()
        .expect("checkpoints")
        .iter()
        .map(|c| c["dev"]["mean_reward"].as_f64().expect("dev"))
        .collect();
    let expected = if dev[1] > dev[0] { 4 } else { 2 };
    assert_eq!(report["selected_step"], expected, "{report}");
    // The training run probed DEV at the same steps with the same sampling: its metrics rows
    // carry the very scores the evaluation selected on, and the other steps none.
    let rows: Vec<Value> = std::fs::read_to_string(s.path().join("run/metrics.jsonl"))
        .expect("metrics")
        .lines()
        .map(|l| serde_json::from_str(l).expect("row"))
        .collect();
    let probed: Vec<(u64, f64)> = rows
        .iter()
        .filter_map(|r| Some((r["step"].as_u64()?, r["dev_reward"].as_f64()?)))
        .collect();
    assert_eq!(probed, [(2, dev[0]), (4, dev[1])], "{rows:?}");
    assert_eq!(report["held_out_base"]["episodes"], 6);
    let langs: Vec<&str> = report["retention"]
        .as_array()
        .expect("retention")
        .iter()
        .map(|r| r["lang"].as_str().expect("lang"))
        .collect();
    assert!(langs.contains(&"de") && langs.contains(&"zh"), "{langs:?}");
    // grpo.beta is 0: no KL is logged, so there is no KL plot.
    assert!(!s.path().join("eval/payload/kl.svg").exists());
    for plot in [
        "reward",
        "entropy",
        "completion_length",
        "dev",
        "held_out",
        "retention",
    ] {
        let svg = std::fs::read_to_string(s.path().join(format!("eval/payload/{plot}.svg")))
            .expect("plot");
        assert!(
            svg.starts_with("<svg") && svg.trim_end().ends_with("</svg>"),
            "{plot}"
        );
    }
    let md = std::fs::read_to_string(s.path().join("eval/payload/report.md")).expect("md");
    assert!(md.contains("(selected)") && md.contains("![MGSM retention](retention.svg)"));
    for title in [
        "## Sample completions: HELD-OUT, step",
        "## Sample completions: HELD-OUT, the base model",
        "## Sample completions: DEV, step",
    ] {
        assert!(md.contains(title), "{title}: {md}");
    }
    let samples = report["held_out_selected"]["samples"]
        .as_array()
        .expect("samples");
    assert_eq!(
        samples.len(),
        4,
        "the two best and the two worst of 6 episodes"
    );
    let verify = s.run(&["snapshot", "verify", "eval"]);
    assert!(verify.status.success(), "{:?}", text(&verify));
}

#[test]
fn a_tampered_missing_or_foreign_checkpoint_refuses_the_whole_evaluation() {
    let s = trained(&plan(Some(evaluation())));
    // Tamper with the adapter of the step-2 checkpoint.
    let adapter = checkpoint_dir(&s, 2).join("payload/native/adapter_model.safetensors");
    let mut bytes = std::fs::read(&adapter).expect("adapter");
    let last = bytes.len() - 1;
    bytes[last] ^= 1;
    std::fs::write(&adapter, bytes).expect("tamper");
    refused(&s, 3, "checkpoint of step 2 cannot be adopted");

    // A checkpoint that was garbage-collected (its folder is gone).
    let s = trained(&plan(Some(evaluation())));
    let step4 = checkpoint_dir(&s, 4);
    std::fs::remove_dir_all(&step4).expect("remove");
    refused(&s, 3, "checkpoint of step 4 cannot be adopted");

    // Other weights of the same shape under the plan's model.path.
    let s = trained(&plan(Some(evaluation())));
    let other = TinySpec {
        seed: 8,
        ..TinySpec::default()
    };
    write_tiny_model(&s.path().join("model"), &other);
    refused(&s, 3, "trained on another base model");
}

#[test]
fn a_held_out_question_planted_in_dev_is_caught_as_a_leak() {
    let leak = json!({"kind": "digits", "question": "Answer with digits only: 42?"});
    let mut e = evaluation();
    e["dev"] =
        json!({"tasks": [leak, {"kind": "digits", "question": "Answer with digits only: 7?"}]});
    e["held_out"] = json!({"tasks": [leak]});
    let s = trained(&plan(Some(e)));
    refused(&s, 3, "the dev and held_out tasks share the question");
}

#[test]
fn a_run_without_an_evaluation_section_is_bad_input() {
    let s = trained(&plan(None));
    refused(&s, 2, "has no `evaluation` section");
}

#[test]
fn a_compared_adapter_runs_the_same_held_out_episodes_and_retention_items() {
    let s = trained(&plan(Some(evaluation())));
    // Each checkpoint's own adapter folder, compared as if trained elsewhere: the one of the
    // selected step must score exactly as the selected checkpoint does.
    let native = |step| checkpoint_dir(&s, step).join("payload/native");
    let (two, four) = (native(2), native(4));
    let out = evaluate(
        &s,
        &[
            "--compare",
            &format!("at-2={}", two.display()),
            "--compare",
            &format!("at-4={}", four.display()),
        ],
    );
    let (stdout, stderr) = text(&out);
    assert!(out.status.success(), "{stdout}\n{stderr}");
    assert!(
        stdout.contains("at-2 ") && stdout.contains("at-4 "),
        "{stdout}"
    );
    let report = sealed_report(&s);
    let selected = report["selected_step"].as_u64().expect("selected");
    let name = format!("at-{selected}");
    let compared = report["held_out_compared"]
        .as_array()
        .expect("held_out_compared")
        .iter()
        .find(|c| c["name"] == name.as_str())
        .expect("the selected step's adapter");
    assert_eq!(
        compared["held_out"], report["held_out_selected"],
        "{report}"
    );
    let weights = std::fs::read(native(selected).join("adapter_model.safetensors")).expect("w");
    assert_eq!(
        compared["adapter_sha256"],
        hr_seal::sha256_hex(&weights).as_str()
    );
    for r in report["retention"].as_array().expect("retention") {
        assert_eq!(r["compared"][&name], r["selected"], "{r}");
    }
    let md = std::fs::read_to_string(s.path().join("eval/payload/report.md")).expect("md");
    assert!(
        md.contains("| at-2 (compared) |") && md.contains("| at-4 |"),
        "{md}"
    );
    let held_out =
        std::fs::read_to_string(s.path().join("eval/payload/held_out.svg")).expect("svg");
    assert!(held_out.contains("at-4"), "{held_out}");
    let verify = s.run(&["snapshot", "verify", "eval"]);
    assert!(verify.status.success(), "{:?}", text(&verify));

    // An adapter of another shape (rank 4 declared, rank-8 weights) is bad input, named.
    let alien = s.path().join("alien");
    std::fs::create_dir_all(&alien).expect("alien");
    let native = native(2);
    std::fs::copy(
        native.join("adapter_model.safetensors"),
        alien.join("adapter_model.safetensors"),
    )
    .expect("copy");
    let mut config: Value =
        serde_json::from_slice(&std::fs::read(native.join("adapter_config.json")).expect("config"))
            .expect("json");
    config["r"] = json!(4);
    std::fs::write(alien.join("adapter_config.json"), config.to_string()).expect("write");
    let out = s.run(&[
        "evaluate",
        "--resume",
        "run",
        "--output",
        "eval2",
        "--compare",
        &format!("alien={}", alien.display()),
    ]);
    let (_, stderr) = text(&out);
    assert_eq!(out.status.code(), Some(2), "{stderr}");
    assert!(
        stderr.contains("compared adapter `alien`") && stderr.contains("does not fit"),
        "{stderr}"
    );
    assert!(!s.path().join("eval2").exists(), "nothing is left behind");
}

#[test]
fn a_bad_compare_flag_is_refused_before_anything_runs() {
    let s = Scratch::new();
    s.write("adapter/adapter_config.json", "{}");
    for (flag, needle, code) in [
        ("trl", "give NAME=DIR", 2),
        ("base=adapter", "taken by the report's own rows", 2),
        ("a b=adapter", "use letters, digits", 2),
        ("trl=missing", "no adapter_config.json there", 2),
    ] {
        let out = evaluate(&s, &["--compare", flag]);
        let (_, stderr) = text(&out);
        assert_eq!(out.status.code(), Some(code), "{flag}: {stderr}");
        assert!(
            stderr.contains(needle),
            "{flag}: expected {needle:?} in {stderr}"
        );
        assert!(!s.path().join("eval").exists());
    }
    let out = evaluate(&s, &["--compare", "x=adapter", "--compare", "x=adapter"]);
    let (_, stderr) = text(&out);
    assert_eq!(out.status.code(), Some(2), "{stderr}");
    assert!(stderr.contains("the name is given twice"), "{stderr}");
    assert!(!s.path().join("eval").exists());
}

#[test]
fn a_run_stopped_and_resumed_into_a_new_folder_is_evaluated_along_its_resume_chain() {
    let s = Scratch::new();
    write_tiny_model(&s.path().join("model"), &TinySpec::default());
    s.write("plan.json", &plan(Some(evaluation())).to_string());
    for args in [
        &[
            "train",
            "--plan",
            "plan.json",
            "--output",
            "first",
            "--stop-after-step",
            "3",
        ][..],
        &[
            "train",
            "--plan",
            "plan.json",
            "--output",
            "run",
            "--resume",
            "first",
        ][..],
    ] {
        let out = s.run(args);
        let (stdout, stderr) = text(&out);
        assert!(out.status.success(), "{args:?}\n{stdout}\n{stderr}");
    }
    // Step 2 was saved by the first run only: `run` began from its step 3.
    let listed =
        std::fs::read_to_string(s.path().join("run/core/checkpoints.jsonl")).expect("list");
    assert!(!listed.contains(r#""steps_completed":2"#), "{listed}");
    let out = evaluate(&s, &[]);
    let (stdout, stderr) = text(&out);
    assert!(out.status.success(), "{stdout}\n{stderr}");
    let report = sealed_report(&s);
    let steps: Vec<u64> = report["checkpoints"]
        .as_array()
        .map(|a| a.iter().filter_map(|c| c["step"].as_u64()).collect())
        .unwrap_or_default();
    assert_eq!(steps, [2, 4], "{report}");
}

#[test]
fn a_users_mgsm_file_replaces_the_retention_set_and_the_report_names_it() {
    let mut e = evaluation();
    e["retention_file"] = json!("mgsm-mine.jsonl");
    let s = trained(&plan(Some(e)));
    s.write(
        "mgsm-mine.jsonl",
        &[
            json!({"question": "Pierre a 3 pommes et en achète 4. Combien en a-t-il ?",
                   "answer_number": 7, "lang": "fr", "answer": "7", "equation_solution": "3+4"}),
            json!({"question": "Juma ana machungwa 2 na ananunua 5. Ana mangapi?",
                   "answer_number": 7, "lang": "sw"}),
        ]
        .map(|r| format!("{r}\n"))
        .concat(),
    );
    let out = evaluate(&s, &[]);
    let (stdout, stderr) = text(&out);
    assert!(out.status.success(), "{stdout}\n{stderr}");
    let report = sealed_report(&s);
    let langs: Vec<&str> = report["retention"]
        .as_array()
        .map(|r| r.iter().filter_map(|l| l["lang"].as_str()).collect())
        .unwrap_or_default();
    assert_eq!(langs, ["fr", "sw"], "{report}");
    let set = report["retention_set"].as_str().unwrap_or_default();
    assert!(set.contains("mgsm-mine.jsonl (2 items, sha256 "), "{set}");
    let md = std::fs::read_to_string(s.path().join("eval/payload/report.md")).expect("report.md");
    assert!(
        md.contains("The set: ") && md.contains("mgsm-mine.jsonl"),
        "{md}"
    );
}
