//! Our rules: each bad config is rejected with a finding that names the field.

use anyhow::Result;
use hr_config::{ClusterProfile, ConfigKind, Finding, check_value, parse_yaml, templates};
use serde_json::Value;

fn template_value(file_suffix: &str) -> Result<Value> {
    let t = templates(&ClusterProfile::jaif())
        .into_iter()
        .find(|t| t.file_name.ends_with(file_suffix))
        .expect("template exists");
    Ok(t.config.value_and_kind()?.0)
}

fn fields(findings: &[Finding]) -> Vec<&str> {
    findings.iter().map(|f| f.field.as_str()).collect()
}

#[test]
fn slots_per_trial_in_a_command_is_rejected() -> Result<()> {
    let mut cmd = template_value("cpu-command.yaml")?;
    cmd["resources"] = serde_json::json!({"slots_per_trial": 0, "resource_pool": "42_Compute"});
    let findings = check_value(&cmd, ConfigKind::Command)?;
    assert_eq!(
        fields(&findings),
        ["resources.slots_per_trial"],
        "{findings:?}"
    );
    assert!(findings[0].message.contains("rename it to `slots`"));
    Ok(())
}

#[test]
fn a_trial_of_ours_asking_for_more_than_one_slot_is_rejected() -> Result<()> {
    let main = template_value("managed-nemo-main.yaml")?;
    assert!(check_value(&main, ConfigKind::Experiment)?.is_empty());
    let mut two = main.clone();
    two["resources"]["slots_per_trial"] = serde_json::json!(2);
    let findings = check_value(&two, ConfigKind::Experiment)?;
    assert_eq!(
        fields(&findings),
        ["resources.slots_per_trial"],
        "{findings:?}"
    );
    assert!(findings[0].message.contains("`slots_per_trial: 1`"));
    // One rank per slot through a launcher, ours or Determined's.
    let words = two["entrypoint"].as_array().cloned().unwrap_or_default();
    let binary = words
        .iter()
        .position(|w| w.as_str().is_some_and(|w| w.ends_with("hessian-recipes")))
        .expect("the binary in the entrypoint");
    for launcher in [
        vec![words[binary].clone(), "launch".into(), "--".into()],
        vec![
            "python3".into(),
            "-m".into(),
            "determined.launch.torch_distributed".into(),
            "--".into(),
        ],
    ] {
        let mut launched = two.clone();
        let mut entry = words.clone();
        entry.splice(binary..binary, launcher);
        launched["entrypoint"] = Value::Array(entry);
        assert!(
            check_value(&launched, ConfigKind::Experiment)?.is_empty(),
            "{}",
            launched["entrypoint"]
        );
    }
    // Another program's experiment may use its slots as it likes.
    two["entrypoint"] = serde_json::json!("python3 train.py");
    assert!(check_value(&two, ConfigKind::Experiment)?.is_empty());
    Ok(())
}

#[test]
fn a_shell_that_holds_a_gpu_or_takes_the_default_slot_is_rejected() -> Result<()> {
    let shell = template_value("jaif-shell.yaml")?;
    assert!(check_value(&shell, ConfigKind::Shell)?.is_empty());
    for slots in [serde_json::json!(1), Value::Null] {
        let mut held = shell.clone();
        held["resources"]["slots"] = slots.clone();
        let findings = check_value(&held, ConfigKind::Shell)?;
        assert_eq!(
            fields(&findings),
            ["resources.slots"],
            "{slots}: {findings:?}"
        );
        assert!(
            findings[0].message.contains("`resources.slots: 0`"),
            "{findings:?}"
        );
        // The same config as a command is fine: commands may hold GPUs.
        if slots == 1 {
            held["entrypoint"] = serde_json::json!([
                "/usr/bin/timeout",
                "--signal=TERM",
                "--kill-after=30s",
                "60s",
                "true"
            ]);
            assert!(check_value(&held, ConfigKind::Command)?.is_empty());
        }
    }
    Ok(())
}

#[test]
fn slots_in_an_experiment_is_rejected() -> Result<()> {
    let mut exp = template_value("managed-cpu.yaml")?;
    exp["resources"] = serde_json::json!({"slots": 0});
    let findings = check_value(&exp, ConfigKind::Experiment)?;
    assert_eq!(fields(&findings), ["resources.slots"], "{findings:?}");
    assert!(findings[0].message.contains("slots_per_trial"));
    Ok(())
}

#[test]
fn single_searcher_without_max_length_is_rejected() -> Result<()> {
    let mut exp = template_value("managed-cpu.yaml")?;
    exp["searcher"]
        .as_object_mut()
        .expect("object")
        .remove("max_length");
    let findings = check_value(&exp, ConfigKind::Experiment)?;
    assert_eq!(fields(&findings), ["searcher.max_length"], "{findings:?}");
    Ok(())
}

#[test]
fn work_dir_inside_the_shared_mount_is_rejected() -> Result<()> {
    let mut cmd = template_value("cpu-command.yaml")?;
    cmd["work_dir"] = "/pfss/mlde/workspaces/mlde_wsp_JAIF/hessian_recipes".into();
    let findings = check_value(&cmd, ConfigKind::Command)?;
    assert_eq!(fields(&findings), ["work_dir"], "{findings:?}");
    assert!(findings[0].message.contains("/run/determined/workdir"));
    // A sibling folder that merely shares the prefix is not inside the mount.
    cmd["work_dir"] = "/pfss/mlde/workspaces/mlde_wsp_JAIF_other".into();
    assert!(check_value(&cmd, ConfigKind::Command)?.is_empty());
    Ok(())
}

#[test]
fn an_unbounded_command_entrypoint_is_rejected() -> Result<()> {
    let mut cmd = template_value("cpu-command.yaml")?;
    cmd["entrypoint"] = serde_json::json!(["/bin/bash", "-lc", "sleep 1"]);
    assert_eq!(
        fields(&check_value(&cmd, ConfigKind::Command)?),
        ["entrypoint"]
    );
    cmd["entrypoint"] = serde_json::json!([
        "/usr/bin/timeout",
        "--signal=TERM",
        "--kill-after=30s",
        "900s",
        "/bin/true"
    ]);
    assert!(check_value(&cmd, ConfigKind::Command)?.is_empty());
    Ok(())
}

#[test]
fn missing_environment_defaults_are_rejected_unless_overridden() -> Result<()> {
    let mut cmd = template_value("cpu-command.yaml")?;
    let vars = cmd["environment"]["environment_variables"]
        .as_array_mut()
        .expect("list");
    vars.retain(|v| v != "HF_HUB_OFFLINE=1" && v != "CUDA_VISIBLE_DEVICES=");
    let findings = check_value(&cmd, ConfigKind::Command)?;
    assert_eq!(findings.len(), 2, "{findings:?}");
    assert!(
        findings
            .iter()
            .all(|f| f.field == "environment.environment_variables")
    );
    assert!(
        findings
            .iter()
            .any(|f| f.message.contains("HF_HUB_OFFLINE=1"))
    );
    assert!(
        findings
            .iter()
            .any(|f| f.message.contains("CUDA_VISIBLE_DEVICES="))
    );
    cmd["environment"]["environment_variables"]
        .as_array_mut()
        .expect("list")
        .push("HR_ENV_OVERRIDES=CUDA_VISIBLE_DEVICES,HF_HUB_OFFLINE".into());
    assert!(check_value(&cmd, ConfigKind::Command)?.is_empty());
    Ok(())
}

#[test]
fn unknown_fields_and_wrong_types_name_the_field() -> Result<()> {
    let exp = parse_yaml(
        "searcher: {name: single, max_length: {batches: 8}}\nslots: 1\n",
        "x",
    )?;
    let findings = check_value(&exp, ConfigKind::Experiment)?;
    assert!(
        findings
            .iter()
            .any(|f| f.field == "(top level)" && f.message.contains("\"slots\" not allowed")),
        "{findings:?}"
    );
    let cmd = parse_yaml("resources: {slots: many}\n", "x")?;
    let findings = check_value(&cmd, ConfigKind::Command)?;
    assert!(
        findings.iter().any(|f| f.field == "resources.slots"),
        "{findings:?}"
    );
    Ok(())
}

#[test]
fn malformed_yaml_reports_line_and_column() {
    let err = parse_yaml("resources:\n  slots: 0\n bad: [\n", "broken.yaml").expect_err("invalid");
    let hr_config::Error::Yaml { line, column, .. } = &err else {
        panic!("{err}")
    };
    assert_eq!((*line, *column), (3, 2), "{err}");
    assert!(
        err.to_string()
            .starts_with("broken.yaml: not valid YAML at line 3, column 2"),
        "{err}"
    );
}

#[test]
fn house_rules_are_notes_after_the_problems_on_a_config_that_is_not_ours() -> Result<()> {
    // A command of another program: no JAIF defaults, no timeout; nothing fails.
    let theirs = parse_yaml(
        "entrypoint: [python3, train.py]\nresources: {slots: 1}\n",
        "x",
    )?;
    let findings = check_value(&theirs, ConfigKind::Command)?;
    assert!(
        !findings.is_empty() && findings.iter().all(|f| f.note),
        "{findings:?}"
    );
    // A real problem comes first and fails; the notes follow it.
    let bad = parse_yaml(
        "entrypoint: [python3, train.py]\nresources: {slots_per_trial: 1}\n",
        "x",
    )?;
    let findings = check_value(&bad, ConfigKind::Command)?;
    assert_eq!(
        findings[0].field, "resources.slots_per_trial",
        "{findings:?}"
    );
    assert!(findings[0].is_problem() && findings[1..].iter().all(|f| f.note));
    // The same command running hessian-recipes: the house rules are problems.
    let ours = parse_yaml(
        "entrypoint: [hessian-recipes, evaluate]\nresources: {slots: 1}\n",
        "x",
    )?;
    let findings = check_value(&ours, ConfigKind::Command)?;
    assert!(
        !findings.is_empty() && findings.iter().all(Finding::is_problem),
        "{findings:?}"
    );
    Ok(())
}
