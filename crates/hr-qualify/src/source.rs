//! The source binding of a qualification: git commit, tree digest, Cargo.lock digest and the
//! binary's sha256, recorded next to an immutable copy of the binary.

use hr_files::IoResultExt;
use std::{path::Path, process::Command};

use hr_seal::{SourceBinding, hash_file, sha256_hex};
use serde::{Deserialize, Serialize};

use crate::QualifyError;

/// `source/SOURCE.json`.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct SourceRecord {
    /// The binding every snapshot carries.
    pub binding: SourceBinding,
    /// The copied binary, relative to the output folder.
    pub binary: String,
}

fn git(root: &Path, args: &[&str]) -> Option<String> {
    let out = Command::new("git")
        .args(args)
        .current_dir(root)
        .output()
        .ok()?;
    out.status
        .success()
        .then(|| String::from_utf8_lossy(&out.stdout).into_owned())
}

/// Copies `binary` into `<output>/source/` and records the digests; `root` is the checkout.
pub fn record_source(
    binary: &Path,
    commit: &str,
    root: &Path,
    output: &Path,
) -> Result<SourceRecord, QualifyError> {
    let dir = output.join("source");
    std::fs::create_dir_all(&dir).at("create", &dir)?;
    let copy = dir.join("hessian-recipes");
    std::fs::copy(binary, &copy).at("copy the binary to", &copy)?;
    let (_, binary_sha256) = hash_file(&copy)?;
    // The tree digest covers every tracked file's mode, object id and path (`git ls-files -s`).
    let tree_sha256 = git(root, &["ls-files", "-s"]).map(|s| sha256_hex(s.as_bytes()));
    let cargo_lock_sha256 = hash_file(&root.join("Cargo.lock")).ok().map(|(_, d)| d);
    let record = SourceRecord {
        binding: SourceBinding {
            commit: commit.to_owned(),
            tree_sha256,
            cargo_lock_sha256,
            binary_sha256: Some(binary_sha256),
        },
        binary: "source/hessian-recipes".to_owned(),
    };
    let path = dir.join("SOURCE.json");
    std::fs::write(
        &path,
        serde_json::to_vec_pretty(&record).expect("record serialises"),
    )
    .at("write", &path)?;
    Ok(record)
}
