//! The cache folder outside the repository (`HR_CACHE_DIR`, else the XDG cache) and the Python
//! venvs built in it once, for the conformance suites and benches (the binary's `model fetch
//! smollm2` reads the same variables for its models folder). CI rebuilds whatever is absent.

use std::{
    path::{Path, PathBuf},
    process::Command,
};

use anyhow::{Context, Result};

use crate::run;

/// The cache folder: `HR_CACHE_DIR`, else `$XDG_CACHE_HOME/hessian-recipes`, else
/// `~/.cache/hessian-recipes`.
pub(crate) fn cache_dir() -> Result<PathBuf> {
    // An empty variable counts as unset, as the binary reads it.
    let var = |name: &str| std::env::var_os(name).filter(|v| !v.is_empty());
    if let Some(dir) = var("HR_CACHE_DIR") {
        return Ok(PathBuf::from(dir));
    }
    let base = match var("XDG_CACHE_HOME") {
        Some(x) => PathBuf::from(x),
        None => PathBuf::from(std::env::var_os("HOME").context("HOME is not set")?).join(".cache"),
    };
    Ok(base.join("hessian-recipes"))
}

/// A venv with `packages`, built once: it is assembled under a temporary name and renamed into
/// place only when complete, so a half-built venv is never reused.
pub(crate) fn venv(name: &str, packages: &[&str]) -> Result<PathBuf> {
    venv_with(name, Path::new("python3"), packages)
}

/// [`venv`] with a given interpreter.
pub(crate) fn venv_with(name: &str, python: &Path, packages: &[&str]) -> Result<PathBuf> {
    let dir = cache_dir()?.join(name);
    if dir.join("bin/python").is_file() {
        eprintln!("cache: reusing {}", dir.display());
        return Ok(dir);
    }
    let tmp = dir.with_file_name(format!("{name}.partial"));
    if tmp.exists() {
        std::fs::remove_dir_all(&tmp)?;
    }
    std::fs::create_dir_all(dir.parent().context("cache parent")?)?;
    let mut make = Command::new(python);
    make.args(["-m", "venv"]).arg(&tmp);
    run(make)?;
    let mut pip = Command::new(tmp.join("bin/python"));
    pip.args([
        "-m",
        "pip",
        "install",
        "--quiet",
        "--disable-pip-version-check",
    ])
    .args(packages);
    run(pip)?;
    // Entry-point scripts hold the venv's absolute path: build in place, then move and rewrite.
    std::fs::rename(&tmp, &dir)?;
    for entry in std::fs::read_dir(dir.join("bin"))? {
        let path = entry?.path();
        if let Ok(text) = std::fs::read_to_string(&path) {
            let old = tmp.display().to_string();
            if text.contains(&old) {
                std::fs::write(&path, text.replace(&old, &dir.display().to_string()))?;
            }
        }
    }
    Ok(dir)
}
