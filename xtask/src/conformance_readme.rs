//! `cargo xtask conformance readme`: the JAIF recipe of the cluster guide ([`RECIPE_FILE`]; it
//! lived in the README, hence the name), run as the guide writes it. In a scratch checkout
//! (`target/release/hessian-recipes` the binary CI built, the `local` profile's templates
//! rendered beside where the JAIF ones live), a devmaster is started with the guide's relative
//! `--state-dir`, and every line of the recipe's block runs from the checkout with
//! `HR_PROFILE=local`, relative paths as written, and only what the cluster alone has replaced
//! ([`SUBSTITUTIONS`], the model). The det lines the commands print are run as printed; the gated
//! main run must complete and `evaluate` must adopt its checkpoints.

use std::path::Path;
use std::process::{Command, Stdio};
use std::time::{Duration, Instant};

use anyhow::{Context, Result, bail, ensure};

use crate::cache::venv;
use crate::conformance::{DETERMINED, Devmaster, spawn_devmaster, target_dir, tiny_model};

/// The guide that holds the recipe, the cluster build and the devmaster line, relative to the
/// workspace root.
const RECIPE_FILE: &str = "docs/cluster.md";
/// The paragraph whose `sh` block is the recipe.
const RECIPE: &str = "**Qualifying a backend on the JAIF cluster with a GPU.**";
/// How the guide starts the local master.
const DEVMASTER: &str =
    "hessian-recipes devmaster --listen 127.0.0.1:8080 --state-dir runs/devmaster";
/// The recipe's model folder on the shared mount.
const MODEL: &str = "/pfss/mlde/workspaces/mlde_wsp_JAIF/models/MODEL";
/// What only the cluster has: a GPU.
const SUBSTITUTIONS: [(&str, &str); 2] = [
    ("--device cuda", "--device cpu"),
    ("--slots 1", "--slots 0"),
];
/// The binary the recipe names.
const BINARY: &str = "target/release/hessian-recipes";
/// The steps whose checkpoints the main plan's evaluation adopts.
const ADOPTED: [u64; 3] = [64, 128, 256];

/// The logical lines of the `sh` block after `marker` in `readme` (the text of [`RECIPE_FILE`]):
/// `\`-continuations joined, runs of blanks made one, trailing `# ...` comments kept only on lines
/// of their own.
pub(crate) fn recipe_lines(readme: &str, marker: &str) -> Result<Vec<String>> {
    let after = readme
        .split_once(marker)
        .with_context(|| format!("{RECIPE_FILE} has no paragraph {marker:?}"))?
        .1;
    let block = after
        .split_once("```sh\n")
        .and_then(|(_, rest)| rest.split_once("\n```"))
        .context("the recipe's ```sh block")?
        .0;
    let mut lines = Vec::new();
    let mut current = String::new();
    for raw in block.lines() {
        let (part, continued) = match raw.trim_end().strip_suffix('\\') {
            Some(part) => (part, true),
            None => (raw, false),
        };
        current.push(' ');
        current.push_str(part);
        if !continued {
            let line = current.split_whitespace().collect::<Vec<_>>().join(" ");
            if !line.is_empty() {
                lines.push(line);
            }
            current.clear();
        }
    }
    Ok(lines)
}

/// `line` with the substitutions and the model folder replaced.
fn rehearsed(line: &str, model: &Path) -> String {
    let mut line = line.replace(MODEL, &model.display().to_string());
    for (from, to) in SUBSTITUTIONS {
        line = line.replace(from, to);
    }
    line
}

/// A `bash` running `line` in `checkout` with the rehearsal's environment.
fn shell(checkout: &Path, env: &[(&str, String)], line: &str) -> Command {
    let mut cmd = Command::new("bash");
    cmd.args(["-euo", "pipefail", "-c", line])
        .current_dir(checkout)
        .env_remove("DET_USER_TOKEN")
        .envs(env.iter().map(|(k, v)| (*k, v.as_str())));
    cmd
}

/// Runs `line` (after the block's variable assignments `vars`) and returns its stdout; fails
/// naming the line and the end of its output when it exits non-zero.
fn run_line(checkout: &Path, env: &[(&str, String)], vars: &str, line: &str) -> Result<String> {
    println!("$ {line}");
    let out = shell(checkout, env, &format!("{vars}{line}"))
        .stdin(Stdio::null())
        .output()
        .with_context(|| format!("running {line}"))?;
    let (stdout, stderr) = (
        String::from_utf8_lossy(&out.stdout).into_owned(),
        String::from_utf8_lossy(&out.stderr),
    );
    if !out.status.success() {
        let tail: Vec<&str> = stderr.lines().rev().take(30).collect();
        bail!(
            "{line}: {}\n{stdout}{}",
            out.status,
            tail.into_iter().rev().collect::<Vec<_>>().join("\n")
        );
    }
    print!("{stdout}");
    Ok(stdout)
}

/// Polls `det ... describe ID --json` until `done` says so (the state it reached) or `limit`
/// passes; the state is read before the condition, so a finished task is never missed.
fn wait_for(
    checkout: &Path,
    env: &[(&str, String)],
    describe: &str,
    limit: Duration,
    done: impl Fn(&serde_json::Value) -> Option<String>,
) -> Result<String> {
    let started = Instant::now();
    loop {
        let out = shell(checkout, env, describe).output()?;
        if out.status.success() {
            let value: serde_json::Value = serde_json::from_slice(&out.stdout)
                .with_context(|| format!("{describe}: not JSON"))?;
            if let Some(state) = done(&value) {
                return Ok(state);
            }
        }
        if started.elapsed() > limit {
            bail!("{describe}: not ended after {} s", limit.as_secs());
        }
        std::thread::sleep(Duration::from_millis(500));
    }
}

/// The cluster guide's JAIF recipe on a local devmaster; returns (passed, failed).
pub(crate) fn readme(root: &Path) -> Result<(u64, u64)> {
    let det_venv = venv("venv-determined-0.35.0", &[DETERMINED])?;
    let bin = crate::debug_binaries(root)?;
    let readme = std::fs::read_to_string(root.join(RECIPE_FILE))?;
    let lines = recipe_lines(&readme, RECIPE)?;
    ensure!(
        readme.contains(&format!("`{DEVMASTER}`")),
        "{RECIPE_FILE} no longer starts the devmaster as `{DEVMASTER}`; update this case"
    );
    let work = target_dir(root)
        .join("conformance")
        .join(format!("readme-{}", std::process::id()));
    let checkout = work.join("checkout");
    std::fs::create_dir_all(checkout.join("target/release"))?;
    std::os::unix::fs::symlink(bin.join("hessian-recipes"), checkout.join(BINARY))?;
    let model = tiny_model(root);
    let mut passed = 0;
    let failed = match rehearse(&det_venv, &checkout, &model, &lines, &mut passed) {
        Ok(()) => 0,
        Err(e) => {
            println!("FAIL the JAIF recipe of {RECIPE_FILE}: {e:#}");
            1
        }
    };
    if failed == 0 {
        std::fs::remove_dir_all(&work)?;
    } else {
        eprintln!("conformance readme: kept {} for inspection", work.display());
    }
    Ok((passed, failed))
}

/// Runs the recipe's `lines` in `checkout`, counting the checks that pass in `passed`; stops at
/// the first failure.
fn rehearse(
    det_venv: &Path,
    checkout: &Path,
    model: &Path,
    lines: &[String],
    passed: &mut u64,
) -> Result<()> {
    let mut ok = |what: &str| {
        println!("ok   {what}");
        *passed += 1;
    };
    // The guide's devmaster line, from the checkout, on a free port.
    let mut devmaster = Command::new(checkout.join(BINARY));
    devmaster
        .args(DEVMASTER.replace(":8080", ":0").split(' ').skip(1))
        .current_dir(checkout);
    let (_guard, url): (Devmaster, String) = spawn_devmaster(devmaster)?;
    let path = std::env::var("PATH").unwrap_or_default();
    let env = [
        ("DET_MASTER", url.clone()),
        ("DET_USER", "determined".to_owned()),
        ("DET_PASS", String::new()),
        ("HR_PROFILE", "local".to_owned()),
        ("PATH", format!("{}:{path}", det_venv.join("bin").display())),
    ];
    run_line(
        checkout,
        &env,
        "",
        &format!("{BINARY} cluster render --profile local --output cluster/determined"),
    )?;

    let mut vars = String::new();
    let mut prepared: Vec<String> = Vec::new();
    let mut create = None;
    let mut experiment: Option<String> = None;
    for line in lines {
        let line = rehearsed(line, model);
        if line.starts_with('#')
            || line.starts_with("det shell start ")
            || line.starts_with("cd ")
            || line.starts_with("export ")
        {
            // In the shell, in the checkout, signed in: the rehearsal's environment.
            continue;
        }
        if let Some(args) = line.strip_prefix("cargo xtask qualify nemo ") {
            println!("$ {line}");
            let args: Vec<String> = args
                .replace("$DET_MASTER", &url)
                .split(' ')
                .map(str::to_owned)
                .collect();
            let binary = checkout.join(BINARY);
            let (_, next) = crate::qualify_backend::qualify_backend(
                checkout,
                "nemo",
                &args,
                crate::Binary::At(&binary),
            )?;
            prepared = next
                .iter()
                .map(|l| l.trim().to_owned())
                .filter(|l| l.starts_with(BINARY))
                .collect();
            ok("cargo xtask qualify nemo --prepare wrote the plans and printed the next two lines");
            continue;
        }
        if let Some(value) = line.strip_prefix("B=") {
            vars.push_str(&format!("B={value}; "));
            continue;
        }
        if let Some(i) = prepared
            .iter()
            .position(|p| *p == line.replace("$B", BINARY).replace("$DET_MASTER", &url))
        {
            prepared.remove(i);
        }
        let line = match (&experiment, line.contains("EXP_ID")) {
            (Some(id), true) => line.replace("EXP_ID", id.as_str()),
            (None, true) => bail!("{line}: no experiment was created before it"),
            _ => line,
        };
        let stdout = run_line(checkout, &env, &vars, &line)?;
        ok(&line);
        if line.contains(" cluster command ") {
            // "run the det line the first prints and wait for that command to end"
            run_printed_command(checkout, &env, &line, &stdout)?;
            ok("the det command it printed ran the native qualification to exit 0");
        }
        if let Some(line) = stdout
            .lines()
            .find_map(|l| l.split_once(": det experiment create"))
        {
            create = Some(format!("det experiment create{}", line.1));
        }
        if line.contains(" cluster preflight ") {
            let create_line = create.take().context("preflight before managed prepare")?;
            experiment = Some(run_main(checkout, &env, &create_line)?);
            ok("the det line managed prepare printed ran the gated main run to COMPLETED");
        }
        if line.contains(" evaluate ") {
            check_adopted(checkout, &line)?;
            ok("evaluate adopted the main run's checkpoints 64, 128 and 256");
        }
    }
    ensure!(
        prepared.is_empty(),
        "the recipe's block in {RECIPE_FILE} lacks what --prepare printed: {prepared:?}"
    );
    ensure!(
        experiment.is_some(),
        "the recipe never submitted the main run"
    );
    Ok(())
}

/// Runs the `det command run` line `line` printed (`stdout`) and waits for the command to end;
/// fails unless it exited 0.
fn run_printed_command(
    checkout: &Path,
    env: &[(&str, String)],
    line: &str,
    stdout: &str,
) -> Result<()> {
    let det_line = stdout
        .lines()
        .find(|l| l.starts_with("det command run "))
        .with_context(|| format!("{line} printed no det line"))?;
    let id = run_line(checkout, env, "", det_line)?
        .lines()
        .last()
        .map(str::trim)
        .unwrap_or_default()
        .to_owned();
    let status = wait_for(
        checkout,
        env,
        &format!("det command describe {id} --json"),
        Duration::from_secs(1800),
        |v| (v["state"] == "TERMINATED").then(|| v["exitStatus"].to_string()),
    )?;
    ensure!(
        status == "\"0\"",
        "the native qualification command ended with {status}; see {}",
        checkout.join("runs").display()
    );
    Ok(())
}

/// Runs `det experiment create` as `managed prepare` printed it and waits for the experiment to
/// end; returns its id, or fails with the state and the trial log's tail unless it COMPLETED.
fn run_main(checkout: &Path, env: &[(&str, String)], create_line: &str) -> Result<String> {
    let out = run_line(checkout, env, "", create_line)?;
    let id = out
        .split("Created experiment ")
        .nth(1)
        .and_then(|rest| rest.split_whitespace().next())
        .filter(|id| id.parse::<u64>().is_ok())
        .context("det experiment create printed no id")?
        .to_owned();
    let state = wait_for(
        checkout,
        env,
        &format!("det experiment describe {id} --json"),
        Duration::from_secs(3600),
        |v| {
            let state = v[0]["experiment"]["state"].as_str()?;
            ["STATE_COMPLETED", "STATE_CANCELED", "STATE_ERROR"]
                .contains(&state)
                .then(|| state.to_owned())
        },
    )?;
    if state != "STATE_COMPLETED" {
        // The devmaster keeps each allocation's log as `logs/<experiment>.<allocation>.log`.
        let log: String = std::fs::read_dir(checkout.join("runs/devmaster/logs"))?
            .filter_map(|e| e.ok().map(|e| e.path()))
            .filter(|p| {
                p.file_name()
                    .is_some_and(|n| n.to_string_lossy().starts_with(&format!("{id}.")))
            })
            .filter_map(|p| std::fs::read_to_string(p).ok())
            .collect();
        let tail: Vec<&str> = log.lines().rev().take(20).collect();
        bail!(
            "the main run ended {state}; its trial log ends:\n{}",
            tail.into_iter().rev().collect::<Vec<_>>().join("\n")
        );
    }
    Ok(id)
}

/// The report `evaluate` (the recipe's `line`) wrote adopted exactly [`ADOPTED`].
fn check_adopted(checkout: &Path, line: &str) -> Result<()> {
    let out = line
        .split_once("--output ")
        .map(|(_, rest)| rest.split(' ').next().unwrap_or(rest))
        .context("evaluate without --output")?;
    let report: serde_json::Value = serde_json::from_slice(&std::fs::read(
        checkout.join(out).join("payload/report.json"),
    )?)?;
    let adopted: Vec<u64> = report["checkpoints"]
        .as_array()
        .into_iter()
        .flatten()
        .filter_map(|c| c["step"].as_u64())
        .collect();
    ensure!(
        adopted == ADOPTED,
        "evaluate adopted {adopted:?}, not {ADOPTED:?}"
    );
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_recipe_block_reads_as_logical_lines() -> Result<()> {
        let text =
            "x\n**P.** words\n\n```sh\na \\\n  b   c # note\n# comment\n\nd\n```\n```sh\ne\n```";
        assert_eq!(
            recipe_lines(text, "**P.**")?,
            ["a b c # note", "# comment", "d"]
        );
        assert!(recipe_lines(text, "**Q.**").is_err());
        assert_eq!(
            rehearsed(
                "q --device cuda --slots 1 --model /pfss/mlde/workspaces/mlde_wsp_JAIF/models/MODEL",
                Path::new("/t")
            ),
            "q --device cpu --slots 0 --model /t"
        );
        Ok(())
    }

    /// The cluster guide's route to a cluster binary: its toolchain is the workspace's, and its
    /// build line names this package, a feature it has and a `CUDARC_CUDA_VERSION` the locked
    /// cudarc accepts (its build script's list).
    #[test]
    fn the_readmes_cluster_build_line_names_what_cargo_and_cudarc_accept() -> Result<()> {
        let root = crate::project_root();
        let readme = std::fs::read_to_string(root.join(RECIPE_FILE))?;
        let lines = recipe_lines(&readme, "**Building on the cluster.**")?;
        let toolchain = lines
            .iter()
            .find_map(|l| l.split_once("--default-toolchain "))
            .map(|(_, rest)| rest.split(' ').next().unwrap_or(rest))
            .context("the rustup line")?;
        let manifest = std::fs::read_to_string(root.join("Cargo.toml"))?;
        let rust_version = manifest
            .lines()
            .find_map(|l| l.strip_prefix("rust-version = "))
            .map(|v| v.trim_matches('"'))
            .context("rust-version")?;
        assert!(
            toolchain.starts_with(rust_version),
            "{toolchain} vs {rust_version}"
        );
        let build = lines
            .iter()
            .find(|l| l.contains("cargo build"))
            .context("the build line")?;
        let words: Vec<&str> = build.split(' ').collect();
        let version = words[0]
            .strip_prefix("CUDARC_CUDA_VERSION=")
            .context("CUDARC_CUDA_VERSION first")?;
        assert_eq!(
            words[1..],
            [
                "cargo",
                "build",
                "--release",
                "--locked",
                "-p",
                "hessian-recipes",
                "--features",
                "cuda"
            ]
        );
        let metadata = Command::new(env!("CARGO"))
            .args(["metadata", "--format-version", "1", "--locked", "--offline"])
            .arg("--filter-platform")
            .arg(format!("{}-unknown-linux-gnu", std::env::consts::ARCH))
            .current_dir(&root)
            .output()?;
        ensure!(metadata.status.success(), "cargo metadata failed");
        let metadata: serde_json::Value = serde_json::from_slice(&metadata.stdout)?;
        let package = |name: &str| {
            metadata["packages"]
                .as_array()
                .into_iter()
                .flatten()
                .find(|p| p["name"] == name)
                .cloned()
                .with_context(|| format!("no package {name}"))
        };
        assert!(package("hessian-recipes")?["features"]["cuda"].is_array());
        let cudarc = package("cudarc")?;
        let build_rs =
            Path::new(cudarc["manifest_path"].as_str().context("path")?).with_file_name("build.rs");
        let script = std::fs::read_to_string(&build_rs)?;
        ensure!(
            version.len() == 5,
            "CUDARC_CUDA_VERSION={version}: five digits"
        );
        let (major, minor) = (&version[..2], &version[3..4]);
        assert!(
            script.contains(&format!(
                "(({major}, {minor}), cfg!(feature = \"cuda-{version}\"))"
            )),
            "cudarc ({}) does not list CUDARC_CUDA_VERSION={version}",
            build_rs.display()
        );
        Ok(())
    }

    #[test]
    fn the_readme_holds_the_recipe_this_case_runs() -> Result<()> {
        let readme = std::fs::read_to_string(crate::project_root().join(RECIPE_FILE))?;
        let lines = recipe_lines(&readme, RECIPE)?;
        for needle in [
            "cargo xtask qualify nemo --prepare",
            "$B cluster command",
            "$B qualify managed",
            "$B managed prepare",
            "$B cluster preflight",
            "$B evaluate --resume EXP_ID",
        ] {
            assert!(
                lines.iter().any(|l| l.starts_with(needle)),
                "{needle}: {lines:#?}"
            );
        }
        Ok(())
    }
}
