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
    assert_eq!(files, ["report.json", "report.md", "results.jsonl"]);
    let report: serde_json::Value =
        serde_json::from_slice(&std::fs::read(s.path().join("runs/demo-01/report.json"))?)?;
    assert_eq!(report["total"]["items"], 34);
    assert_eq!(report["total"]["correct"], 25);
    assert_eq!(report["suites"].as_array().map(Vec::len), Some(3));
    assert!(report["tool_versions"]["hessian-recipes"].is_string());
    assert!(stderr.contains("mgsm: 12/12"), "progress lines: {stderr}");
    // Nothing was written outside the output folder.
    assert_eq!(snapshot(s.path()).len(), 3);
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
    assert_eq!(snapshot(&s.path().join("empty")).len(), 3);
}
