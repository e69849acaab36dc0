//! `hessian-recipes managed prepare`: a source-bound experiment that passes `cluster check`,
//! searched plan fields as Determined hyperparameters (bad ones refused), and a rank per GPU for
//! a sharded plan.

use hr_tests::{Scratch, text};
use serde_json::json;

use crate::managed::setup;

fn prepare(s: &Scratch, out: &str, extra: &[&str]) -> std::process::Output {
    let mut args = vec![
        "managed",
        "prepare",
        "--plan",
        "plan.json",
        "--output",
        out,
        "--profile",
        "local",
        "--max-wall-seconds",
        "600",
        "--device",
        "cpu",
    ];
    args.extend_from_slice(extra);
    s.run(&args)
}

#[test]
fn prepare_marks_searched_fields_as_determined_hyperparameters_and_refuses_bad_ones() {
    let s = setup();
    // Every search here runs --unqualified, as a search must.
    let prepare =
        |out: &str, extra: &[&str]| prepare(&s, out, &[&["--unqualified"], extra].concat());
    let out = prepare(
        "runs/asha",
        &[
            "--hparam",
            "optimizer.learning_rate=log:1e-4..1e-2",
            "--hparam",
            "grpo.beta=cat:0,0.04",
            "--searcher",
            "adaptive_asha",
            "--max-trials",
            "4",
        ],
    );
    let (stdout, stderr) = text(&out);
    assert!(out.status.success(), "{stdout}\n{stderr}");
    let yaml = std::fs::read_to_string(s.path().join("runs/asha/experiment.yaml")).expect("yaml");
    let config = hr_config::parse_yaml(&yaml, "experiment.yaml").expect("yaml");
    assert_eq!(config["searcher"]["name"], "adaptive_asha", "{yaml}");
    assert_eq!(config["searcher"]["max_trials"], 4, "{yaml}");
    let hp = &config["hyperparameters"];
    assert_eq!(hp["optimizer"]["learning_rate"]["type"], "log", "{hp}");
    assert_eq!(hp["optimizer"]["learning_rate"]["minval"], -4.0, "{hp}");
    assert_eq!(
        hp["optimizer"]["beta1"],
        json!({"type": "const", "val": 0.9}),
        "{hp}"
    );
    assert_eq!(
        hp["grpo"]["beta"],
        json!({"type": "categorical", "vals": [0, 0.04]}),
        "{hp}"
    );
    assert_eq!(
        hp["lora"]["type"], "const",
        "an unsearched section stays one constant"
    );
    let check = s.run(&["cluster", "check", "runs/asha/experiment.yaml"]);
    assert!(check.status.success(), "{}", text(&check).0);
    // Each refused before anything is left behind, naming the flag and the fix.
    for (n, (extra, says)) in [
        (
            &["--hparam", "optimizer.learning_rate=log:1e-4..1e-2"][..],
            "--searcher",
        ),
        (
            &[
                "--hparam",
                "optimizer.nope=double:0..1",
                "--searcher",
                "random",
            ][..],
            "optimizer.nope",
        ),
        (
            &["--hparam", "lora.r=int:2..8", "--searcher", "random"][..],
            "as the plan writes it",
        ),
        (
            &[
                "--hparam",
                "optimizer.learning_rate=double:-1..1",
                "--searcher",
                "random",
            ][..],
            "refuses -1",
        ),
        (
            &["--hparam", "grpo.beta=double:0..1", "--searcher", "grid"][..],
            ":COUNT",
        ),
        (
            &[
                "--hparam",
                "seeds.sampling=int:1..9",
                "--searcher",
                "random",
            ][..],
            "grpo, optimizer or lora",
        ),
    ]
    .into_iter()
    .enumerate()
    {
        let folder = format!("runs/bad{n}");
        let out = prepare(&folder, extra);
        let (_, stderr) = text(&out);
        assert_eq!(out.status.code(), Some(2), "{extra:?}: {stderr}");
        assert!(stderr.contains(says), "{extra:?}: {stderr}");
        assert!(!s.path().join(&folder).exists(), "{extra:?}");
    }
    // A search's trials train plans outside any proofs' family.
    let out = self::prepare(
        &s,
        "runs/proved",
        &[
            "--proofs",
            "p",
            "--hparam",
            "grpo.beta=cat:0,1",
            "--searcher",
            "random",
        ],
    );
    let (_, stderr) = text(&out);
    assert_eq!(out.status.code(), Some(2), "{stderr}");
    assert!(stderr.contains("instead of --proofs"), "{stderr}");
    assert!(!s.path().join("runs/proved").exists());
}

#[test]
fn prepare_with_slots_launches_a_rank_per_gpu_for_a_sharded_plan_and_refuses_others() {
    let s = setup();
    let prepare = |out: &str, extra: &[&str]| {
        let mut args = vec![
            "managed",
            "prepare",
            "--plan",
            "plan.json",
            "--output",
            out,
            "--profile",
            "local",
            "--max-wall-seconds",
            "600",
            "--unqualified",
            "--slots",
            "2",
        ];
        args.extend_from_slice(extra);
        s.run(&args)
    };
    // One shard cannot be spread over two GPUs, nor can CPU ranks hold GPUs.
    let out = prepare("runs/one-shard", &["--device", "cuda"]);
    assert_eq!(out.status.code(), Some(2), "{}", text(&out).1);
    assert!(text(&out).1.contains("parallel.shards"), "{}", text(&out).1);
    assert!(!s.path().join("runs/one-shard").exists());
    let mut plan: serde_json::Value =
        serde_json::from_str(&std::fs::read_to_string(s.path().join("plan.json")).expect("plan"))
            .expect("json");
    plan["parallel"] = json!({"shards": 2});
    s.write("plan.json", &plan.to_string());
    let out = prepare("runs/cpu", &["--device", "cpu"]);
    assert_eq!(out.status.code(), Some(2), "{}", text(&out).1);
    let out = prepare("runs/two", &["--device", "cuda"]);
    assert!(out.status.success(), "{}", text(&out).1);
    let yaml = std::fs::read_to_string(s.path().join("runs/two/experiment.yaml")).expect("yaml");
    let config = hr_config::parse_yaml(&yaml, "experiment.yaml").expect("yaml");
    assert_eq!(config["resources"]["slots_per_trial"], 2, "{yaml}");
    let entrypoint: Vec<&str> = config["entrypoint"]
        .as_array()
        .expect("a list")
        .iter()
        .filter_map(|w| w.as_str())
        .collect();
    let launch = entrypoint
        .iter()
        .position(|w| *w == "launch")
        .expect("launch");
    assert_eq!(entrypoint[launch + 1], "--", "{entrypoint:?}");
    assert_eq!(entrypoint[launch + 3], "managed-training", "{entrypoint:?}");
    let check = s.run(&["cluster", "check", "runs/two/experiment.yaml"]);
    assert!(check.status.success(), "{}", text(&check).0);
}

#[test]
fn prepare_writes_a_source_bound_experiment_that_passes_cluster_check() {
    let s = setup();
    let prepare = |out: &str, extra: &[&str]| prepare(&s, out, extra);
    // Six steps are more than the qualification: proofs, or an explicit --unqualified.
    let out = prepare("runs/prep", &[]);
    let (_, stderr) = text(&out);
    assert_eq!(out.status.code(), Some(2), "{stderr}");
    assert!(stderr.contains("pass --proofs DIR"), "{stderr}");
    let out = prepare("runs/prep", &["--unqualified"]);
    let (stdout, stderr) = text(&out);
    assert!(out.status.success(), "{stdout}\n{stderr}");
    assert!(
        stdout.contains("det experiment create runs/prep/experiment.yaml"),
        "{stdout}"
    );
    let yaml = std::fs::read_to_string(s.path().join("runs/prep/experiment.yaml")).expect("yaml");
    let copy = s.path().join("runs/prep/source/hessian-recipes");
    assert!(copy.is_file() && s.path().join("runs/prep/source/SOURCE.json").is_file());
    assert!(
        yaml.contains(&copy.display().to_string()),
        "runs the copy: {yaml}"
    );
    assert!(
        yaml.contains("managed-training") && yaml.contains("batches: 6"),
        "{yaml}"
    );
    let plan: serde_json::Value = serde_json::from_slice(
        &std::fs::read(s.path().join("runs/prep/experiment-plan.json")).expect("plan"),
    )
    .expect("json");
    assert!(
        plan["model"]["path"]
            .as_str()
            .is_some_and(|p| p.starts_with('/')),
        "{plan}"
    );
    // The plan's settings are the experiment's (constant) hyperparameters.
    let config = hr_config::parse_yaml(&yaml, "experiment.yaml").expect("yaml");
    let hp = &config["hyperparameters"];
    assert_eq!(
        hp["steps"],
        serde_json::json!({"type": "const", "val": 6}),
        "{hp}"
    );
    assert_eq!(hp["grpo"]["type"], "const", "{hp}");
    assert_eq!(
        hp["grpo"]["val"]["num_generations"],
        plan["grpo"]["num_generations"]
    );
    assert_eq!(
        hp["lora"]["val"]["rank"], plan["model"]["lora"]["rank"],
        "{hp}"
    );
    let check = s.run(&["cluster", "check", "runs/prep/experiment.yaml"]);
    assert!(check.status.success(), "{}", text(&check).0);
    // Never into a used folder, never outside the checkout.
    assert_eq!(
        prepare("runs/prep", &["--unqualified"]).status.code(),
        Some(2)
    );
    assert_eq!(
        prepare("../elsewhere", &["--unqualified"]).status.code(),
        Some(2)
    );
    // A plan whose model folder is not there: its trial would fail, so prepare refuses it.
    let mut gone: serde_json::Value =
        serde_json::from_str(&std::fs::read_to_string(s.path().join("plan.json")).expect("plan"))
            .expect("json");
    gone["model"]["path"] = json!("no-such-model");
    s.write("plan.json", &gone.to_string());
    let out = prepare("runs/prep2", &["--unqualified"]);
    let (_, stderr) = text(&out);
    assert_eq!(out.status.code(), Some(2), "{stderr}");
    assert!(
        stderr.contains("model.path") && stderr.contains("no-such-model"),
        "{stderr}"
    );
    assert!(!s.path().join("runs/prep2").exists(), "nothing left behind");
}
