//! Tidy: the code rules no compiler checks. Every `.rs` under `crates/` opens with a `//!` doc
//! paragraph; no test is marked ignored and no stub (`todo!`, `unimplemented!`) is left; each crate's
//! folder name is its package name; only the tensor crates depend on burn, and neither the layer-0
//! crates nor the tensor libraries reach tokio, reqwest or axum (checked with `cargo tree -i`, the
//! layering invariants of ARCHITECTURE.md); inside each crate, xtask included, the top-level
//! modules depend on each other one way (`cycles.rs`); the binary holds only the files on its
//! review list (`review_list.rs`); no file is over 650 lines and no function over 150
//! (`sizes.rs`); the crates that read configs, plans and tasks never link ed25519.

use std::path::{Path, PathBuf};

use anyhow::{Context, Result, bail};

/// Crates allowed to depend on burn: the tensor crates and the binary that picks the backend.
const TENSOR_CRATES: &[&str] = &[
    "hr-policy",
    "hr-grpo",
    "hr-train",
    "hr-assess",
    "hessian-recipes",
];

/// Crates that never reach an async runtime, an HTTP client or server: the layer-0 crates (pure
/// and synchronous) and the tensor libraries with the environment vocabulary they train through.
const NETWORK_FREE_CRATES: &[&str] = &[
    "hr-collective",
    "hr-config",
    "hr-seal",
    "hr-snapshot",
    "hr-proof",
    "hr-gguf",
    "hr-plot",
    "hr-plan",
    "hr-eval",
    "hr-env",
    "hr-policy",
    "hr-grpo",
];

/// Crates that never link the signing code (ed25519): what reads configs, plans and tasks needs
/// no keys.
const KEYLESS_CRATES: &[&str] = &["hr-config", "hr-plan", "hr-eval", "hr-env"];

pub(crate) fn run(root: &Path) -> Result<()> {
    let mut problems = Vec::new();
    let crates = crate_dirs(root)?;
    for dir in &crates {
        check_package_name(dir, &mut problems)?;
    }
    for file in rust_files(&root.join("crates"))? {
        let text = std::fs::read_to_string(&file)?;
        if !text.starts_with("//!") {
            problems.push(format!(
                "{}: must start with a `//!` doc comment",
                rel(root, &file)
            ));
        }
    }
    for top in ["crates", "xtask", "tests"] {
        for file in rust_files(&root.join(top))? {
            let text = std::fs::read_to_string(&file)?;
            problems.extend(crate::sizes::problems(&rel(root, &file), &text));
            for (i, line) in text.lines().enumerate() {
                // Built from pieces so this file does not flag itself.
                for banned in [
                    concat!("#[", "ignore"),
                    concat!("todo", "!("),
                    concat!("unimplemented", "!("),
                ] {
                    if line.contains(banned) {
                        problems.push(format!(
                            "{}:{}: `{banned}` is not allowed",
                            rel(root, &file),
                            i + 1
                        ));
                    }
                }
            }
        }
    }
    for dir in crates.iter().chain([&root.join("xtask")]) {
        for cycle in crate::cycles::module_cycles(&dir.join("src"))? {
            problems.push(format!(
                "{}: modules depend on each other in a cycle: {cycle}",
                rel(root, dir)
            ));
        }
    }
    let binary = rust_files(&root.join(crate::review_list::BINARY_SRC))?;
    crate::review_list::check(root, &binary, &mut problems)?;
    for dir in &crates {
        let name = dir_name(dir);
        if !TENSOR_CRATES.contains(&name.as_str()) && depends_on(&name, "burn")? {
            problems.push(format!(
                "{name} depends on burn; only {TENSOR_CRATES:?} may"
            ));
        }
        if KEYLESS_CRATES.contains(&name.as_str()) && depends_on(&name, "ed25519-dalek")? {
            problems.push(format!(
                "{name} links the signing code (ed25519-dalek); {KEYLESS_CRATES:?} must not"
            ));
        }
        if NETWORK_FREE_CRATES.contains(&name.as_str()) {
            for io in ["tokio", "reqwest", "axum"] {
                if depends_on(&name, io)? {
                    problems.push(format!(
                        "{name} must stay free of networking but reaches {io}"
                    ));
                }
            }
        }
    }
    if !problems.is_empty() {
        bail!(
            "tidy found {} problem(s):\n  {}",
            problems.len(),
            problems.join("\n  ")
        );
    }
    eprintln!(
        "tidy: {} crates, docs, test attributes, sizes, layering and the binary's review list ok",
        crates.len()
    );
    Ok(())
}

fn rel(root: &Path, path: &Path) -> String {
    path.strip_prefix(root)
        .unwrap_or(path)
        .display()
        .to_string()
}

fn dir_name(dir: &Path) -> String {
    dir.file_name()
        .unwrap_or_default()
        .to_string_lossy()
        .into_owned()
}

fn crate_dirs(root: &Path) -> Result<Vec<PathBuf>> {
    let mut dirs: Vec<PathBuf> = std::fs::read_dir(root.join("crates"))?
        .map(|e| e.map(|e| e.path()))
        .collect::<std::io::Result<_>>()?;
    dirs.retain(|d| d.join("Cargo.toml").is_file());
    dirs.sort();
    Ok(dirs)
}

fn check_package_name(dir: &Path, problems: &mut Vec<String>) -> Result<()> {
    let manifest = std::fs::read_to_string(dir.join("Cargo.toml"))?;
    let expected = format!("name = \"{}\"", dir_name(dir));
    if !manifest.lines().any(|l| l.trim() == expected) {
        problems.push(format!(
            "crates/{}: package name must equal the folder name",
            dir_name(dir)
        ));
    }
    if !manifest.contains("[lints]\nworkspace = true") {
        problems.push(format!(
            "crates/{}: needs `[lints] workspace = true`",
            dir_name(dir)
        ));
    }
    Ok(())
}

fn rust_files(dir: &Path) -> Result<Vec<PathBuf>> {
    let mut out = Vec::new();
    let mut stack = vec![dir.to_owned()];
    while let Some(d) = stack.pop() {
        for entry in std::fs::read_dir(&d).with_context(|| format!("reading {}", d.display()))? {
            let path = entry?.path();
            if path.is_dir() {
                stack.push(path);
            } else if path.extension().is_some_and(|e| e == "rs") {
                out.push(path);
            }
        }
    }
    out.sort();
    Ok(out)
}

/// `cargo tree -p NAME -e normal -i DEP`: a DEP absent from the graph is an error naming no
/// match; present but unreachable from NAME prints nothing.
fn depends_on(name: &str, dep: &str) -> Result<bool> {
    let out = crate::cargo()
        .args([
            "tree", "--quiet", "--locked", "-p", name, "-e", "normal", "-i", dep, "--prefix",
            "none",
        ])
        .output()
        .context("running cargo tree")?;
    let stderr = String::from_utf8_lossy(&out.stderr);
    if !out.status.success() {
        if stderr.contains("did not match any packages") {
            return Ok(false);
        }
        bail!("cargo tree -p {name} -i {dep} failed: {stderr}");
    }
    Ok(!String::from_utf8_lossy(&out.stdout).trim().is_empty())
}
