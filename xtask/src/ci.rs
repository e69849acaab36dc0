//! `cargo xtask ci`: the single gate, cheapest checks first. Format, tidy, clippy with warnings
//! denied (the `cuda` and `vulkan` backends included), one debug build of every binary and test
//! with [`crate::CI_FEATURES`] (the CUDA backend compiled and linked offline, the Vulkan one
//! too), the whole test suite (the end-to-end tests drive that binary), the conformance of the
//! devmaster with the real `determined==0.35.0` client and of the bridges with the real
//! environment servers, the CPU qualifications of that same binary (the kill soak among them),
//! and the `vulkan` phase on lavapipe ([`crate::vulkan`]). It ends with one
//! summary line, `ci: N passed, M failed`, and fails when no test ran.

use std::{
    io::{BufRead, BufReader},
    path::Path,
    process::Stdio,
    time::Instant,
};

use anyhow::{Context, Result, bail};

use crate::{cargo, describe};

/// Prints how long the phase that just ended took (stderr, `ci: phase NAME: N s`), so a slow
/// CI run says where its time went.
struct Phases {
    last: Instant,
}

impl Phases {
    fn done(&mut self, name: &str) {
        eprintln!(
            "ci: phase {name}: {:.0} s",
            self.last.elapsed().as_secs_f64()
        );
        self.last = Instant::now();
    }
}

/// Below this much free space where `target/` lives, CI says so before it starts: a cold run
/// writes about 3.5 GB of build output there (CI builds without incremental caches, `.ci/run`) and
/// about 3.5 GB of Python environments under the cache folder, and a full disk otherwise shows
/// only as a linker's bus error half an hour in.
const LOW_DISK_KIB: u64 = 8 << 20;

/// The free space (KiB) of the disk that holds `path`, from POSIX `df -Pk`; `None` if it cannot
/// be read.
fn free_kib(path: &Path) -> Option<u64> {
    let out = std::process::Command::new("df")
        .arg("-Pk")
        .arg(path)
        .output()
        .ok()?;
    let text = String::from_utf8(out.stdout).ok()?;
    text.lines().nth(1)?.split_whitespace().nth(3)?.parse().ok()
}

/// `cargo test` over CI's selection and features, the same as its build, so nothing is compiled
/// again (a suite narrows it with `--test NAME`).
pub(crate) fn tests() -> std::process::Command {
    let mut test = cargo();
    test.args([
        "test",
        "--workspace",
        "--locked",
        "--features",
        crate::CI_FEATURES,
    ]);
    test
}

pub(crate) fn run_ci(root: &Path) -> Result<()> {
    let started = Instant::now();
    let mut phases = Phases { last: started };
    let target = crate::conformance::target_dir(root);
    let probe = if target.exists() {
        target.as_path()
    } else {
        root
    };
    if let Some(free) = free_kib(probe).filter(|free| *free < LOW_DISK_KIB) {
        eprintln!(
            "ci: warning: {:.1} GiB free on the disk that holds {}; a cold run needs about 7 GiB \
             (build output and the Python environments), and a full disk fails the build",
            crate::gib(free),
            target.display()
        );
    }
    let mut fmt = cargo();
    fmt.args(["fmt", "--all", "--", "--check"]);
    crate::run(fmt)?;
    crate::tidy::run(root)?;
    phases.done("fmt+tidy");
    let mut clippy = cargo();
    clippy.args([
        "clippy",
        "--workspace",
        "--all-targets",
        "--locked",
        "--features",
        crate::CI_FEATURES,
        "--",
        "-D",
        "warnings",
    ]);
    crate::run(clippy)?;
    phases.done("clippy");
    crate::debug_binaries(root)?;
    phases.done("build");
    let (mut passed, mut failed) = run_tests(tests())?;
    phases.done("test");
    for (name, suite) in crate::SUITES {
        if failed == 0 {
            let (p, f) = suite(root)?;
            println!("conformance {name}: {p} passed, {f} failed");
            phases.done(&format!("conformance {name}"));
            passed += p;
            failed += f;
        }
    }
    if failed == 0 {
        // The managed CPU lifecycle, cold, against the devmaster (the debug build above, whose
        // CUDA backend was compiled and linked offline; there is no GPU, so it runs on the CPU).
        let out = root
            .join("target")
            .join(format!("qualify-cpu-ci-{}", std::process::id()));
        let rel = out.strip_prefix(root).unwrap_or(&out).display().to_string();
        let verdict =
            crate::qualify_cpu_with(root, &["--output".to_owned(), rel], crate::Binary::Ci);
        phases.done("qualify cpu");
        match verdict {
            Ok(()) => {
                println!("qualify cpu: 1 passed, 0 failed");
                passed += 1;
                if out.exists() {
                    std::fs::remove_dir_all(&out)?;
                }
            }
            Err(e) => {
                println!(
                    "qualify cpu: 0 passed, 1 failed ({e}); see {}",
                    out.display()
                );
                failed += 1;
            }
        }
    }
    if failed == 0 {
        let (p, f) = qualify_native_with_controls(root)?;
        phases.done("qualify native with controls");
        passed += p;
        failed += f;
    }
    if failed == 0 {
        let bin = crate::debug_binaries(root)?.join("hessian-recipes");
        let (p, f) = crate::vulkan::phase(root, &bin)?;
        phases.done("vulkan");
        passed += p;
        failed += f;
    }
    if failed == 0 {
        // The kill soak: 20 seeded SIGKILLs of the worker and one devmaster crash; the run must
        // end equal to the uninterrupted one with no acknowledged checkpoint lost.
        let out = format!("target/qualify-soak-ci-{}", std::process::id());
        let verdict = crate::qualify_soak(
            root,
            &["--output".to_owned(), out.clone()],
            crate::Binary::Ci,
        );
        phases.done("qualify soak");
        match verdict {
            Ok(()) => {
                println!("qualify soak: 1 passed, 0 failed");
                passed += 1;
                std::fs::remove_dir_all(root.join(&out))?;
            }
            Err(e) => {
                println!("qualify soak: 0 passed, 1 failed ({e}); see {out}");
                failed += 1;
            }
        }
    }
    // Each backend's qualification against its real server, with the same binary.
    for backend in ["openenv", "nemo"] {
        if failed > 0 {
            break;
        }
        let out = format!("target/qualify-{backend}-ci-{}", std::process::id());
        let verdict = crate::qualify_backend::qualify_backend(
            root,
            backend,
            &["--output".to_owned(), out.clone()],
            crate::Binary::Ci,
        );
        phases.done(&format!("qualify {backend}"));
        match verdict {
            Ok((dir, _)) => {
                println!("qualify {backend}: 1 passed, 0 failed");
                passed += 1;
                std::fs::remove_dir_all(dir)?;
            }
            Err(e) => {
                println!("qualify {backend}: 0 passed, 1 failed ({e}); see {out}");
                failed += 1;
            }
        }
    }
    println!("ci: {passed} passed, {failed} failed");
    eprintln!("ci: done in {:.0} s", started.elapsed().as_secs_f64());
    if failed > 0 {
        bail!("{failed} test(s) failed");
    }
    if passed == 0 {
        bail!("no test ran");
    }
    Ok(())
}

pub(crate) use run_ci as run;

/// Runs `cargo test`, echoing its output, and sums the `test result:` lines.
fn run_tests(mut cmd: std::process::Command) -> Result<(u64, u64)> {
    eprintln!("$ {}", describe(&cmd));
    let mut child = cmd
        .stdout(Stdio::piped())
        .spawn()
        .context("spawning cargo test")?;
    let stdout = child.stdout.take().context("cargo test stdout")?;
    let (mut passed, mut failed) = (0, 0);
    for line in BufReader::new(stdout).lines() {
        let line = line?;
        println!("{line}");
        if let Some(rest) = line.strip_prefix("test result: ") {
            passed += count(rest, " passed");
            failed += count(rest, " failed");
        }
    }
    let status = child.wait()?;
    if !status.success() && failed == 0 {
        bail!("`{}` failed ({status})", describe(&cmd));
    }
    Ok((passed, failed))
}

/// The number before `label` in `ok. 3 passed; 0 failed; ...`.
fn count(summary: &str, label: &str) -> u64 {
    summary
        .split(';')
        .find_map(|part| {
            part.trim()
                .trim_start_matches("ok. ")
                .trim_start_matches("FAILED. ")
                .strip_suffix(label.trim_start())
        })
        .and_then(|n| n.trim().parse().ok())
        .unwrap_or(0)
}

/// The `drop-optimizer` control must be refused when the checkpoint is loaded (a resume never
/// restarts AdamW silently): `qualify native` fails naming the tensor without optimizer state.
fn drop_optimizer_is_refused_at_load(root: &Path, out: &Path) -> Result<()> {
    let rel = out.strip_prefix(root).unwrap_or(out).display().to_string();
    let mut cmd = std::process::Command::new(crate::Binary::Ci.path(root, false)?);
    cmd.current_dir(root).args([
        "qualify",
        "native",
        "--plan",
        "plans/native-tiny.json",
        "--output",
        &rel,
        "--control",
        "drop-optimizer",
    ]);
    eprintln!("$ {}", describe(&cmd));
    let done = cmd.output().context("running qualify native")?;
    let stderr = String::from_utf8_lossy(&done.stderr);
    if done.status.success() || !stderr.contains("has no optimizer state at step 2") {
        bail!(
            "expected a refusal at load naming the missing optimizer state, got {}:\n{stderr}",
            done.status
        );
    }
    Ok(())
}

/// The native resume qualification on the tiny model (must be equal), then each negative
/// control (must diverge first at step 3 in the field it breaks, or, for `drop-optimizer`, be
/// refused at load), with the binary built above.
fn qualify_native_with_controls(root: &Path) -> Result<(u64, u64)> {
    let (mut passed, mut failed) = (0, 0);
    let cases = [
        (None, ""),
        (Some("skip-rng"), "tokens_sha256"),
        (Some("drop-optimizer"), ""),
        (Some("cursor-off-by-one"), "task_ids"),
    ];
    for (control, field) in cases {
        let name = control.unwrap_or("equal");
        let out = root
            .join("target")
            .join(format!("qualify-native-ci-{}-{name}", std::process::id()));
        let rel = out.strip_prefix(root).unwrap_or(&out).display().to_string();
        let mut args = vec!["--output".to_owned(), rel];
        if let Some(c) = control {
            args.extend(["--control".to_owned(), c.to_owned()]);
        }
        let verdict =
            if control == Some("drop-optimizer") {
                drop_optimizer_is_refused_at_load(root, &out)
            } else {
                crate::qualify_native(root, &args, crate::Binary::Ci).and_then(|(proof, equal)| {
            let text = std::fs::read_to_string(&proof)?;
            let json: serde_json::Value = serde_json::from_str(&text)?;
            let divergence = &json["first_divergence"];
            match control {
                None if equal => Ok(()),
                None => bail!("not equal: {divergence}"),
                Some(_) if !equal && divergence["step"] == 3 && divergence["field"] == field => {
                    Ok(())
                }
                Some(_) => {
                    bail!("expected the first divergence at step 3 in `{field}`, got {divergence}")
                }
            }
            })
            };
        match verdict {
            Ok(()) => {
                println!("qualify native {name}: 1 passed, 0 failed");
                passed += 1;
                if out.exists() {
                    std::fs::remove_dir_all(&out)?;
                }
            }
            Err(e) => {
                println!(
                    "qualify native {name}: 0 passed, 1 failed ({e}); see {}",
                    out.display()
                );
                failed += 1;
            }
        }
    }
    Ok((passed, failed))
}
