//! SmolLM2-135M-Instruct for the benches and the results: the folder the binary's
//! `hessian-recipes model fetch smollm2` fetches (or reuses) in the cache, and prints.

use std::path::{Path, PathBuf};
use std::process::Command;

use anyhow::{Context, Result, bail};

/// The SmolLM2 folder, fetched and converted by `binary` on first use.
pub(crate) fn smollm2(binary: &Path) -> Result<PathBuf> {
    let out = Command::new(binary)
        .args(["model", "fetch", "smollm2"])
        .stderr(std::process::Stdio::inherit())
        .output()
        .with_context(|| format!("running {}", binary.display()))?;
    if !out.status.success() {
        bail!("`{} model fetch smollm2` failed", binary.display());
    }
    let folder = String::from_utf8(out.stdout).context("the printed folder is UTF-8")?;
    Ok(PathBuf::from(folder.trim()))
}
