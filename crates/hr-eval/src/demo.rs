//! The CPU demo's output: the three report files sealed as one snapshot in the demo's folder
//! (`payload/` + `MANIFEST.json` + `SEAL.dsse.json`), bound to the suites' data and the policy,
//! so `snapshot verify` checks a demo folder like any checkpoint.

use std::path::Path;

use hr_seal::{KeyPair, RunIdentity, SnapshotWriter, SourceBinding, sha256_hex};
use serde_json::json;

use crate::{Error, Evaluation, ReportMeta, Suite, render_reports};

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
) -> Result<String, Error> {
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
