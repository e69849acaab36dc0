//! The binary's review list, enforced: every file under `crates/hessian-recipes/src` is one of
//! [`REVIEW_LIST`] (a new file is a decision to review, not an accident), ARCHITECTURE.md's
//! binary section names each of them, no command file outgrows [`LINE_BUDGET`], and none does
//! what belongs in a library ([`LIBRARY_WORK`]: sealing, spawning processes or threads).

use std::path::{Path, PathBuf};

use anyhow::Result;

/// The binary's source folder, relative to the workspace root.
pub(crate) const BINARY_SRC: &str = "crates/hessian-recipes/src";

/// What may live in the binary, file by file: clap, backend dispatch, logging, output folders,
/// key arguments, and per command a file that parses, calls a library and prints.
pub(crate) const REVIEW_LIST: &[&str] = &[
    "main.rs",
    "lib.rs",
    "cli/mod.rs",
    "cli/qualify.rs",
    "cli/cluster.rs",
    "cli/model.rs",
    "cli/docs.rs",
    "backend.rs",
    "logging.rs",
    "output.rs",
    "keys.rs",
    "model_folder.rs",
    "model_fetch.rs",
    "model_gguf.rs",
    "model_wheel.rs",
    "check.rs",
    "cluster.rs",
    "demo.rs",
    "devmaster.rs",
    "evaluate.rs",
    "generate.rs",
    "launch.rs",
    "preflight.rs",
    "prepare.rs",
    "probe.rs",
    "qualify.rs",
    "qualify_managed.rs",
    "qualify_native.rs",
    "qualify_soak.rs",
    "snapshot.rs",
    "train.rs",
];

/// Lines a file outside `cli/` may hold: a command that parses, calls and prints fits.
const LINE_BUDGET: usize = 400;

/// Text that means library work, with where it belongs.
const LIBRARY_WORK: &[(&str, &str)] = &[
    (
        "SnapshotWriter",
        "sealing belongs in the library that owns the output",
    ),
    ("thread::spawn", "threads belong in a library"),
    ("tokio::spawn", "tasks belong in a library"),
    (
        "Command::new",
        "running programs belongs in a library (main.rs re-executes itself only)",
    ),
];

/// Checks the binary's `files` (every `.rs` under [`BINARY_SRC`]) against the review list; each
/// finding is pushed onto `problems`.
pub(crate) fn check(root: &Path, files: &[PathBuf], problems: &mut Vec<String>) -> Result<()> {
    let src = root.join(BINARY_SRC);
    let architecture = std::fs::read_to_string(root.join("ARCHITECTURE.md"))?;
    let section = architecture
        .split("### `crates/hessian-recipes` (binary)")
        .nth(1)
        .and_then(|rest| rest.split("\n### ").next())
        .unwrap_or_default();
    let mut seen = Vec::new();
    for file in files {
        let rel = file
            .strip_prefix(&src)
            .unwrap_or(file)
            .to_string_lossy()
            .into_owned();
        let text = std::fs::read_to_string(file)?;
        check_file(&rel, &text, problems);
        seen.push(rel);
    }
    for listed in REVIEW_LIST {
        if !seen.iter().any(|s| s == listed) {
            problems.push(format!(
                "{BINARY_SRC}/{listed} is on the review list (xtask/src/review_list.rs) but does not exist: take it off"
            ));
        }
        if !section.contains(&format!("`{listed}`")) {
            problems.push(format!(
                "ARCHITECTURE.md's binary section does not name `{listed}`: say what it holds"
            ));
        }
    }
    Ok(())
}

fn check_file(rel: &str, text: &str, problems: &mut Vec<String>) {
    if !REVIEW_LIST.contains(&rel) {
        problems.push(format!(
            "{BINARY_SRC}/{rel} is not on the binary's review list (xtask/src/review_list.rs): \
             put domain logic in a library, or list the file and say in ARCHITECTURE.md what it holds"
        ));
    }
    let lines = text.lines().count();
    if !rel.starts_with("cli/") && lines > LINE_BUDGET {
        problems.push(format!(
            "{BINARY_SRC}/{rel} has {lines} lines, over the binary's budget of {LINE_BUDGET}: \
             move logic into a library"
        ));
    }
    for (i, line) in text.lines().enumerate() {
        let code = line.split("//").next().unwrap_or_default();
        for (word, why) in LIBRARY_WORK {
            if code.contains(word) && !(rel == "main.rs" && *word == "Command::new") {
                problems.push(format!("{BINARY_SRC}/{rel}:{}: `{word}`: {why}", i + 1));
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn unlisted_files_long_files_and_library_work_are_findings() {
        let mut problems = Vec::new();
        check_file("train.rs", "fn run() {}\n", &mut problems);
        assert!(problems.is_empty(), "{problems:?}");
        check_file("helpers.rs", "fn run() {}\n", &mut problems);
        assert!(problems[0].contains("not on the binary's review list"));
        problems.clear();
        check_file("train.rs", &"x\n".repeat(LINE_BUDGET + 1), &mut problems);
        assert!(problems[0].contains("over the binary's budget"));
        problems.clear();
        check_file("cli/mod.rs", &"x\n".repeat(LINE_BUDGET + 1), &mut problems);
        assert!(problems.is_empty(), "{problems:?}");
        check_file(
            "demo.rs",
            "let w = SnapshotWriter::in_place();\n",
            &mut problems,
        );
        assert!(problems[0].contains("demo.rs:1: `SnapshotWriter`"));
        problems.clear();
        check_file("main.rs", "Command::new(exe)\n", &mut problems);
        check_file(
            "demo.rs",
            "// Command::new is mentioned in a comment\n",
            &mut problems,
        );
        assert!(problems.is_empty(), "{problems:?}");
        check_file(
            "train.rs",
            "std::process::Command::new(\"x\")\n",
            &mut problems,
        );
        assert_eq!(problems.len(), 1);
    }
}
