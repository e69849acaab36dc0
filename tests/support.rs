//! Support for the end-to-end tests: find the real `hessian-recipes` binary, run it in a
//! scratch folder, and snapshot folders to prove that a refused run touched nothing.
//!
//! The binary is the one `cargo build -p hessian-recipes` put next to this test executable
//! (`target/<profile>/hessian-recipes`); `cargo xtask ci` builds it before the tests run, and
//! `HR_BIN` overrides the path. This crate is test support only: it has no product code.

pub mod gguf;
pub mod mutate;
pub mod private_ca;
pub mod tiny_model;

use std::{
    collections::BTreeMap,
    path::{Path, PathBuf},
    process::{Command, Output},
};

/// The path of the binary under test.
pub fn binary() -> PathBuf {
    if let Some(path) = std::env::var_os("HR_BIN") {
        return PathBuf::from(path);
    }
    let exe = std::env::current_exe().expect("test executable path");
    // target/<profile>/deps/e2e-<hash> -> target/<profile>/hessian-recipes
    let profile_dir = exe
        .parent()
        .and_then(Path::parent)
        .expect("target/<profile>");
    let bin = profile_dir.join(format!("hessian-recipes{}", std::env::consts::EXE_SUFFIX));
    assert!(
        bin.is_file(),
        "{} is missing: build it first with `cargo build -p hessian-recipes` (cargo xtask ci does)",
        bin.display()
    );
    bin
}

/// The repository root.
pub fn repo_root() -> PathBuf {
    PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("..")
}

/// A scratch folder that is removed on drop.
pub struct Scratch {
    dir: tempfile::TempDir,
}

impl Scratch {
    /// A new empty scratch folder.
    pub fn new() -> Self {
        Self {
            dir: tempfile::tempdir().expect("temp dir"),
        }
    }

    /// Its path.
    pub fn path(&self) -> &Path {
        self.dir.path()
    }

    /// Runs the binary with `args` in this folder.
    pub fn run(&self, args: &[&str]) -> Output {
        Command::new(binary())
            .args(args)
            .current_dir(self.path())
            .output()
            .expect("run hessian-recipes")
    }

    /// Writes a file relative to this folder.
    pub fn write(&self, rel: &str, text: &str) -> PathBuf {
        let path = self.path().join(rel);
        if let Some(parent) = path.parent() {
            std::fs::create_dir_all(parent).expect("create parent");
        }
        std::fs::write(&path, text).expect("write file");
        path
    }
}

impl Default for Scratch {
    fn default() -> Self {
        Self::new()
    }
}

/// Every file under `dir` with its bytes, by relative path.
pub fn snapshot(dir: &Path) -> BTreeMap<PathBuf, Vec<u8>> {
    let mut out = BTreeMap::new();
    let mut stack = vec![dir.to_owned()];
    while let Some(d) = stack.pop() {
        for entry in std::fs::read_dir(&d).expect("read dir") {
            let path = entry.expect("entry").path();
            if path.is_dir() {
                stack.push(path);
            } else {
                let bytes = std::fs::read(&path).expect("read file");
                out.insert(path.strip_prefix(dir).expect("under dir").to_owned(), bytes);
            }
        }
    }
    out
}

/// The names in `dir`, sorted (none when it cannot be read).
pub fn listing(dir: &Path) -> Vec<String> {
    let mut names: Vec<String> = std::fs::read_dir(dir)
        .map(|d| {
            d.filter_map(Result::ok)
                .map(|e| e.file_name().to_string_lossy().into_owned())
                .collect()
        })
        .unwrap_or_default();
    names.sort();
    names
}

/// stdout and stderr as text.
pub fn text(output: &Output) -> (String, String) {
    (
        String::from_utf8_lossy(&output.stdout).into_owned(),
        String::from_utf8_lossy(&output.stderr).into_owned(),
    )
}
