//! `hessian-recipes cluster preflight` against a running `hessian-recipes devmaster`: a config
//! whose every piece is present passes; each missing piece fails with a line naming it and the
//! fix; the JSON form says the same.

use std::{
    io::{BufRead, BufReader},
    process::{Child, Command, Stdio},
};

use hr_tests::tiny_model::{TinySpec, write_tiny_model};
use hr_tests::{Scratch, binary, text};

struct Master(Child);

impl Drop for Master {
    fn drop(&mut self) {
        let _ = self.0.kill();
        let _ = self.0.wait();
    }
}

/// A devmaster on a free loopback port; it and its URL.
fn devmaster(s: &Scratch) -> (Master, String) {
    let mut child = Command::new(binary())
        .args(["devmaster", "--listen", "127.0.0.1:0", "--state-dir"])
        .arg(s.path().join("state"))
        .stdout(Stdio::piped())
        .spawn()
        .expect("start the devmaster");
    let stdout = child.stdout.take().expect("stdout");
    let master = Master(child);
    let mut first = String::new();
    BufReader::new(stdout)
        .read_line(&mut first)
        .expect("read the URL line");
    let url = first
        .split_whitespace()
        .find(|w| w.starts_with("http://"))
        .expect("URL")
        .to_owned();
    (master, url)
}

/// The binary with `args`, run in `s` and signed in as user `determined`.
fn as_determined(s: &Scratch, args: &[&str]) -> std::process::Output {
    Command::new(binary())
        .args(args)
        .current_dir(s.path())
        .env("DET_USER", "determined")
        .env_remove("DET_USER_TOKEN")
        .env("HOME", s.path())
        .output()
        .expect("run the binary")
}

/// `cluster preflight ARGS` against `url` as user `determined`; (exit code, stdout).
fn preflight(s: &Scratch, url: &str, args: &[&str]) -> (Option<i32>, String) {
    let mut all = vec!["cluster", "preflight", "--master", url];
    all.extend_from_slice(args);
    let out = as_determined(s, &all);
    let (stdout, stderr) = text(&out);
    assert!(
        stderr.is_empty() || out.status.code() != Some(0),
        "{stderr}"
    );
    (out.status.code(), stdout)
}

/// The line of check `name`.
fn line<'a>(stdout: &'a str, name: &str) -> &'a str {
    stdout
        .lines()
        .find(|l| l.split_whitespace().nth(1) == Some(name.split(' ').next().unwrap_or(name)))
        .unwrap_or_else(|| panic!("no {name} line in:\n{stdout}"))
}

/// The local profile's main NeMo Gym config rendered for the checkout `s`, on zero slots, and
/// everything it names made present: a binary that reports a CUDA backend, the plan, the
/// service venv's python and both proofs.
fn present(s: &Scratch) -> std::path::PathBuf {
    let root = s.path().to_str().expect("utf-8").to_owned();
    let out = s.run(&[
        "cluster",
        "render",
        "--profile",
        "local",
        "--output",
        "t",
        "--root",
        &root,
    ]);
    assert!(out.status.success(), "{}", text(&out).1);
    let config = s.path().join("t/local-managed-nemo-main.yaml");
    let yaml = std::fs::read_to_string(&config)
        .expect("rendered")
        .replace("slots_per_trial: 1", "slots_per_trial: 0");
    std::fs::write(&config, yaml).expect("write");
    let fake = s.write(
        "target/release/hessian-recipes",
        "#!/bin/sh\necho 'hessian-recipes 0.0.0 (test); backends: cpu, cuda'\n",
    );
    use std::os::unix::fs::PermissionsExt;
    std::fs::set_permissions(&fake, std::fs::Permissions::from_mode(0o755)).expect("chmod");
    write_tiny_model(&s.path().join("model"), &TinySpec::default());
    let mut plan = crate::train::plan(4, 1);
    plan["model"]["path"] = s.path().join("model").display().to_string().into();
    s.write(
        "runs/agent-gyms/jaif-managed-nemo-main/experiment-plan.json",
        &plan.to_string(),
    );
    s.write(".venv-nemo-gym/bin/python", "");
    s.write("runs/agent-gyms/qualify-nemo/native/proof.json", "{}");
    s.write(
        "runs/agent-gyms/qualify-nemo/managed/managed-proof.json",
        "{}",
    );
    config
}

#[test]
fn a_config_with_every_piece_present_passes_against_the_devmaster() {
    let s = Scratch::new();
    let (_master, url) = devmaster(&s);
    let config = present(&s);
    let config = config.to_str().expect("utf-8");
    let pool = [
        "--workspace",
        "Uncategorized",
        "--project-id",
        "1",
        "--pool",
        "default",
    ];
    let mut args = vec!["--profile", "local", "--config", config];
    args.extend(pool);
    // Stand-in proofs are refused: preflight re-verifies them as the trial's gate will.
    let (code, stdout) = preflight(&s, &url, &args);
    assert_eq!(code, Some(1), "{stdout}");
    assert!(line(&stdout, "proofs").contains("schema"), "{stdout}");
    qualify(&s, &url);
    let (code, stdout) = preflight(&s, &url, &args);
    assert_eq!(code, Some(0), "{stdout}");
    for name in [
        "master",
        "sign-in",
        "workspace",
        "project",
        "pool",
        "binary",
        "plan",
        "inputs",
        "storage",
        "service",
        "proofs",
    ] {
        assert!(
            line(&stdout, name).trim_start().starts_with("ok"),
            "{name}: {stdout}"
        );
    }
    assert!(
        line(&stdout, "master").contains("Determined 0.35.0"),
        "{stdout}"
    );
    assert!(
        line(&stdout, "pool").contains("zero-slot capacity"),
        "{stdout}"
    );
    args.push("--json");
    let (code, json) = preflight(&s, &url, &args);
    assert_eq!(code, Some(0));
    let v: serde_json::Value = serde_json::from_str(&json).expect("one JSON object");
    assert_eq!(v["ok"], true, "{v}");
    assert!(v["checks"].as_array().is_some_and(|c| c.len() >= 11), "{v}");
    // A plan whose model folder is not there parses, but its trial would fail: refused.
    let mut plan = crate::train::plan(4, 1);
    plan["model"]["path"] = s.path().join("nowhere").display().to_string().into();
    s.write(
        "runs/agent-gyms/jaif-managed-nemo-main/experiment-plan.json",
        &plan.to_string(),
    );
    args.pop();
    let (code, stdout) = preflight(&s, &url, &args);
    assert_eq!(code, Some(1), "{stdout}");
    let l = line(&stdout, "inputs");
    assert!(
        l.trim_start().starts_with("fail") && l.contains("model.path") && l.contains("nowhere"),
        "{l}"
    );

    // A native proof that names its runs from the folder qualify ran in (as written before
    // 2026-12-06) holds from the checkout, but not from a trial's folder: refused.
    let native = s
        .path()
        .join("runs/agent-gyms/qualify-nemo/native/proof.json");
    let mut proof: serde_json::Value =
        serde_json::from_slice(&std::fs::read(&native).expect("proof")).expect("json");
    for run in ["reference", "interrupted", "resumed"] {
        proof[run] = format!("runs/agent-gyms/qualify-nemo/native/{run}").into();
    }
    std::fs::write(&native, proof.to_string()).expect("write");
    let (code, stdout) = preflight(&s, &url, &args);
    assert_eq!(code, Some(1), "{stdout}");
    assert!(
        line(&stdout, "proofs").contains("from the folder qualify ran in"),
        "{stdout}"
    );

    // A config whose containers mount another folder: the trial would see none of it.
    let yaml = std::fs::read_to_string(config).expect("config");
    let elsewhere = s.path().join("elsewhere");
    std::fs::create_dir_all(&elsewhere).expect("mkdir");
    let mount = format!(
        "bind_mounts:\n- host_path: {0}\n  container_path: {0}\n  read_only: false\n",
        elsewhere.display()
    );
    std::fs::write(config, format!("{yaml}{mount}")).expect("write");
    let (code, stdout) = preflight(&s, &url, &args);
    assert_eq!(code, Some(1), "{stdout}");
    for name in ["binary", "plan", "service"] {
        assert!(
            line(&stdout, name).contains("lies under no bind mount"),
            "{name}: {stdout}"
        );
    }
}

/// Real proofs in `runs/agent-gyms/qualify-nemo`, as the recipe in docs/cluster.md makes them (relative
/// folders, from the checkout): `qualify native`, then `qualify managed` against `url`.
fn qualify(s: &Scratch, url: &str) {
    let mut plan = crate::train::plan(4, 1);
    plan["model"]["path"] = s.path().join("model").display().to_string().into();
    s.write("qual.json", &plan.to_string());
    s.write("Cargo.lock", "# stand-in\n");
    let dir = "runs/agent-gyms/qualify-nemo";
    std::fs::remove_dir_all(s.path().join(dir)).expect("remove the stand-ins");
    let native = format!("{dir}/native");
    let managed = format!("{dir}/managed");
    let proof = format!("{native}/proof.json");
    for args in [
        vec![
            "qualify",
            "native",
            "--plan",
            "qual.json",
            "--output",
            &native,
        ],
        vec![
            "qualify",
            "managed",
            "--plan",
            "qual.json",
            "--native-proof",
            &proof,
            "--output",
            &managed,
            "--master",
            url,
        ],
    ] {
        let out = as_determined(s, &args);
        assert!(out.status.success(), "{args:?}: {}", text(&out).1);
    }
}

#[test]
fn each_missing_piece_fails_with_a_line_naming_it_and_the_fix() {
    let s = Scratch::new();
    let (_master, url) = devmaster(&s);
    let config = present(&s);
    // The pieces the config names, removed or wrong.
    for gone in [
        ".venv-nemo-gym/bin/python",
        "runs/agent-gyms/qualify-nemo/managed/managed-proof.json",
        "runs/agent-gyms/jaif-managed-nemo-main/experiment-plan.json",
    ] {
        std::fs::remove_file(s.path().join(gone)).expect("remove");
    }
    s.write(
        "target/release/hessian-recipes",
        "#!/bin/sh\necho 'hessian-recipes 0.0.0 (test); backends: cpu'\n",
    );
    // And storage left to the master's default.
    let yaml = std::fs::read_to_string(&config)
        .expect("config")
        .replace("slots_per_trial: 0", "slots_per_trial: 1")
        .replace("  type: directory\n", "");
    std::fs::write(&config, yaml).expect("write");
    let config = config.to_str().expect("utf-8");
    let (code, stdout) = preflight(
        &s,
        &url,
        &[
            "--config",
            config,
            "--workspace",
            "JAIF",
            "--project-id",
            "363",
            "--pool",
            "42_Compute",
        ],
    );
    assert_eq!(code, Some(1), "{stdout}");
    for (name, says) in [
        ("workspace", "no workspace named JAIF"),
        ("project", "no project 363"),
        (
            "pool",
            "no resource pool 42_Compute; the master has: default",
        ),
        ("binary", "has no CUDA backend"),
        ("plan", "experiment-plan.json"),
        ("service", "create the service venv"),
        ("storage", "names no checkpoint_storage.type"),
        (
            "proofs",
            "managed-proof.json is missing: run the qualification first",
        ),
    ] {
        let l = line(&stdout, name);
        assert!(
            l.trim_start().starts_with("fail") && l.contains(says),
            "{name}: {l}"
        );
    }
    // A pool that is there but has no slot for the config's trial.
    let (code, stdout) = preflight(&s, &url, &["--config", config, "--pool", "default"]);
    assert_eq!(code, Some(1));
    assert!(
        line(&stdout, "pool").contains("the config asks for 1 slot(s) per trial"),
        "{stdout}"
    );
    // JAIF's shared mount is not here.
    let (_, stdout) = preflight(&s, &url, &[]);
    assert!(
        line(&stdout, "shared mount")
            .contains("/pfss/mlde/workspaces/mlde_wsp_JAIF is not a folder here"),
        "{stdout}"
    );
    // A token the master does not know: sign-in fails, the master checks are skipped.
    let out = Command::new(binary())
        .args([
            "cluster",
            "preflight",
            "--profile",
            "local",
            "--master",
            &url,
        ])
        .env("DET_USER_TOKEN", "not-a-token")
        .env("HOME", s.path())
        .output()
        .expect("run");
    let stdout = text(&out).0;
    assert_eq!(out.status.code(), Some(1));
    assert!(line(&stdout, "sign-in").contains("fail"), "{stdout}");
    // No master at all.
    let (code, stdout) = preflight(&s, "127.0.0.1:1", &["--profile", "local"]);
    assert_eq!(code, Some(1));
    assert!(
        line(&stdout, "master").contains("cannot reach the master"),
        "{stdout}"
    );
    assert!(
        line(&stdout, "workspace").trim_start().starts_with("skip"),
        "{stdout}"
    );
}

#[test]
fn an_eight_gpu_config_needs_a_plan_whose_shards_its_ranks_share() {
    let s = Scratch::new();
    let (_master, url) = devmaster(&s);
    present(&s);
    let config = s.path().join("t/local-managed-nemo-main-8gpu.yaml");
    let config = config.to_str().expect("utf-8");
    let plan_file = "runs/agent-gyms/jaif-managed-nemo-main/experiment-plan.json";
    let (code, stdout) = preflight(&s, &url, &["--config", config]);
    assert_eq!(code, Some(1), "{stdout}");
    let l = line(&stdout, "plan");
    assert!(
        l.trim_start().starts_with("fail")
            && l.contains("parallel.shards (1) cannot be shared by the trial's 8 ranks"),
        "{stdout}"
    );
    let mut plan: serde_json::Value =
        serde_json::from_str(&std::fs::read_to_string(s.path().join(plan_file)).expect("plan"))
            .expect("JSON");
    plan["grpo"]["tasks_per_step"] = 8.into();
    plan["environment"]["tasks"]["count"] = 8.into();
    plan["parallel"] = serde_json::json!({"shards": 8});
    s.write(plan_file, &plan.to_string());
    let (_, stdout) = preflight(&s, &url, &["--config", config]);
    assert!(
        line(&stdout, "plan").trim_start().starts_with("ok"),
        "{stdout}"
    );
}
