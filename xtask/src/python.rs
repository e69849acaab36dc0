//! CPython 3.13 for NeMo Gym (which needs Python >= 3.13.14): Debian 12 has no such package, so it
//! is built from the Debian source package of a newer release (trixie / sid), fetched with a
//! private apt configuration that leaves the system's sources untouched, and installed into the
//! cache folder. Built once; a build that did not finish is discarded and redone.

use std::{
    path::{Path, PathBuf},
    process::Command,
};

use anyhow::{Context, Result, bail};

use crate::{cache::cache_dir, run};

const MINIMUM: (u32, u32, u32) = (3, 13, 14);

fn version_of(text: &str) -> Option<(u32, u32, u32)> {
    let v = text.split('-').next()?;
    let mut parts = v.split('.').map(|p| p.parse::<u32>().ok());
    Some((parts.next()??, parts.next()??, parts.next()??))
}

/// The prefix of a built CPython >= 3.13.14 (`<prefix>/bin/python3.13`).
pub(crate) fn cpython313() -> Result<PathBuf> {
    let prefix = cache_dir()?.join("cpython-3.13");
    let done = prefix.join(".hr-complete");
    if done.is_file() {
        eprintln!("python: reusing {}", prefix.display());
        return Ok(prefix);
    }
    if prefix.exists() {
        std::fs::remove_dir_all(&prefix)?;
    }
    let work = cache_dir()?.join("cpython-build");
    if work.exists() {
        std::fs::remove_dir_all(&work)?;
    }
    let apt = work.join("apt");
    std::fs::create_dir_all(apt.join("lists/partial"))?;
    std::fs::create_dir_all(apt.join("cache/archives/partial"))?;
    std::fs::write(
        apt.join("sources.list"),
        "deb-src http://deb.debian.org/debian trixie main\n\
         deb-src http://deb.debian.org/debian trixie-updates main\n\
         deb-src http://deb.debian.org/debian sid main\n",
    )?;
    let apt_opts = |cmd: &mut Command| {
        cmd.arg("-o").arg(format!(
            "Dir::Etc::SourceList={}",
            apt.join("sources.list").display()
        ));
        cmd.args(["-o", "Dir::Etc::SourceParts=/dev/null"]);
        cmd.arg("-o")
            .arg(format!("Dir::State::Lists={}", apt.join("lists").display()));
        cmd.arg("-o")
            .arg(format!("Dir::Cache={}", apt.join("cache").display()));
    };
    let mut update = Command::new("apt-get");
    apt_opts(&mut update);
    update.args(["-q", "update"]);
    run(update)?;
    // Every source version of python3.13 on offer, newest first, at least 3.13.14.
    let mut showsrc = Command::new("apt-cache");
    apt_opts(&mut showsrc);
    let listing = showsrc
        .args(["showsrc", "python3.13"])
        .output()
        .context("apt-cache showsrc")?;
    let mut versions: Vec<String> = String::from_utf8_lossy(&listing.stdout)
        .lines()
        .filter_map(|l| l.strip_prefix("Version: "))
        .map(str::to_owned)
        .filter(|v| version_of(v).is_some_and(|t| t >= MINIMUM))
        .collect();
    versions.sort_by_key(|v| std::cmp::Reverse(version_of(v)));
    versions.dedup();
    let src = work.join("src");
    std::fs::create_dir_all(&src)?;
    let mut fetched = None;
    for v in &versions {
        let mut get = Command::new("apt-get");
        apt_opts(&mut get);
        get.args(["-q", "source", "--download-only"])
            .arg(format!("python3.13={v}"))
            .current_dir(&src);
        eprintln!("python: fetching the python3.13 {v} source package");
        if get.status().is_ok_and(|s| s.success()) {
            fetched = Some(v.clone());
            break;
        }
    }
    let Some(version) = fetched else {
        bail!("no python3.13 source package >= 3.13.14 could be downloaded (offered: {versions:?})")
    };
    let orig = std::fs::read_dir(&src)?
        .filter_map(|e| e.ok().map(|e| e.path()))
        .find(|p| {
            p.file_name()
                .is_some_and(|n| n.to_string_lossy().ends_with(".orig.tar.xz"))
        })
        .context("no .orig.tar.xz in the source package")?;
    let mut untar = Command::new("tar");
    untar.arg("xJf").arg(&orig).current_dir(&src);
    run(untar)?;
    let tree: PathBuf = std::fs::read_dir(&src)?
        .filter_map(|e| e.ok().map(|e| e.path()))
        .find(|p| {
            p.is_dir()
                && p.file_name()
                    .is_some_and(|n| n.to_string_lossy().starts_with("Python-3.13"))
        })
        .context("no Python-3.13 folder in the tarball")?;
    eprintln!("python: building CPython {version} (about 10 minutes on 2 cores)");
    let mut configure = Command::new("./configure");
    configure
        .arg(format!("--prefix={}", prefix.display()))
        .arg("--with-ensurepip=install")
        .current_dir(&tree);
    configure.stdout(std::process::Stdio::null());
    run(configure)?;
    let jobs = std::thread::available_parallelism()
        .map_or(2, |n| n.get())
        .to_string();
    let mut make = Command::new("make");
    make.args(["-j", &jobs])
        .current_dir(&tree)
        .stdout(std::process::Stdio::null());
    run(make)?;
    let mut install = Command::new("make");
    install
        .arg("install")
        .current_dir(&tree)
        .stdout(std::process::Stdio::null());
    run(install)?;
    check_modules(&prefix)?;
    std::fs::write(&done, &version)?;
    std::fs::remove_dir_all(&work)?;
    Ok(prefix)
}

fn check_modules(prefix: &Path) -> Result<()> {
    let mut check = Command::new(prefix.join("bin/python3.13"));
    check.args(["-c", "import ssl, sqlite3, ctypes, lzma, uuid, venv"]);
    run(check).context("the built CPython lacks a standard module")
}
