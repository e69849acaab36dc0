//! `cargo xtask qualify openenv|nemo`: a backend's four-step qualification against its real
//! server, native then managed, with the release binary.

use std::path::{Path, PathBuf};
use std::process::Command;
use std::time::Instant;

use anyhow::{Context, Result, bail};

use crate::conformance::{RealServers, training_plan};
use crate::{Binary, describe, timestamped};

/// Runs `qualify native` then `qualify managed` of the backend's plan in a fresh `--output`
/// (default `runs/qualify-<backend>-<time>`); `--model DIR` replaces the tiny test model,
/// `--master URL` a real master for the devmaster, `--device cuda` the CPU (a release binary is
/// then built with the `cuda` feature), `--dtype f32|f16|bf16` the plan's `model.dtype` (default
/// bf16 on `cuda`, as a GPU run of a real model holds its base, else f32). Returns the output
/// folder.
pub(crate) fn qualify_backend(
    root: &Path,
    backend: &str,
    args: &[String],
    binary: Binary<'_>,
) -> Result<PathBuf> {
    let (mut output, mut model, mut master, mut device, mut dtype) = (None, None, None, None, None);
    let mut prepare = false;
    let mut rest = args.iter();
    while let Some(a) = rest.next() {
        match a.as_str() {
            "--prepare" => prepare = true,
            "--output" => output = rest.next().cloned(),
            "--model" => model = rest.next().cloned(),
            "--master" => master = rest.next().cloned(),
            "--device" => device = rest.next().cloned(),
            "--dtype" => dtype = rest.next().cloned(),
            other => bail!(
                "qualify {backend}: unknown argument {other:?}: use --output runs/NAME, --model DIR, --master URL, --device cpu|cuda, --dtype f32|f16|bf16, --prepare"
            ),
        }
    }
    let output =
        root.join(output.unwrap_or_else(|| timestamped(&format!("runs/qualify-{backend}"))));
    if output.exists() {
        bail!(
            "qualify {backend}: {} exists; give a fresh --output",
            output.display()
        );
    }
    std::fs::create_dir_all(&output)?;
    let servers = RealServers::setup()?;
    let environment = match backend {
        "openenv" => servers.openenv_environment(),
        "nemo" => servers.nemo_environment(),
        other => bail!("qualify: unknown backend {other:?}: use openenv or nemo"),
    };
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
        hr_proof::QUALIFICATION_STEPS,
    )?;
    let mut value: serde_json::Value = serde_json::from_slice(&std::fs::read(&plan)?)?;
    if let Some(model) = model {
        value["model"]["path"] = serde_json::json!(std::path::absolute(model)?);
    }
    if dtype != "f32" {
        value["model"]["dtype"] = dtype.into();
    }
    std::fs::write(&plan, serde_json::to_vec_pretty(&value)?)?;
    let binary = binary.path(root, device.as_deref() == Some("cuda"))?;
    let proofs = hr_proof::ProofsDir::new(&output);
    if prepare {
        print_next_steps(
            root,
            backend,
            &binary,
            &plan,
            &proofs,
            device.as_deref(),
            master.as_deref(),
        );
        return Ok(output);
    }
    let stage = |name: &str, extra: &[&str]| -> Result<f64> {
        let started = Instant::now();
        let mut cmd = Command::new(&binary);
        cmd.current_dir(root)
            .args(["qualify", name, "--plan"])
            .arg(&plan)
            .arg("--output")
            .arg(match name {
                "native" => proofs.native(),
                _ => proofs.managed(),
            })
            .args(extra);
        eprintln!("$ {}", describe(&cmd));
        let status = cmd
            .status()
            .with_context(|| format!("running qualify {name}"))?;
        if !status.success() {
            bail!(
                "qualify {backend}: the {name} qualification failed ({status}); see {}",
                output.display()
            );
        }
        Ok(started.elapsed().as_secs_f64())
    };
    let device = ["--device", device.as_deref().unwrap_or("cpu")];
    let native = stage("native", &device)?;
    // The managed half compares with the native proof's uninterrupted run (no second one).
    let native_proof = proofs.native_proof();
    let native_proof = native_proof.to_str().context("a UTF-8 output path")?;
    let mut managed_args = vec![device[0], device[1], "--native-proof", native_proof];
    if let Some(url) = &master {
        managed_args.extend(["--master", url.as_str()]);
    }
    let managed = stage("managed", &managed_args)?;
    // Both proofs must hold when re-checked from the files alone.
    for proof in [proofs.native_proof(), proofs.managed_proof()] {
        let mut verify = Command::new(&binary);
        verify.args(["proof", "verify"]).arg(&proof);
        eprintln!("$ {}", describe(&verify));
        if !verify.status().context("running proof verify")?.success() {
            bail!(
                "qualify {backend}: {} does not verify; see {}",
                proof.display(),
                output.display()
            );
        }
    }
    println!(
        "qualify {backend}: native {native:.0} s ({}), managed {managed:.0} s ({})",
        proofs.native_proof().display(),
        proofs.managed_proof().display()
    );
    Ok(output)
}

/// `--prepare`: the plan, the service venvs and the binary are ready; print the two halves to
/// run from a shell without a GPU (the native one as a bounded one-GPU command, the managed one
/// from the shell, whose trial gets the GPU).
fn print_next_steps(
    root: &Path,
    backend: &str,
    binary: &Path,
    plan: &Path,
    proofs: &hr_proof::ProofsDir,
    device: Option<&str>,
    master: Option<&str>,
) {
    let rel = |p: &Path| p.strip_prefix(root).unwrap_or(p).display().to_string();
    let device = device.unwrap_or("cpu");
    let slots = if device == "cuda" { 1 } else { 0 };
    let log = format!("{}-native-command", rel(proofs.root()));
    println!(
        "qualify {backend}: prepared {} (plan {}); next, from the checkout:",
        rel(proofs.root()),
        rel(plan)
    );
    println!(
        "  {b} cluster command --slots {slots} --output {log} -- {b} qualify native --plan {p} --device {device} --output {n}",
        b = rel(binary),
        p = rel(plan),
        n = rel(&proofs.native()),
    );
    println!("  # run the det line it prints; once the command has ended:");
    println!(
        "  {b} qualify managed --plan {p} --device {device} --native-proof {np} --output {m}{master}",
        b = rel(binary),
        p = rel(plan),
        np = rel(&proofs.native_proof()),
        m = rel(&proofs.managed()),
        master = master.map(|m| format!(" --master {m}")).unwrap_or_default(),
    );
}
