//! Records the git commit the binary is built from (`HR_GIT_COMMIT`, `-dirty` when tracked
//! files differ from it, or `unknown` outside a git checkout), for the source binding of sealed
//! outputs. It reruns whenever the commit moves (HEAD, the branch refs, the reflog, the index) or
//! a source the binary is built from changes, so the stamp never goes stale. It also records the
//! locked burn and cubecl versions (`HR_TENSOR_LIBRARIES`), which every allocation's device
//! record names.

use std::process::Command;

fn main() {
    let commit = Command::new("git")
        .args(["rev-parse", "HEAD"])
        .output()
        .ok()
        .filter(|o| o.status.success())
        .map(|o| String::from_utf8_lossy(&o.stdout).trim().to_owned())
        .filter(|c| !c.is_empty())
        .unwrap_or_else(|| "unknown".to_owned());
    let dirty = Command::new("git")
        .args(["status", "--porcelain", "--untracked-files=no"])
        .output()
        .ok()
        .is_some_and(|o| o.status.success() && !o.stdout.is_empty());
    let suffix = if dirty { "-dirty" } else { "" };
    println!("cargo::rustc-env=HR_GIT_COMMIT={commit}{suffix}");
    if let Ok(out) = Command::new("git")
        .args(["rev-parse", "--git-dir"])
        .output()
    {
        let git_dir = String::from_utf8_lossy(&out.stdout).trim().to_owned();
        if !git_dir.is_empty() {
            // Only paths that exist: a missing one would rerun the script on every build.
            for path in ["HEAD", "index", "refs", "packed-refs", "logs/HEAD"] {
                let path = format!("{git_dir}/{path}");
                if std::path::Path::new(&path).exists() {
                    println!("cargo::rerun-if-changed={path}");
                }
            }
        }
    }
    // The workspace sources (this crate lives in <root>/crates/hessian-recipes).
    for path in ["../../crates", "../../Cargo.toml", "../../Cargo.lock"] {
        println!("cargo::rerun-if-changed={path}");
    }
    let lock = std::fs::read_to_string("../../Cargo.lock").unwrap_or_default();
    let libraries = ["burn", "cubecl"]
        .iter()
        .map(|name| format!("{name} {}", locked_version(&lock, name)))
        .collect::<Vec<_>>()
        .join(", ");
    println!("cargo::rustc-env=HR_TENSOR_LIBRARIES={libraries}");
}

/// The version Cargo.lock holds for the package `name` (`unknown` when it holds none).
fn locked_version(lock: &str, name: &str) -> String {
    let entry = format!("name = \"{name}\"\nversion = \"");
    lock.find(&entry)
        .and_then(|at| lock[at + entry.len()..].split('"').next())
        .unwrap_or("unknown")
        .to_owned()
}
