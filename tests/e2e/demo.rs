//! `hessian-recipes demo`: outputs, scores, and the fresh-folder rule.

use anyhow::Result;
use hr_tests::{Scratch, snapshot, text};

#[test]
fn demo_writes_three_reports_with_the_scripted_scores() -> Result<()> {
    let s = Scratch::new();
    let out = s.run(&["demo", "--output", "runs/demo-01"]);
    let (stdout, stderr) = text(&out);
    assert!(out.status.success(), "{stdout}\n{stderr}");
    let files: Vec<String> = snapshot(&s.path().join("runs/demo-01"))
        .keys()
        .map(|p| p.display().to_string())
        .collect();
    assert_eq!(
        files,
        [
            "MANIFEST.json",
            "SEAL.dsse.json",
            "payload/report.json",
            "payload/report.md",
            "payload/results.jsonl"
        ]
    );
    let report: serde_json::Value = serde_json::from_slice(&std::fs::read(
        s.path().join("runs/demo-01/payload/report.json"),
    )?)?;
    assert_eq!(report["total"]["items"], 34);
    assert_eq!(report["total"]["correct"], 25);
    assert_eq!(report["suites"].as_array().map(Vec::len), Some(3));
    assert!(report["tool_versions"]["hessian-recipes"].is_string());
    assert!(
        stderr.contains("mgsm: 12 of 12 tasks run"),
        "progress lines: {stderr}"
    );
    // Nothing was written outside the output folder.
    assert_eq!(snapshot(s.path()).len(), 5);
    Ok(())
}

#[test]
fn demo_refuses_a_folder_with_content_and_leaves_it_byte_identical() {
    let s = Scratch::new();
    assert!(s.run(&["demo", "--output", "out"]).status.success());
    let before = snapshot(s.path());
    let again = s.run(&["demo", "--output", "out"]);
    assert_eq!(again.status.code(), Some(2), "{:?}", text(&again));
    assert!(text(&again).1.contains("already has content"));
    assert_eq!(snapshot(s.path()), before);

    s.write("other/keep.txt", "precious");
    let before = snapshot(s.path());
    assert_eq!(s.run(&["demo", "--output", "other"]).status.code(), Some(2));
    assert_eq!(snapshot(s.path()), before);
}

#[test]
fn demo_accepts_an_existing_empty_folder() {
    let s = Scratch::new();
    std::fs::create_dir(s.path().join("empty")).expect("mkdir");
    assert!(s.run(&["demo", "--output", "empty"]).status.success());
    assert_eq!(snapshot(&s.path().join("empty")).len(), 5);
}

#[test]
fn demo_output_is_a_sealed_snapshot_that_verify_checks() {
    let s = Scratch::new();
    assert!(s.run(&["demo", "--output", "d"]).status.success());
    let ok = s.run(&["snapshot", "verify", "d", "--run-id", "demo:d"]);
    let (stdout, _) = text(&ok);
    assert_eq!(ok.status.code(), Some(0), "{stdout}");
    assert!(
        stdout.starts_with("valid: d") && stdout.contains("payload/results.jsonl (results)"),
        "{stdout}"
    );

    // A signature is required once a key is given; the demo is digest-sealed only.
    let key = "3b6a27bcceb6a42d62a3a8d02a6f0d73653215771de243a63ac048a18b59da29";
    let unsigned = s.run(&["snapshot", "verify", "d", "--key", key]);
    assert_eq!(unsigned.status.code(), Some(3));
    assert!(
        text(&unsigned).0.contains("UntrustedSigner"),
        "{:?}",
        text(&unsigned)
    );

    let json = s.run(&["snapshot", "verify", "d", "--json"]);
    let v: serde_json::Value = serde_json::from_str(&text(&json).0).expect("one JSON object");
    assert_eq!(json.status.code(), Some(0));
    assert_eq!(
        (v["valid"].as_bool(), v["run_id"].as_str()),
        (Some(true), Some("demo:d"))
    );
    assert!(v["files"].as_array().is_some_and(|f| !f.is_empty()), "{v}");

    let other_run = s.run(&["snapshot", "verify", "d", "--run-id", "demo:other"]);
    assert_eq!(other_run.status.code(), Some(3));
    assert!(text(&other_run).0.contains("RunIdMismatch"));

    let results = s.path().join("d/payload/results.jsonl");
    let mut bytes = std::fs::read(&results).expect("read");
    bytes[10] ^= 0x20;
    std::fs::write(&results, bytes).expect("write");
    let bad = s.run(&["snapshot", "verify", "d"]);
    assert_eq!(bad.status.code(), Some(3));
    assert!(
        text(&bad)
            .0
            .contains("DigestMismatch: digest mismatch for payload/results.jsonl"),
        "{:?}",
        text(&bad)
    );

    let bad_json = s.run(&["snapshot", "verify", "d", "--json"]);
    let v: serde_json::Value = serde_json::from_str(&text(&bad_json).0).expect("one JSON object");
    assert_eq!(bad_json.status.code(), Some(3));
    assert_eq!(v["valid"], false);
    assert_eq!(v["error"]["code"], "DigestMismatch", "{v}");

    let missing = s.run(&["snapshot", "verify", "nowhere"]);
    assert_eq!(missing.status.code(), Some(3));
    assert!(text(&missing).0.contains("CheckpointNotFound"));
    let bad_key = s.run(&["snapshot", "verify", "d", "--key", "xyz"]);
    assert_eq!(bad_key.status.code(), Some(2), "{:?}", text(&bad_key));
}

#[test]
fn the_source_stamp_is_the_commit_the_binary_was_built_from() {
    let git = |args: &[&str]| {
        std::process::Command::new("git")
            .args(args)
            .current_dir(hr_tests::repo_root())
            .output()
            .ok()
            .filter(|o| o.status.success())
            .map(|o| String::from_utf8_lossy(&o.stdout).trim().to_owned())
    };
    let expected = match git(&["rev-parse", "HEAD"]) {
        Some(head) => {
            let dirty = git(&["status", "--porcelain", "--untracked-files=no"])
                .is_some_and(|s| !s.is_empty());
            format!("{head}{}", if dirty { "-dirty" } else { "" })
        }
        None => "unknown".to_owned(),
    };
    let s = Scratch::new();
    let out = s.run(&["demo", "--output", "d"]);
    assert!(out.status.success(), "{:?}", text(&out));
    let manifest: serde_json::Value =
        serde_json::from_slice(&std::fs::read(s.path().join("d/MANIFEST.json")).expect("manifest"))
            .expect("manifest json");
    assert_eq!(
        manifest["source"]["commit"], expected,
        "the binary's stamp is stale: rebuild it (cargo build -p hessian-recipes)"
    );
}
