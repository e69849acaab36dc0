//! The templates: every rendered config passes Determined's schema and our rules, the committed
//! files under `cluster/determined/` match what the code renders, and the managed qualification
//! run differs from the native four-step run only in its output folder.

use std::collections::BTreeSet;

use anyhow::{Context, Result};
use hr_config::{Backend, ClusterProfile, ConfigKind, TrainingRun, check_value, templates};

use crate::repo_root;

fn profiles() -> [ClusterProfile; 2] {
    [
        ClusterProfile::jaif(),
        ClusterProfile::local(std::path::Path::new("/srv/checkout")),
    ]
}

#[test]
fn every_rendered_config_passes_the_schema_and_our_rules() -> Result<()> {
    for profile in profiles() {
        for t in templates(&profile) {
            let (value, kind) = t.config.value_and_kind()?;
            assert_eq!(
                ConfigKind::detect_file(std::path::Path::new(&t.file_name), &value),
                kind,
                "{}",
                t.file_name
            );
            let findings = check_value(&value, kind)?;
            assert!(
                findings.is_empty(),
                "{} ({}): {findings:?}",
                t.file_name,
                profile.name
            );
            // The rendered text parses back to the same value.
            let reparsed = hr_config::parse_yaml(&t.render()?, &t.file_name)?;
            assert_eq!(reparsed, value, "{}", t.file_name);
        }
    }
    Ok(())
}

#[test]
fn committed_templates_match_the_code() -> Result<()> {
    let dir = repo_root().join("cluster/determined");
    let rendered = templates(&ClusterProfile::jaif());
    let mut expected_names = BTreeSet::new();
    for t in &rendered {
        let path = dir.join(&t.file_name);
        let on_disk = std::fs::read_to_string(&path).with_context(|| {
            format!("{} is missing: run `cargo xtask templates`", path.display())
        })?;
        assert!(
            on_disk == t.render()?,
            "{} drifted from crates/hr-config: run `cargo xtask templates`",
            path.display()
        );
        expected_names.insert(t.file_name.clone());
    }
    let on_disk: BTreeSet<String> = std::fs::read_dir(&dir)?
        .map(|e| e.map(|e| e.file_name().to_string_lossy().into_owned()))
        .collect::<std::io::Result<_>>()?;
    let yaml_on_disk: BTreeSet<String> = on_disk
        .into_iter()
        .filter(|n| n.ends_with(".yaml"))
        .collect();
    assert_eq!(
        yaml_on_disk, expected_names,
        "stale or unknown files in cluster/determined"
    );
    Ok(())
}

#[test]
fn managed_qualification_differs_from_native_only_in_output() {
    for backend in Backend::ALL {
        let native = TrainingRun::native_qualification(backend);
        let managed = TrainingRun::managed_qualification(backend);
        assert_ne!(native.output, managed.output);
        assert_eq!(
            TrainingRun {
                output: native.output.clone(),
                ..managed.clone()
            },
            native
        );
        assert_eq!(native.steps, 4);
        // And the rendered entrypoints differ only in the plan path, which lies in the output.
        let profile = ClusterProfile::jaif();
        let (a, b) = (native.entrypoint(&profile), managed.entrypoint(&profile));
        let differing: Vec<usize> = (0..a.len()).filter(|i| a[*i] != b[*i]).collect();
        assert_eq!(a.len(), b.len());
        assert_eq!(differing.len(), 1);
        assert_eq!(b[differing[0]], managed.plan_path(&profile));
    }
}

#[test]
fn jaif_templates_carry_the_seed_values() -> Result<()> {
    let all = templates(&ClusterProfile::jaif());
    let text: String = all.iter().map(|t| t.render()).collect::<Result<_, _>>()?;
    for needle in [
        "resource_pool: 42_Compute",
        "workspace: JAIF",
        "host_path: /pfss/mlde/workspaces/mlde_wsp_JAIF",
        "container_path: /pfss/mlde/workspaces/mlde_wsp_JAIF",
        "/pfss/mlde/workspaces/mlde_wsp_JAIF/hessian_recipes/target/release/hessian-recipes",
        "work_dir: /run/determined/workdir",
        "det experiment create --project_id 363 cluster/determined/jaif-managed-cpu.yaml",
        "det shell start --workspace-name JAIF --config-file cluster/determined/jaif-shell.yaml",
        "--max-wall-seconds",
        "\"28800\"",
        "\"2400\"",
    ] {
        assert!(text.contains(needle), "{needle:?} missing");
    }
    // One pinned image for the shell that builds the binary and every job that runs it.
    for t in &all {
        assert!(
            t.render()?
                .contains("  image: determinedai/pytorch-ngc:0.35.0\n"),
            "{} does not pin the image",
            t.file_name
        );
    }
    let names: Vec<&str> = all.iter().map(|t| t.file_name.as_str()).collect();
    assert_eq!(
        names,
        [
            "jaif-cpu-command.yaml",
            "jaif-gpu-command.yaml",
            "jaif-shell.yaml",
            "jaif-managed-cpu.yaml",
            "jaif-managed-nemo-qual.yaml",
            "jaif-managed-nemo-main.yaml",
            "jaif-managed-nemo-main-8gpu.yaml",
            "jaif-managed-openenv-qual.yaml",
            "jaif-managed-openenv-main.yaml",
            "jaif-managed-openenv-main-8gpu.yaml",
        ]
    );
    Ok(())
}

#[test]
fn the_eight_gpu_main_run_is_the_main_run_started_as_a_rank_per_gpu() -> Result<()> {
    let profile = ClusterProfile::jaif();
    let all = templates(&profile);
    let value = |name: &str| -> Result<serde_json::Value> {
        let t = all
            .iter()
            .find(|t| t.file_name == name)
            .with_context(|| format!("{name} is rendered"))?;
        Ok(t.config.value_and_kind()?.0)
    };
    for backend in Backend::ALL {
        let one = value(&format!("jaif-managed-{backend}-main.yaml"))?;
        let eight = value(&format!("jaif-managed-{backend}-main-8gpu.yaml"))?;
        assert_eq!(eight["resources"]["slots_per_trial"], 8);
        // The same plan, proofs and searcher: only the launcher in front and the slots differ.
        let words = |v: &serde_json::Value| v["entrypoint"].as_array().cloned().unwrap_or_default();
        let launcher = [
            serde_json::json!(profile.binary()),
            "launch".into(),
            "--".into(),
        ];
        assert_eq!(words(&eight)[..3], launcher);
        // The budget counts every GPU's seconds: eight times the wall-clock limit.
        let mut rest = words(&eight)[3..].to_vec();
        let at = rest
            .iter()
            .position(|w| w == "--gpu-budget-seconds")
            .context("a GPU budget")?;
        assert_eq!(rest[at + 1], "230400");
        rest.drain(at..at + 2);
        assert_eq!(rest, words(&one));
        for field in [
            "searcher",
            "checkpoint_storage",
            "environment",
            "max_restarts",
        ] {
            assert_eq!(eight[field], one[field], "{field}");
        }
    }
    Ok(())
}
