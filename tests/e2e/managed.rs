//! `hessian-recipes managed-training` as a Determined trial on the devmaster, through
//! `qualify managed`: paused after an optimizer step, acknowledged, activated, restored from
//! exactly the receipt's checkpoint, and equal to the uninterrupted native run at every step.

use hr_tests::tiny_model::{TinySpec, write_tiny_model};
use hr_tests::{Scratch, text};
use serde_json::json;

pub(crate) fn setup() -> Scratch {
    let s = Scratch::new();
    write_tiny_model(&s.path().join("model"), &TinySpec::default());
    let mut plan = crate::train::plan(6, 1);
    plan["name"] = json!("managed-tiny");
    s.write("plan.json", &plan.to_string());
    // As in a checkout: `qualify managed` records the Cargo.lock digest in its source record,
    // which checkpoints do not carry; proofs must still verify.
    s.write("Cargo.lock", "# stand-in\n");
    s
}

/// Runs `qualify managed` into `out`, which must succeed; returns its proof.
/// `qual.json`: the four-step qualification of `plan.json`'s family, as `cargo xtask qualify`
/// lays it out.
fn write_qualification_plan(s: &Scratch) {
    let mut qual: serde_json::Value =
        serde_json::from_str(&std::fs::read_to_string(s.path().join("plan.json")).expect("plan"))
            .expect("json");
    qual["steps"] = json!(4);
    qual["name"] = json!("managed-tiny-qual");
    s.write("qual.json", &qual.to_string());
}

fn qualify_managed(s: &Scratch, out: &str, extra: &[&str]) -> serde_json::Value {
    let mut args = vec![
        "qualify",
        "managed",
        "--plan",
        "plan.json",
        "--output",
        out,
        "--timeout-seconds",
        "300",
    ];
    args.extend_from_slice(extra);
    let run = s.run(&args);
    let (stdout, stderr) = text(&run);
    assert_eq!(run.status.code(), Some(0), "{stdout}\n{stderr}");
    let proof = std::fs::read(s.path().join(out).join("managed-proof.json")).expect("proof");
    serde_json::from_slice(&proof).expect("json")
}

#[test]
fn a_paused_and_activated_trial_restores_the_receipts_checkpoint_and_equals_the_native_run() {
    let s = setup();
    let proof = qualify_managed(&s, "q", &[]);
    assert_eq!(proof["equal"], true);
    let i = &proof["interruption"];
    assert_eq!(i["uuid_at_pause"], i["uuid_at_restore"]);
    assert_eq!(i["restored_run_id"], 2);
    // The seed's recovery point: the pause is sent once step 1's metric shows and lands while
    // step 2 runs, so the worker saves and stops at step 2, which the next allocation restores.
    assert_eq!(i["pause_sent_after_step"], 1, "{proof}");
    assert_eq!(i["step"], 2, "stopped at step 2: {proof}");
    // One checkpoint per step, each published once (the terminal save is not repeated).
    assert_eq!(proof["checkpoints_listed"], 6, "{proof}");

    // `proof verify` re-checks it against the run folders and checkpoints...
    let verify = |proof: &str| {
        let out = s.run(&["proof", "verify", proof]);
        (out.status.code(), text(&out).0)
    };
    let (code, stdout) = verify("q/managed-proof.json");
    assert_eq!(code, Some(0), "{stdout}");
    assert!(stdout.contains("pause at step"), "{stdout}");
    let json = s.run(&["proof", "verify", "q/managed-proof.json", "--json"]);
    let v: serde_json::Value = serde_json::from_str(&text(&json).0).expect("one JSON object");
    assert_eq!(
        (v["holds"].as_bool(), v["equal"].as_bool()),
        (Some(true), Some(true)),
        "{v}"
    );
    let run_dir = proof["run_dir"].as_str().expect("run_dir");
    // TensorBoard event files go where Determined's TensorBoard manager syncs a trial's:
    // <storage>/<cluster id>/tensorboard/experiment/<e>/trial/<t>/, one file per allocation.
    let run_path = std::path::Path::new(run_dir);
    let (storage, name) = (
        run_path.parent().expect("storage"),
        run_path.file_name().expect("name").to_string_lossy(),
    );
    let (e, t) = name
        .strip_prefix("hr-run-")
        .and_then(|ids| ids.split_once('-'))
        .expect("hr-run-<e>-<t>");
    let event_files: Vec<_> = std::fs::read_dir(storage)
        .expect("storage")
        .filter_map(Result::ok)
        .map(|cluster| {
            cluster
                .path()
                .join(format!("tensorboard/experiment/{e}/trial/{t}"))
        })
        .filter(|dir| dir.is_dir())
        .flat_map(|dir| std::fs::read_dir(dir).expect("tensorboard folder"))
        .filter_map(Result::ok)
        .filter(|f| {
            f.file_name()
                .to_string_lossy()
                .starts_with("events.out.tfevents.")
        })
        .collect();
    assert_eq!(event_files.len(), 2, "one per allocation: {event_files:?}");
    assert!(!run_path.join("tensorboard").exists());
    // ...and refuses it once one recorded reward of the managed run is changed,
    let evidence = std::path::Path::new(run_dir).join("evidence.jsonl");
    let original = std::fs::read_to_string(&evidence).expect("evidence");
    let tampered = original.replacen("\"rewards\":[", "\"rewards\":[0.5,", 1);
    std::fs::write(&evidence, &tampered).expect("write");
    let (code, stdout) = verify("q/managed-proof.json");
    assert_eq!(code, Some(3), "{stdout}");
    // ...or once a step is missing.
    let truncated: String = original.lines().take(5).map(|l| format!("{l}\n")).collect();
    std::fs::write(&evidence, truncated).expect("write");
    let (code, stdout) = verify("q/managed-proof.json");
    assert_eq!(code, Some(3), "{stdout}");
    assert!(stdout.contains("holds 5 steps, not 6"), "{stdout}");
    let json = s.run(&["proof", "verify", "q/managed-proof.json", "--json"]);
    let v: serde_json::Value = serde_json::from_str(&text(&json).0).expect("one JSON object");
    assert_eq!(json.status.code(), Some(3));
    assert_eq!(v["holds"], false);
    assert!(
        v["error"]
            .as_str()
            .is_some_and(|e| e.contains("holds 5 steps")),
        "{v}"
    );
}

#[test]
fn ranks_paused_and_activated_or_with_a_rank_killed_mid_step_equal_the_one_rank_run() {
    let s = setup();
    let mut plan: serde_json::Value =
        serde_json::from_str(&std::fs::read_to_string(s.path().join("plan.json")).expect("plan"))
            .expect("json");
    plan["grpo"]["tasks_per_step"] = json!(4);
    plan["parallel"] = json!({"shards": 4});
    s.write("plan.json", &plan.to_string());
    // A 2-slot trial launched as two ranks; the reference is one rank.
    let proof = qualify_managed(&s, "paused", &["--ranks", "2"]);
    assert_eq!(proof["equal"], true, "{proof}");
    assert_eq!(proof["interruption"]["kind"], "pause", "{proof}");
    let run_dir = std::path::Path::new(proof["run_dir"].as_str().expect("run_dir"));
    let allocations = std::fs::read_to_string(run_dir.join("allocations.jsonl")).expect("records");
    assert_eq!(
        allocations.matches("\"ranks\":2").count(),
        2,
        "both allocations ran two ranks: {allocations}"
    );
    // Four ranks, rank 1 killed as step 3 starts: the launcher fails the allocation, the
    // restart restores step 2 and the run still equals the one-rank reference.
    let proof = qualify_managed(&s, "killed", &["--ranks", "4", "--kill-rank-at", "3"]);
    assert_eq!(proof["equal"], true, "{proof}");
    let i = &proof["interruption"];
    assert_eq!(
        (i["kind"].as_str(), i["step"].as_u64()),
        (Some("kill-rank-mid-step"), Some(2)),
        "{proof}"
    );
    // Ranks that do not divide the shards are refused before anything runs.
    let out = s.run(&[
        "qualify",
        "managed",
        "--plan",
        "plan.json",
        "--output",
        "three",
        "--ranks",
        "3",
    ]);
    assert_eq!(out.status.code(), Some(2), "{}", text(&out).1);
    assert!(text(&out).1.contains("parallel.shards"), "{}", text(&out).1);
    assert!(!s.path().join("three").exists());
}

#[test]
fn proof_verify_rechecks_a_native_proof_and_refuses_a_tampered_copy() {
    let s = setup();
    let out = s.run(&["qualify", "native", "--plan", "plan.json", "--output", "n"]);
    let (stdout, stderr) = text(&out);
    assert_eq!(out.status.code(), Some(0), "{stdout}\n{stderr}");
    let verify = || {
        let out = s.run(&["proof", "verify", "n/proof.json"]);
        (out.status.code(), text(&out).0)
    };
    let (code, stdout) = verify();
    assert_eq!(code, Some(0), "{stdout}");
    assert!(stdout.contains("stopped after 2 and resumed"), "{stdout}");
    // It names the device every allocation of the three runs recorded.
    let arch = std::env::consts::ARCH;
    assert!(
        stdout.contains(&format!("on cpu: {arch}")) && stdout.contains("(burn 0.21.0"),
        "{stdout}"
    );
    let path = s.path().join("n/proof.json");
    let original = std::fs::read_to_string(&path).expect("proof");
    let mut p: serde_json::Value = serde_json::from_str(&original).expect("json");
    assert_eq!(p["device"]["kind"], "cpu", "{p}");
    // A proof claiming another device than its runs recorded does not hold.
    p["device"]["kind"] = json!("cuda");
    p["device"]["name"] = json!("NVIDIA H200");
    std::fs::write(&path, p.to_string()).expect("write");
    let (code, stdout) = verify();
    assert_eq!(code, Some(3), "{stdout}");
    assert!(
        stdout.contains(&format!("the runs ran on cpu: {arch}")) && stdout.contains("NVIDIA H200"),
        "{stdout}"
    );
    std::fs::write(&path, &original).expect("restore");
    // A proof claiming the resumed run started elsewhere than it did does not hold.
    let mut moved: serde_json::Value = serde_json::from_str(&original).expect("json");
    moved["stopped_after"] = json!(3);
    std::fs::write(&path, moved.to_string()).expect("write");
    let (code, stdout) = verify();
    assert_eq!(code, Some(3), "{stdout}");
    std::fs::write(&path, &original).expect("restore");
    // A checkpoint the resumed run keeps no longer matches its seal: the proof does not hold.
    let listed = std::fs::read_to_string(s.path().join("n/resumed/core/checkpoints.jsonl"))
        .expect("checkpoints");
    let checkpoint = listed
        .lines()
        .map(|l| serde_json::from_str::<serde_json::Value>(l).expect("json"))
        .filter_map(|c| {
            Some(
                s.path()
                    .join("n/resumed/core/checkpoints")
                    .join(c["uuid"].as_str()?),
            )
        })
        .find(|dir| dir.is_dir())
        .expect("a kept checkpoint");
    // The proof names the plan by the digest every checkpoint's manifest binds.
    let manifest: serde_json::Value =
        serde_json::from_slice(&std::fs::read(checkpoint.join("MANIFEST.json")).expect("manifest"))
            .expect("json");
    let proof: serde_json::Value = serde_json::from_str(&original).expect("json");
    assert_eq!(proof["plan_sha256"], manifest["config_sha256"], "{proof}");
    let cursor = checkpoint.join("payload/data_cursor.json");
    let mut bytes = std::fs::read(&cursor).expect("cursor");
    bytes.push(b' ');
    std::fs::write(&cursor, bytes).expect("write");
    let (code, stdout) = verify();
    assert_eq!(code, Some(3), "{stdout}");
}

#[test]
fn managed_training_refuses_a_backend_that_is_not_the_plans_and_a_run_outside_a_trial() {
    let s = setup();
    let out = s.run(&[
        "managed-training",
        "--plan",
        "plan.json",
        "--backend",
        "nemo",
        "--max-wall-seconds",
        "60",
    ]);
    let (_, stderr) = text(&out);
    assert_eq!(out.status.code(), Some(2), "{stderr}");
    assert!(
        stderr.contains("environment.backend is `fixture`"),
        "{stderr}"
    );
    let out = s.run(&[
        "managed-training",
        "--plan",
        "plan.json",
        "--backend",
        "fixture",
        "--max-wall-seconds",
        "60",
        "--unqualified",
    ]);
    let (_, stderr) = text(&out);
    assert_eq!(out.status.code(), Some(2), "{stderr}");
    assert!(stderr.contains("inside a Determined trial"), "{stderr}");
}

/// `managed prepare` of the scratch folder's plan into `out` for the local profile on the CPU,
/// with `extra` flags.
#[test]
fn the_managed_half_compares_with_the_native_proofs_uninterrupted_run() {
    let s = setup();
    let native = s.run(&["qualify", "native", "--plan", "plan.json", "--output", "n"]);
    assert!(native.status.success(), "{}", text(&native).1);
    let proof = qualify_managed(&s, "q", &["--native-proof", "n/proof.json"]);
    assert_eq!(proof["equal"], true, "{proof}");
    assert_eq!(
        proof["reference"].as_str(),
        s.path().join("n/reference").to_str(),
        "{proof}"
    );
    assert!(
        !s.path().join("q/reference").exists(),
        "no second native run"
    );
    let verify = s.run(&["proof", "verify", "q/managed-proof.json"]);
    assert!(verify.status.success(), "{}", text(&verify).0);
    // Another plan's native proof is refused before anything is written.
    let mut other: serde_json::Value =
        serde_json::from_str(&std::fs::read_to_string(s.path().join("plan.json")).expect("plan"))
            .expect("json");
    other["optimizer"]["learning_rate"] = json!(0.5);
    s.write("other.json", &other.to_string());
    let out = s.run(&[
        "qualify",
        "managed",
        "--plan",
        "other.json",
        "--output",
        "q2",
        "--native-proof",
        "n/proof.json",
    ]);
    assert_eq!(out.status.code(), Some(2));
    assert!(
        text(&out).1.contains("qualifies another plan"),
        "{}",
        text(&out).1
    );
    assert!(!s.path().join("q2").exists());
}

#[test]
fn a_worker_killed_during_a_save_restarts_from_the_last_sealed_checkpoint_and_stays_equal() {
    let s = setup();
    let proof = qualify_managed(&s, "k", &["--kill-during-save-at", "3"]);
    assert_eq!(proof["equal"], true);
    assert_eq!(proof["interruption"]["kind"], "kill-during-save");
    assert_eq!(
        proof["interruption"]["step"], 2,
        "the half-written step 3 was never adopted"
    );
    assert_eq!(proof["checkpoints_listed"], 6, "{proof}");
}

#[test]
fn sustained_training_needs_proofs_of_its_backend_family_and_binary() {
    let s = setup();
    write_qualification_plan(&s);
    for (kind, out) in [("native", "proofs/native"), ("managed", "proofs/managed")] {
        let run = s.run(&["qualify", kind, "--plan", "qual.json", "--output", out]);
        assert!(run.status.success(), "{}", text(&run).1);
    }
    let managed = |plan: &str, extra: &[&str]| {
        let mut args = vec![
            "managed-training",
            "--plan",
            plan,
            "--backend",
            "fixture",
            "--max-wall-seconds",
            "60",
        ];
        args.extend_from_slice(extra);
        let out = s.run(&args);
        (out.status.code(), text(&out).1)
    };
    let (code, stderr) = managed("plan.json", &[]);
    assert_eq!(code, Some(2));
    assert!(stderr.contains("pass --proofs DIR"), "{stderr}");
    // The proofs hold: the gate lets the run through to the trial (absent here).
    let (code, stderr) = managed("plan.json", &["--proofs", "proofs"]);
    assert_eq!(code, Some(2));
    assert!(stderr.contains("inside a Determined trial"), "{stderr}");
    // Another family (another learning rate) is not qualified by them.
    let mut other: serde_json::Value =
        serde_json::from_str(&std::fs::read_to_string(s.path().join("plan.json")).expect("plan"))
            .expect("json");
    other["optimizer"]["learning_rate"] = json!(0.5);
    s.write("other.json", &other.to_string());
    let (code, stderr) = managed("other.json", &["--proofs", "proofs"]);
    assert_eq!(code, Some(2));
    assert!(stderr.contains("another family"), "{stderr}");
    // Proofs made on the CPU do not admit a GPU run: `managed prepare --device cuda` (away from
    // the GPU, the kind alone) refuses, naming both devices.
    let prepare = |device: &str| {
        let out = s.run(&[
            "managed",
            "prepare",
            "--plan",
            "plan.json",
            "--output",
            &format!("runs/{device}"),
            "--profile",
            "local",
            "--max-wall-seconds",
            "600",
            "--device",
            device,
            "--proofs",
            "proofs",
        ]);
        (out.status.code(), text(&out).1)
    };
    let (code, stderr) = prepare("cuda");
    assert_eq!(code, Some(2), "{stderr}");
    assert!(
        stderr.contains(&format!(
            "the native proof was made on cpu: {}",
            std::env::consts::ARCH
        )) && stderr.contains("not on --device cuda"),
        "{stderr}"
    );
    assert!(!s.path().join("runs/cuda").exists(), "nothing prepared");
    let (code, stderr) = prepare("cpu");
    assert_eq!(code, Some(0), "{stderr}");
    // A managed proof without a pause (here relabelled as a kill, which still verifies) cannot
    // satisfy the gate: an uninterrupted or merely restarted run proves no recovery from pause.
    let proof = s.path().join("proofs/managed/managed-proof.json");
    let original = std::fs::read_to_string(&proof).expect("proof");
    let mut relabelled: serde_json::Value = serde_json::from_str(&original).expect("json");
    relabelled["interruption"]["kind"] = json!("kill-during-save");
    relabelled["interruption"]["uuid_at_pause"] = serde_json::Value::Null;
    std::fs::write(&proof, relabelled.to_string()).expect("write");
    let (code, stderr) = managed("plan.json", &["--proofs", "proofs"]);
    assert_eq!(code, Some(2));
    assert!(
        stderr.contains("no pause restored from its receipt"),
        "{stderr}"
    );
    std::fs::write(&proof, &original).expect("restore");
    // A tampered proof does not hold.
    let text_before = original;
    std::fs::write(
        &proof,
        text_before
            .replace("\"steps\": 6", "\"steps\": 5")
            .replace("\"steps\": 4", "\"steps\": 3"),
    )
    .expect("write");
    let (code, stderr) = managed("plan.json", &["--proofs", "proofs"]);
    assert_eq!(code, Some(2));
    assert!(
        stderr.contains("the managed proof does not hold"),
        "{stderr}"
    );
}

#[test]
fn a_worker_killed_four_times_and_a_crashed_master_still_end_equal_to_the_native_run() {
    let s = Scratch::new();
    write_tiny_model(&s.path().join("model"), &TinySpec::default());
    s.write("plan.json", &crate::train::plan(100, 1).to_string());
    let out = s.run(&[
        "qualify",
        "soak",
        "--plan",
        "plan.json",
        "--output",
        "soak",
        "--kills",
        "4",
        "--seed",
        "3",
        "--timeout-seconds",
        "300",
    ]);
    let (stdout, stderr) = text(&out);
    assert!(out.status.success(), "{stdout}\n{stderr}");
    let report: serde_json::Value =
        serde_json::from_slice(&std::fs::read(s.path().join("soak/soak.json")).expect("soak.json"))
            .expect("json");
    assert_eq!(report["evidence_equal"], true, "{report}");
    assert_eq!(report["kills"], 4);
    // The first allocation and one per kill (one more when the master's restart replaced an
    // allocation its predecessor had just started).
    let allocations = report["allocations"].as_u64().unwrap_or(0);
    assert!((5..=6).contains(&allocations), "{report}");
    assert!(
        report["checkpoints_kept_over_master_restart"].as_u64() > Some(0),
        "{report}"
    );
    assert!(
        report["metrics_kept_over_master_restart"].as_u64() > Some(0),
        "{report}"
    );
}

#[test]
fn proofs_made_with_relative_folders_hold_from_any_working_folder() {
    let s = setup();
    write_qualification_plan(&s);
    // As the recipe in docs/cluster.md runs them: relative output folders, from the checkout.
    for (kind, out) in [("native", "runs/q/native"), ("managed", "runs/q/managed")] {
        let run = s.run(&["qualify", kind, "--plan", "qual.json", "--output", out]);
        assert!(run.status.success(), "{}", text(&run).1);
    }
    let proof: serde_json::Value = serde_json::from_str(
        &std::fs::read_to_string(s.path().join("runs/q/native/proof.json")).expect("proof"),
    )
    .expect("json");
    assert_eq!(
        proof["reference"], "reference",
        "relative to the proof: {proof}"
    );
    // A trial runs in its own work folder: the gate reads the same proofs from there.
    let elsewhere = s.path().join("work/trial-1");
    std::fs::create_dir_all(&elsewhere).expect("mkdir");
    let out = std::process::Command::new(hr_tests::binary())
        .args([
            "managed-training",
            "--backend",
            "fixture",
            "--max-wall-seconds",
            "60",
        ])
        .arg("--plan")
        .arg(s.path().join("plan.json"))
        .arg("--proofs")
        .arg(s.path().join("runs/q"))
        .current_dir(&elsewhere)
        .output()
        .expect("run");
    let stderr = text(&out).1;
    // Past the gate, it stops only because this is not a trial.
    assert_eq!(out.status.code(), Some(2), "{stderr}");
    assert!(stderr.contains("inside a Determined trial"), "{stderr}");
    let verify = std::process::Command::new(hr_tests::binary())
        .args(["proof", "verify"])
        .arg(s.path().join("runs/q/native/proof.json"))
        .current_dir(&elsewhere)
        .output()
        .expect("run");
    assert!(verify.status.success(), "{}", text(&verify).0);
}

#[test]
fn a_dora_plan_with_dropout_on_every_projection_qualifies_natively_equal() {
    let s = setup();
    let mut plan: serde_json::Value =
        serde_json::from_str(&std::fs::read_to_string(s.path().join("plan.json")).expect("plan"))
            .expect("json");
    plan["model"]["lora"]["use_dora"] = json!(true);
    plan["model"]["lora"]["lora_dropout"] = json!(0.05);
    plan["model"]["lora"]["targets"] = json!("all-linear");
    s.write("plan.json", &plan.to_string());
    let out = s.run(&["qualify", "native", "--plan", "plan.json", "--output", "n"]);
    let (stdout, stderr) = text(&out);
    assert_eq!(out.status.code(), Some(0), "{stdout}\n{stderr}");
    let proof: serde_json::Value =
        serde_json::from_slice(&std::fs::read(s.path().join("n/proof.json")).expect("proof.json"))
            .expect("json");
    assert_eq!(proof["equal"], true, "{proof}");
    let verified = s.run(&["proof", "verify", "n/proof.json"]);
    assert_eq!(verified.status.code(), Some(0), "{:?}", text(&verified));
    // The runs trained DoRA with dropout: their adapters say so.
    let configs: Vec<_> = walkdir(s.path().join("n"))
        .into_iter()
        .filter(|p| p.ends_with("adapter/adapter_config.json"))
        .collect();
    assert!(!configs.is_empty(), "no adapter under n/");
    for config in configs {
        let text = std::fs::read_to_string(&config).expect("adapter config");
        assert!(
            text.contains("\"use_dora\": true") && text.contains("\"lora_dropout\": 0.05"),
            "{}: {text}",
            config.display()
        );
    }
}

/// Every file under `dir`.
fn walkdir(dir: std::path::PathBuf) -> Vec<std::path::PathBuf> {
    let mut out = Vec::new();
    let mut todo = vec![dir];
    while let Some(d) = todo.pop() {
        for entry in std::fs::read_dir(&d).into_iter().flatten().flatten() {
            let path = entry.path();
            if path.is_dir() {
                todo.push(path);
            } else {
                out.push(path);
            }
        }
    }
    out
}
