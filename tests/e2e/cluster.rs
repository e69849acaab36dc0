//! `hessian-recipes cluster render|check|cpu-command`.

use hr_tests::{Scratch, repo_root, snapshot, text};

const GOOD_COMMAND: &str = "\
description: hessian-recipes test command
resources: {slots: 0, resource_pool: 42_Compute}
bind_mounts:
- {host_path: /pfss/mlde/workspaces/mlde_wsp_JAIF, container_path: /pfss/mlde/workspaces/mlde_wsp_JAIF}
environment:
  environment_variables: [CUDA_VISIBLE_DEVICES=, HF_HUB_OFFLINE=1, HF_DATASETS_OFFLINE=1,
    TRANSFORMERS_OFFLINE=1, TOKENIZERS_PARALLELISM=false, OMP_NUM_THREADS=2, MKL_NUM_THREADS=2,
    OPENBLAS_NUM_THREADS=2, NUMEXPR_NUM_THREADS=2, VECLIB_MAXIMUM_THREADS=2, RAYON_NUM_THREADS=2]
work_dir: /run/determined/workdir
";

fn experiment(resources: &str, searcher: &str) -> String {
    format!(
        "name: x\nentrypoint: [/bin/true]\nresources: {resources}\nsearcher: {searcher}\n\
         environment:\n  environment_variables: [CUDA_VISIBLE_DEVICES=, HF_HUB_OFFLINE=1, \
         HF_DATASETS_OFFLINE=1, TRANSFORMERS_OFFLINE=1, TOKENIZERS_PARALLELISM=false, \
         OMP_NUM_THREADS=4, MKL_NUM_THREADS=4, OPENBLAS_NUM_THREADS=4, NUMEXPR_NUM_THREADS=4, \
         VECLIB_MAXIMUM_THREADS=4, RAYON_NUM_THREADS=4]\n"
    )
}

/// Runs `cluster check` on one file; returns (exit code, stdout).
fn check(s: &Scratch, name: &str, body: &str) -> (Option<i32>, String) {
    let path = s.write(name, body);
    let out = s.run(&["cluster", "check", path.to_str().expect("utf-8 path")]);
    (out.status.code(), text(&out).0)
}

#[test]
fn check_accepts_the_committed_templates() {
    let dir = repo_root().join("cluster/determined");
    let mut args = vec!["cluster".to_owned(), "check".to_owned()];
    for entry in std::fs::read_dir(&dir).expect("templates dir") {
        let path = entry.expect("entry").path();
        if path.extension().is_some_and(|e| e == "yaml") {
            args.push(path.display().to_string());
        }
    }
    assert_eq!(args.len(), 12, "ten templates expected");
    let s = Scratch::new();
    let refs: Vec<&str> = args.iter().map(String::as_str).collect();
    let out = s.run(&refs);
    assert!(out.status.success(), "{:?}", text(&out));
    assert_eq!(text(&out).0.matches(": ok (").count(), 10);
    assert!(
        text(&out).0.contains("jaif-shell.yaml: ok (shell)"),
        "{:?}",
        text(&out)
    );
}

#[test]
fn check_rejects_each_rule_naming_the_field() {
    let s = Scratch::new();
    assert_eq!(check(&s, "good.yaml", GOOD_COMMAND).0, Some(0));
    // Another program's command: the house rules are notes after the problems, not failures.
    let theirs = "entrypoint: [python3, train.py]\nresources: {slots: 1}\n";
    let (code, stdout) = check(&s, "theirs.yaml", theirs);
    assert_eq!(code, Some(0), "{stdout}");
    assert!(
        stdout.contains("theirs.yaml: ok (command)")
            && stdout.contains("note(s): house rules for this project's jobs"),
        "{stdout}"
    );
    let (code, stdout) = check(
        &s,
        "theirs-bad.yaml",
        &theirs.replace("slots:", "slots_per_trial:"),
    );
    assert_eq!(code, Some(2), "{stdout}");
    let problem = stdout
        .find("resources.slots_per_trial")
        .expect("the problem");
    assert!(
        problem < stdout.find("note(s)").expect("the notes"),
        "{stdout}"
    );
    // With --json: one object per file.
    let bad = s.write(
        "bad.yaml",
        &GOOD_COMMAND.replace("slots: 0", "slots_per_trial: 0"),
    );
    let good = s.path().join("good.yaml");
    let out = s.run(&[
        "cluster",
        "check",
        "--json",
        good.to_str().expect("utf-8"),
        bad.to_str().expect("utf-8"),
    ]);
    assert_eq!(out.status.code(), Some(2));
    let lines: Vec<serde_json::Value> = text(&out)
        .0
        .lines()
        .map(|l| serde_json::from_str(l).expect("a JSON object per line"))
        .collect();
    assert_eq!(lines.len(), 2);
    assert_eq!(
        (lines[0]["ok"].as_bool(), lines[1]["ok"].as_bool()),
        (Some(true), Some(false))
    );
    assert!(
        lines[1]["problems"][0]
            .as_str()
            .is_some_and(|p| p.contains("resources.slots_per_trial")),
        "{}",
        lines[1]
    );

    let cases = [
        (
            "cmd-slots-per-trial.yaml",
            GOOD_COMMAND.replace("slots: 0", "slots_per_trial: 0"),
            "resources.slots_per_trial: commands and shells request slots with `resources.slots`",
        ),
        (
            "exp-slots.yaml",
            experiment(
                "{slots: 0}",
                "{name: single, metric: loss, max_length: {batches: 8}}",
            ),
            "resources.slots: experiments request slots with `resources.slots_per_trial`",
        ),
        (
            "exp-no-max-length.yaml",
            experiment("{slots_per_trial: 0}", "{name: single, metric: loss}"),
            "searcher.max_length: the `single` searcher still requires `max_length`",
        ),
        (
            "cmd-work-dir.yaml",
            GOOD_COMMAND.replace(
                "work_dir: /run/determined/workdir",
                "work_dir: /pfss/mlde/workspaces/mlde_wsp_JAIF/hessian_recipes",
            ),
            "work_dir: \"/pfss/mlde/workspaces/mlde_wsp_JAIF/hessian_recipes\" is inside the shared mount",
        ),
        (
            "broken.yaml",
            "resources:\n  slots: 0\n bad: [\n".to_owned(),
            "not valid YAML at line 3, column 2",
        ),
    ];
    for (name, body, expected) in cases {
        let (code, stdout) = check(&s, name, &body);
        assert_eq!(code, Some(2), "{name}: {stdout}");
        assert!(
            stdout.contains(expected),
            "{name}: {stdout:?} lacks {expected:?}"
        );
    }
}

#[test]
fn render_reproduces_the_committed_templates_and_overwrites_nothing() {
    let s = Scratch::new();
    let out = s.run(&["cluster", "render", "--profile", "jaif", "--output", "t"]);
    assert!(out.status.success(), "{:?}", text(&out));
    let committed: Vec<_> = snapshot(&repo_root().join("cluster/determined"))
        .into_iter()
        .filter(|(p, _)| p.extension().is_some_and(|e| e == "yaml"))
        .collect();
    let rendered: Vec<_> = snapshot(&s.path().join("t")).into_iter().collect();
    assert_eq!(rendered, committed);

    // Again: the same files, nothing changes.
    let before = snapshot(s.path());
    let again = s.run(&["cluster", "render", "--profile", "jaif", "--output", "t"]);
    assert!(again.status.success(), "{:?}", text(&again));
    assert_eq!(snapshot(s.path()), before);
    // A template edited by hand is never overwritten: refused, naming it, nothing written.
    let edited = s.path().join("t/jaif-shell.yaml");
    std::fs::write(&edited, "# mine\n").expect("edit");
    let before = snapshot(s.path());
    let refused = s.run(&["cluster", "render", "--profile", "jaif", "--output", "t"]);
    assert_eq!(refused.status.code(), Some(2));
    assert!(
        text(&refused)
            .1
            .contains("jaif-shell.yaml exists with other content"),
        "{:?}",
        text(&refused)
    );
    assert_eq!(snapshot(s.path()), before);
    // Another profile's files go beside (`--out-dir`, the older name of `--output`, still works).
    let beside = s.run(&["cluster", "render", "--profile", "local", "--out-dir", "t"]);
    assert!(beside.status.success(), "{:?}", text(&beside));
    assert!(s.path().join("t/local-managed-cpu.yaml").is_file());
    assert_eq!(std::fs::read_to_string(&edited).expect("kept"), "# mine\n");

    let local = s.run(&[
        "cluster",
        "render",
        "--profile",
        "local",
        "--out-dir",
        "l",
        "--root",
        "/srv/co",
    ]);
    assert!(local.status.success(), "{:?}", text(&local));
    let cpu =
        std::fs::read_to_string(s.path().join("l/local-managed-cpu.yaml")).expect("local template");
    assert!(
        cpu.contains("container_path: /srv/co/runs/checkpoints"),
        "{cpu}"
    );
    assert!(
        cpu.contains("/srv/co/target/release/hessian-recipes"),
        "{cpu}"
    );
}

#[test]
fn cpu_command_prints_the_seed_line_and_refuses_existing_output() {
    let s = Scratch::new();
    let out = s.run(&[
        "cluster",
        "cpu-command",
        "--output",
        "runs/jaif-cpu-fixture-01",
        "--",
        "demo",
    ]);
    assert!(out.status.success(), "{:?}", text(&out));
    assert_eq!(
        text(&out).0.trim_end(),
        "det command run --workspace-name JAIF --config-file cluster/determined/jaif-cpu-command.yaml \
         --detach /usr/bin/timeout --signal=TERM --kill-after=30s 900s /bin/bash -lc \
         'cd /pfss/mlde/workspaces/mlde_wsp_JAIF/hessian_recipes && exec \
         target/release/hessian-recipes demo --output runs/jaif-cpu-fixture-01'"
    );
    // The evaluation of a managed run as a bounded CPU command.
    let eval = s.run(&[
        "cluster",
        "cpu-command",
        "--output",
        "runs/eval-01",
        "--",
        "evaluate",
        "--resume",
        "/pfss/mlde/workspaces/mlde_wsp_JAIF/ckpts/hr-run-7-9",
    ]);
    assert!(eval.status.success(), "{:?}", text(&eval));
    assert!(
        text(&eval).0.trim_end().ends_with(
            "exec target/release/hessian-recipes evaluate --resume \
             /pfss/mlde/workspaces/mlde_wsp_JAIF/ckpts/hr-run-7-9 --output runs/eval-01'"
        ),
        "{:?}",
        text(&eval)
    );
    std::fs::create_dir_all(s.path().join("runs/taken")).expect("mkdir");
    let taken = s.run(&[
        "cluster",
        "cpu-command",
        "--output",
        "runs/taken",
        "--",
        "demo",
    ]);
    assert_eq!(taken.status.code(), Some(2));
    assert!(text(&taken).1.contains("already exists"));
    let escape = s.run(&[
        "cluster",
        "cpu-command",
        "--output",
        "../elsewhere",
        "--",
        "demo",
    ]);
    assert_eq!(escape.status.code(), Some(2));
    let zero = s.run(&[
        "cluster",
        "cpu-command",
        "--output",
        "runs/z",
        "--timeout-seconds",
        "0",
        "--",
        "demo",
    ]);
    assert_eq!(zero.status.code(), Some(2));
    assert!(
        text(&zero).1.contains("--timeout-seconds"),
        "{:?}",
        text(&zero)
    );
}

#[test]
fn any_program_runs_as_a_bounded_command_that_keeps_its_output_under_runs() {
    let s = Scratch::new();
    let root = s.path().to_str().expect("utf-8").to_owned();
    s.write(
        "pilot.sh",
        "#!/bin/sh\necho \"pilot says $1\"\necho done > \"$2/result\"\n",
    );
    let line = |output: &str, slots: &str| {
        s.run(&[
            "cluster",
            "command",
            "--profile",
            "local",
            "--root",
            &root,
            "--slots",
            slots,
            "--output",
            output,
            "--timeout-seconds",
            "60",
            "--",
            "/bin/sh",
            "pilot.sh",
            "hi",
            "{output}",
        ])
    };
    let out = line("runs/pilot-01", "0");
    assert!(out.status.success(), "{:?}", text(&out));
    let printed = text(&out).0;
    assert!(
        printed.starts_with(
            "det command run --config-file cluster/determined/local-cpu-command.yaml --detach "
        ),
        "{printed}"
    );
    // Run the bounded command it prints here, as the task would on the cluster.
    let words = shlex::split(printed.trim_end()).expect("a shell line");
    let argv = &words[words
        .iter()
        .position(|w| w == "--detach")
        .expect("--detach")
        + 1..];
    let run = || {
        std::process::Command::new(&argv[0])
            .args(&argv[1..])
            .output()
            .expect("run the bounded command")
    };
    let ran = run();
    assert!(ran.status.success(), "{:?}", text(&ran));
    assert!(
        text(&ran).0.contains("pilot says hi"),
        "the task log still shows it"
    );
    let kept = std::fs::read_to_string(s.path().join("runs/pilot-01/command.log")).expect("log");
    assert_eq!(kept, "pilot says hi\n");
    assert!(
        s.path().join("runs/pilot-01/result").is_file(),
        "{{output}} became the folder"
    );
    // The same line again finds its folder taken and stops before the program runs.
    let again = run();
    assert!(!again.status.success());
    assert_eq!(
        std::fs::read_to_string(s.path().join("runs/pilot-01/command.log")).expect("log"),
        kept
    );
    // GPUs: the GPU config, and more than one as an override.
    let gpus = text(&line("runs/pilot-02", "2")).0;
    assert!(
        gpus.starts_with(
            "det command run --config-file cluster/determined/local-gpu-command.yaml --config \
             resources.slots=2 --detach "
        ),
        "{gpus}"
    );
    // Refused: an output outside runs/, and one that exists here.
    for output in ["elsewhere/x", "runs", "runs/pilot-01"] {
        let refused = line(output, "0");
        assert_eq!(
            refused.status.code(),
            Some(2),
            "{output}: {:?}",
            text(&refused)
        );
    }
}
