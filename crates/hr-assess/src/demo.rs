//! The CPU demo's output: the three report files sealed as one snapshot in the demo's folder
//! (`payload/` + `MANIFEST.json` + `SEAL.dsse.json`), bound to the suites' data and the policy,
//! so `snapshot verify` checks a demo folder like any checkpoint.

use std::path::Path;

use hr_seal::{KeyPair, RunIdentity, SnapshotWriter, SourceBinding, sha256_hex};
use serde_json::json;

use hr_eval::{Evaluation, ReportMeta, Suite, render_reports};

use crate::ReportError;

/// Renders `eval`'s reports into `folder/payload/` and seals them, signed with `key` when given.
/// The folder must exist and be empty (the caller makes it fresh); the sealed config is the
/// command, the policy and each suite's data digest; the run id is `demo:<folder name>`; the
/// tools are `meta.tool_versions`. Returns the manifest's sha256.
pub fn seal_demo(
    folder: &Path,
    eval: &Evaluation,
    suites: &[Suite],
    meta: &ReportMeta,
    source: SourceBinding,
    key: Option<&KeyPair>,
) -> Result<String, ReportError> {
    let config = json!({
        "command": "demo",
        "policy": eval.policy,
        "suites": suites.iter().map(|s| json!({"name": s.name, "sha256": s.sha256})).collect::<Vec<_>>(),
    });
    let name = folder
        .file_name()
        .map_or_else(|| "demo".into(), |n| n.to_string_lossy().into_owned());
    let run = RunIdentity {
        run_id: format!("demo:{name}"),
        writer: "local".to_owned(),
    };
    let mut writer = SnapshotWriter::in_place(
        folder,
        run,
        0,
        source,
        sha256_hex(config.to_string().as_bytes()),
    );
    for (tool, version) in &meta.tool_versions {
        writer.tool(tool, version);
    }
    for (file, bytes) in render_reports(eval, meta) {
        let role = if file == "results.jsonl" {
            "results"
        } else {
            "report"
        };
        writer.add_bytes(&format!("payload/{file}"), role, &bytes)?;
    }
    let sealed = writer.seal(key)?;
    let digest = sealed.manifest_sha256.clone();
    sealed.commit()?;
    Ok(digest)
}

#[cfg(test)]
mod tests {
    use hr_eval::{FixturePolicy, builtin_suites, evaluate};

    use super::*;

    #[test]
    fn the_demo_folder_is_sealed_with_its_reports_and_verifies() -> anyhow::Result<()> {
        let suites = builtin_suites()?;
        let eval = evaluate(&suites, &mut FixturePolicy::builtin()?, |_, _, _| {})?;
        let meta = ReportMeta {
            tool_versions: vec![("hr-eval".into(), "0.0.0".into())],
            elapsed_ms: 1,
        };
        let dir = tempfile::tempdir()?;
        let folder = dir.path().join("out");
        std::fs::create_dir(&folder)?;
        let source = SourceBinding {
            commit: "test".into(),
            tree_sha256: None,
            cargo_lock_sha256: None,
            binary_sha256: None,
        };
        let digest = seal_demo(&folder, &eval, &suites, &meta, source, None)?;
        let verified = hr_seal::verify(&folder, &hr_seal::Expectations::default())?;
        assert_eq!(verified.manifest_sha256, digest);
        assert_eq!(verified.manifest.run.run_id, "demo:out");
        let files: Vec<&str> = verified
            .manifest
            .files
            .iter()
            .map(|f| f.path.as_str())
            .collect();
        assert_eq!(
            files,
            [
                "payload/report.json",
                "payload/report.md",
                "payload/results.jsonl"
            ]
        );
        let rendered = render_reports(&eval, &meta);
        assert_eq!(verified.read_file("payload/results.jsonl")?, rendered[0].1);
        // A second seal into a used folder is refused, leaving the first intact.
        let source = verified.manifest.source.clone();
        assert!(seal_demo(&folder, &eval, &suites, &meta, source, None).is_err());
        hr_seal::verify(&folder, &hr_seal::Expectations::default())?;
        Ok(())
    }
}
