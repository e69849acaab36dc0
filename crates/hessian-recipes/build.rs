//! Records the git commit the binary is built from (`HR_GIT_COMMIT`, or `unknown` outside a git
//! checkout), for the source binding of sealed outputs.

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
            println!("cargo::rerun-if-changed={git_dir}/HEAD");
            println!("cargo::rerun-if-changed={git_dir}/index");
        }
    }
}
