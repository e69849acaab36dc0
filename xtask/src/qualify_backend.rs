//! `cargo xtask qualify openenv|nemo`: a backend's four-step qualification against its real
//! server (the shipped example, or any server folder and task rows given), native then managed,
//! with the release binary. `--prepare` also makes what the cluster templates name: the
//! checkout's service venv link and the qualification and main plans of the same family.

use std::path::{Path, PathBuf};
use std::process::Command;
use std::time::Instant;

use anyhow::{Context, Result, bail};

use crate::conformance::{RealServers, training_plan};
use crate::{Binary, describe, timestamped};

/// What `qualify openenv|nemo` was asked for.
#[derive(Debug, Default)]
struct Args {
    output: Option<String>,
    model: Option<String>,
    master: Option<String>,
    device: Option<String>,
    dtype: Option<String>,
    /// The plan's `parallel.shards` (and as many prompt groups a step), for a main run on that
    /// many GPUs or a divisor of it.
    shards: Option<u64>,
    prepare: bool,
    /// The NeMo Gym resources server folder, or the folder holding the OpenEnv environment.
    server: Option<PathBuf>,
    /// The OpenEnv environment's ASGI app (`MODULE:ATTRIBUTE`).
    app: Option<String>,
    /// Task rows (JSON lines) for TRAIN, DEV and HELD-OUT.
    tasks: [Option<PathBuf>; 3],
}

const USAGE: &str = "use --output runs/NAME, --model DIR, --master URL, --device cpu|cuda, \
    --dtype f32|f16|bf16, --shards S, --server DIR, --app MODULE:APP (openenv), --tasks FILE, --dev-tasks \
    FILE, --held-out-tasks FILE, --prepare";

fn parse(backend: &str, args: &[String]) -> Result<Args> {
    let mut a = Args::default();
    let mut rest = args.iter();
    while let Some(flag) = rest.next() {
        if flag == "--prepare" {
            a.prepare = true;
            continue;
        }
        let value = rest
            .next()
            .cloned()
            .with_context(|| format!("qualify {backend}: {flag} needs a value"))?;
        match flag.as_str() {
            "--output" => a.output = Some(value),
            "--model" => a.model = Some(value),
            "--master" => a.master = Some(value),
            "--device" => a.device = Some(value),
            "--dtype" => a.dtype = Some(value),
            "--shards" => {
                a.shards = Some(
                    value
                        .parse()
                        .ok()
                        .filter(|s: &u64| s.is_power_of_two() && *s <= 64)
                        .with_context(|| {
                            format!(
                                "qualify {backend}: --shards {value:?}: give a power of two up to \
                                 64 (the GPUs of the main run, or a multiple of them)"
                            )
                        })?,
                )
            }
            "--server" => a.server = Some(std::path::absolute(value)?),
            "--app" if backend == "openenv" => a.app = Some(value),
            "--tasks" => a.tasks[0] = Some(std::path::absolute(value)?),
            "--dev-tasks" => a.tasks[1] = Some(std::path::absolute(value)?),
            "--held-out-tasks" => a.tasks[2] = Some(std::path::absolute(value)?),
            other => bail!("qualify {backend}: unknown argument {other:?}: {USAGE}"),
        }
    }
    Ok(a)
}

/// JSON lines of `path` as task rows; each line must be an object.
fn read_rows(flag: &str, path: &Path) -> Result<Vec<serde_json::Value>> {
    let text = std::fs::read_to_string(path)
        .with_context(|| format!("{flag} {}: cannot be read", path.display()))?;
    let mut rows = Vec::new();
    for (i, line) in text.lines().enumerate() {
        if line.trim().is_empty() {
            continue;
        }
        match serde_json::from_str(line) {
            Ok(row @ serde_json::Value::Object(_)) => rows.push(row),
            _ => bail!(
                "{flag} {} line {}: not a JSON object",
                path.display(),
                i + 1
            ),
        }
    }
    if rows.is_empty() {
        bail!("{flag} {}: holds no rows", path.display());
    }
    Ok(rows)
}

/// Runs `qualify native` then `qualify managed` of the backend's plan in a fresh `--output`
/// (default `runs/qualify-<backend>-<time>`); `--model DIR` replaces the tiny test model,
/// `--master URL` a real master for the devmaster, `--device cuda` the CPU (a release binary is
/// then built with the `cuda` feature), `--dtype f32|f16|bf16` the plan's `model.dtype` (default
/// bf16 on `cuda`, as a GPU run of a real model holds its base, else f32), `--shards S` the
/// plan's `parallel.shards` and prompt groups a step (for a main run on S GPUs or a divisor of
/// S: the main plan is of the same family); `--server DIR`,
/// `--app` and `--tasks FILE` another server and its rows than the shipped example's. Returns
/// the output folder and, with `--prepare`, the lines it printed (what to run next).
pub(crate) fn qualify_backend(
    root: &Path,
    backend: &str,
    args: &[String],
    binary: Binary<'_>,
) -> Result<(PathBuf, Vec<String>)> {
    let Args {
        output,
        model,
        master,
        device,
        dtype,
        shards,
        prepare,
        server,
        app,
        tasks,
    } = parse(backend, args)?;
    let output =
        root.join(output.unwrap_or_else(|| timestamped(&format!("runs/qualify-{backend}"))));
    if output.exists() {
        bail!(
            "qualify {backend}: {} exists; give a fresh --output",
            output.display()
        );
    }
    let servers = RealServers::setup()?;
    let (mut environment, server_key) = match backend {
        "openenv" => (servers.openenv_environment(), "env_root"),
        "nemo" => (servers.nemo_environment(), "server_dir"),
        other => bail!("qualify: unknown backend {other:?}: use openenv or nemo"),
    };
    if let Some(server) = server {
        environment[server_key] = serde_json::json!(server);
    }
    if let Some(app) = app {
        environment["app"] = app.into();
    }
    if let Some(file) = &tasks[0] {
        environment["tasks"] = read_rows("--tasks", file)?.into();
    }
    let evaluation = evaluation_tasks(backend, &tasks, &servers)?;
    std::fs::create_dir_all(&output)?;
    let grpo = serde_json::json!({"tasks_per_step": 1, "num_generations": 4,
        "max_completion_length": 32, "max_turn_tokens": 16, "max_turns": 2});
    let dtype = dtype.unwrap_or_else(|| {
        let gpu = device.as_deref() == Some("cuda");
        (if gpu { "bf16" } else { "f32" }).to_owned()
    });
    let plan = training_plan(
        root,
        &output,
        "plan",
        &environment,
        &grpo,
        hr_plan::QUALIFICATION_STEPS,
    )?;
    let mut value: serde_json::Value = serde_json::from_slice(&std::fs::read(&plan)?)?;
    if let Some(model) = model {
        value["model"]["path"] = serde_json::json!(std::path::absolute(model)?);
    }
    if dtype != "f32" {
        value["model"]["dtype"] = dtype.into();
    }
    if let Some(shards) = shards {
        // A shard is at least one prompt group.
        value["grpo"]["tasks_per_step"] = shards.into();
        value["parallel"] = serde_json::json!({ "shards": shards });
    }
    std::fs::write(&plan, serde_json::to_vec_pretty(&value)?)?;
    let binary = binary.path(root, device.as_deref() == Some("cuda"))?;
    let proofs = hr_proof::ProofsDir::new(&output);
    if prepare {
        let venv = match backend {
            "openenv" => &servers.openenv_python,
            _ => &servers.nemo_python,
        };
        template_inputs(root, backend, &value, venv, evaluation)?;
        let next = next_steps(
            root,
            backend,
            &binary,
            &plan,
            &proofs,
            device.as_deref(),
            master.as_deref(),
        );
        for line in &next {
            println!("{line}");
        }
        return Ok((output, next));
    }
    // The binary's own backend qualification: native, then managed against the native proof's
    // run, both proofs re-checked.
    let started = Instant::now();
    let mut cmd = Command::new(&binary);
    cmd.current_dir(root)
        .args(["qualify", backend, "--plan"])
        .arg(&plan)
        .arg("--output")
        .arg(proofs.root())
        .args(["--device", device.as_deref().unwrap_or("cpu")]);
    if let Some(url) = &master {
        cmd.args(["--master", url.as_str()]);
    }
    eprintln!("$ {}", describe(&cmd));
    let status = cmd
        .status()
        .with_context(|| format!("running qualify {backend}"))?;
    if !status.success() {
        bail!(
            "qualify {backend}: the qualification failed ({status}); see {}",
            output.display()
        );
    }
    println!(
        "qualify {backend}: native and managed equal in {:.0} s ({}, {})",
        started.elapsed().as_secs_f64(),
        proofs.native_proof().display(),
        proofs.managed_proof().display()
    );
    Ok((output, Vec::new()))
}

/// The main plan's DEV and HELD-OUT rows: the files given, else rows in the shipped example's
/// shape that no TRAIN row repeats.
fn evaluation_tasks(
    backend: &str,
    tasks: &[Option<PathBuf>; 3],
    servers: &RealServers,
) -> Result<(Vec<serde_json::Value>, Vec<serde_json::Value>)> {
    match (&tasks[1], &tasks[2]) {
        (Some(dev), Some(held_out)) => Ok((
            read_rows("--dev-tasks", dev)?,
            read_rows("--held-out-tasks", held_out)?,
        )),
        (None, None) if tasks[0].is_none() => Ok(match backend {
            "openenv" => (
                vec![serde_json::json!({"message": "a dev message"})],
                vec![serde_json::json!({"message": "a held-out message"})],
            ),
            _ => (
                vec![servers.nemo_row("weather in nyc?")],
                vec![servers.nemo_row("weather in tokyo?")],
            ),
        }),
        _ => bail!(
            "qualify {backend}: give --tasks, --dev-tasks and --held-out-tasks together: the main \
             plan evaluates on DEV and HELD-OUT rows of the same server, none of them a TRAIN row"
        ),
    }
}

/// What the cluster templates name for `backend`, made in the checkout `root`: the service
/// venv link (`.venv-nemo-gym` or `.venv-openenv`, to the venv `python` belongs to), the managed
/// qualification's plan (the qualification plan `qual`) and the main run's plan (the same
/// family, 256 steps, adopting the seed's steps 64, 128 and 256, evaluated on `dev` and
/// `held_out`). Nothing is overwritten: a file that
/// exists with other content, or a venv path that is not a link to this venv, is refused
/// before anything is written.
fn template_inputs(
    root: &Path,
    backend: &str,
    qual: &serde_json::Value,
    python: &Path,
    (dev, held_out): (Vec<serde_json::Value>, Vec<serde_json::Value>),
) -> Result<()> {
    let kind = match backend {
        "openenv" => hr_config::Backend::OpenEnv,
        _ => hr_config::Backend::Nemo,
    };
    let venv = python
        .parent()
        .and_then(Path::parent)
        .context("the service venv")?;
    let main_run = hr_config::TrainingRun::main(kind);
    let mut main = qual.clone();
    main["name"] = format!("{backend}-main").into();
    main["steps"] = main_run.steps.into();
    main["checkpoints"] = serde_json::json!({"every": main_run.steps / 8});
    // The seed's retained steps: a quarter, half and the end of the run (64, 128, 256).
    let quarter = main_run.steps / 4;
    main["evaluation"] = serde_json::json!({
        "checkpoints": [quarter, 2 * quarter, main_run.steps],
        "dev": {"tasks": dev}, "held_out": {"tasks": held_out}, "num_generations": 4,
    });
    let files = [
        (
            root.join(hr_config::TrainingRun::managed_qualification(kind).plan_file()),
            serde_json::to_string_pretty(qual)?,
        ),
        (
            root.join(main_run.plan_file()),
            serde_json::to_string_pretty(&main)?,
        ),
    ];
    for (path, text) in &files {
        hr_plan::Plan::parse(path, text)
            .map_err(|e| anyhow::anyhow!("{}: the plan is refused: {e}", path.display()))?;
        if std::fs::read_to_string(path).is_ok_and(|old| old != *text) {
            bail!(
                "{} exists with another plan; move it away to write this one",
                path.display()
            );
        }
    }
    let link = root.join(kind.service_venv());
    match std::fs::read_link(&link) {
        Ok(target) if target == venv => {}
        Ok(_) | Err(_) if link.symlink_metadata().is_ok() => bail!(
            "{} exists and is not a link to {}; move it away to link the service venv",
            link.display(),
            venv.display()
        ),
        _ => std::os::unix::fs::symlink(venv, &link)
            .with_context(|| format!("linking {} to {}", link.display(), venv.display()))?,
    }
    for (path, text) in &files {
        if let Some(dir) = path.parent() {
            std::fs::create_dir_all(dir)?;
        }
        std::fs::write(path, text)?;
        eprintln!("qualify {backend}: wrote {}", path.display());
    }
    eprintln!(
        "qualify {backend}: {} -> {}",
        link.display(),
        venv.display()
    );
    Ok(())
}

/// `--prepare`: the plan, the service venvs and the binary are ready; the lines to print: the
/// two halves to run from a shell without a GPU (the native one as a bounded one-GPU command,
/// the managed one from the shell, whose trial gets the GPU), each command on a line of its own.
fn next_steps(
    root: &Path,
    backend: &str,
    binary: &Path,
    plan: &Path,
    proofs: &hr_proof::ProofsDir,
    device: Option<&str>,
    master: Option<&str>,
) -> Vec<String> {
    let rel = |p: &Path| p.strip_prefix(root).unwrap_or(p).display().to_string();
    let device = device.unwrap_or("cpu");
    let slots = if device == "cuda" { 1 } else { 0 };
    let log = format!("{}-native-command", rel(proofs.root()));
    vec![
        format!(
            "qualify {backend}: prepared {} (plan {}); next, from the checkout:",
            rel(proofs.root()),
            rel(plan)
        ),
        format!(
            "  {b} cluster command --slots {slots} --output {log} -- {b} qualify native --plan {p} --device {device} --output {n}",
            b = rel(binary),
            p = rel(plan),
            n = rel(&proofs.native()),
        ),
        "  # run the det line it prints; once the command has ended:".to_owned(),
        format!(
            "  {b} qualify managed --plan {p} --device {device} --native-proof {np} --output {m}{master}",
            b = rel(binary),
            p = rel(plan),
            np = rel(&proofs.native_proof()),
            m = rel(&proofs.managed()),
            master = master.map(|m| format!(" --master {m}")).unwrap_or_default(),
        ),
    ]
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    fn qual_plan(python: &Path) -> serde_json::Value {
        json!({"schema_version": 1, "name": "plan",
            "model": {"path": "/m", "lora": {"rank": 2, "alpha": 4.0, "targets": ["q_proj"]}},
            "environment": {"backend": "openenv", "python": python, "env_root": "/e",
                "tasks": [{}]},
            "grpo": {"tasks_per_step": 1, "num_generations": 4},
            "optimizer": {"learning_rate": 0.01}, "steps": 4, "checkpoints": {"every": 1},
            "seeds": {"sampling": 1, "adapter_init": 2, "task_order": 3}})
    }

    #[test]
    fn prepare_makes_what_the_templates_name_once_and_overwrites_nothing() -> Result<()> {
        let root = tempfile::tempdir()?;
        let venv = root.path().join("cache/venv-openenv");
        let python = venv.join("bin/python");
        let qual = qual_plan(&python);
        let eval = || (vec![json!({"message": "d"})], vec![json!({"message": "h"})]);
        template_inputs(root.path(), "openenv", &qual, &python, eval())?;
        // The names the rendered templates use.
        let main_run = hr_config::TrainingRun::main(hr_config::Backend::OpenEnv);
        let read = |rel: String| -> Result<serde_json::Value> {
            Ok(serde_json::from_slice(&std::fs::read(
                root.path().join(rel),
            )?)?)
        };
        let main = read(main_run.plan_file())?;
        let qual_run = hr_config::TrainingRun::managed_qualification(hr_config::Backend::OpenEnv);
        assert_eq!(read(qual_run.plan_file())?, qual);
        assert_eq!(
            std::fs::read_link(root.path().join(".venv-openenv"))?,
            venv,
            "the venv the template names"
        );
        // The same family: only the name, the length, the schedule and the evaluation differ.
        let family = |p: &serde_json::Value| {
            let mut p = p.clone();
            for key in ["name", "steps", "checkpoints", "evaluation"] {
                p.as_object_mut().map(|o| o.remove(key));
            }
            p
        };
        assert_eq!(family(&main), family(&qual));
        assert_eq!(main["steps"], json!(256));
        assert_eq!(main["evaluation"]["checkpoints"], json!([64, 128, 256]));
        // Again with the same inputs: nothing changes; with another plan: refused, untouched.
        template_inputs(root.path(), "openenv", &qual, &python, eval())?;
        let mut other = qual.clone();
        other["optimizer"]["learning_rate"] = json!(0.5);
        let err =
            template_inputs(root.path(), "openenv", &other, &python, eval()).expect_err("refused");
        assert!(
            err.to_string().contains("exists with another plan"),
            "{err}"
        );
        assert_eq!(read(qual_run.plan_file())?, qual);
        // A venv folder where the link would go is refused before any plan is written.
        std::fs::remove_file(root.path().join(".venv-openenv"))?;
        std::fs::create_dir(root.path().join(".venv-openenv"))?;
        std::fs::remove_file(root.path().join(main_run.plan_file()))?;
        let err =
            template_inputs(root.path(), "openenv", &qual, &python, eval()).expect_err("refused");
        assert!(err.to_string().contains("is not a link"), "{err}");
        assert!(!root.path().join(main_run.plan_file()).exists());
        Ok(())
    }

    #[test]
    fn arguments_are_named_when_wrong() {
        let args =
            |words: &[&str]| -> Vec<String> { words.iter().map(|w| (*w).to_owned()).collect() };
        for (words, needle) in [
            (&["--tasks"][..], "--tasks needs a value"),
            (&["--app", "m:a"], "unknown argument \"--app\""),
            (&["--bogus", "x"], "unknown argument \"--bogus\""),
            (&["--shards", "3"], "--shards \"3\": give a power of two"),
            (
                &["--shards", "128"],
                "--shards \"128\": give a power of two",
            ),
        ] {
            let err = parse("nemo", &args(words))
                .expect_err("refused")
                .to_string();
            assert!(err.contains(needle), "{words:?}: {err}");
        }
        assert!(parse("openenv", &args(&["--app", "m:a", "--prepare"])).is_ok_and(|a| a.prepare));
        assert!(parse("nemo", &args(&["--shards", "8"])).is_ok_and(|a| a.shards == Some(8)));
    }
}
