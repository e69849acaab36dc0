//! The `vulkan` phase of `cargo xtask ci`: the GPU path rehearsed on Mesa's lavapipe, a Vulkan
//! device on the CPU, with CI's one debug binary (built with `--features vulkan`). burn-wgpu runs
//! the same cubecl kernels and fusion as burn-cuda (no autotune), compiled to SPIR-V. The checks:
//! one decode token's kernel launches per layer and host reads within `bench decode`'s ceilings;
//! greedy generation equal to the CPU backend's (the same tokens, log-probabilities within
//! 1e-4); f16 base weights within their stated tolerance of the CPU's f32 (5e-3), and bf16,
//! which lavapipe cannot hold, refused naming `model.dtype`; `scripts/gpu-check.sh --device
//! vulkan --dtype f16`, whose native qualification (equal across processes) and managed one (a
//! trial on a devmaster, paused and restored, equal) must have proofs naming the lavapipe
//! device; and the gate admitting a longer plan of their family on `vulkan` with those proofs
//! and refusing it on `cpu`. The plans hold their base in f16, as a GPU run's hold it in bf16.

use std::{
    path::{Path, PathBuf},
    process::Command,
};

use anyhow::{Context, Result, bail, ensure};

use crate::describe;

/// Where Debian's lavapipe package puts its driver manifest.
const LAVAPIPE_ICD: &str = "/usr/share/vulkan/icd.d";

/// Installs lavapipe (`mesa-vulkan-drivers`) and the Vulkan loader when they are missing.
fn ensure_lavapipe() -> Result<()> {
    let present = std::fs::read_dir(LAVAPIPE_ICD)
        .map(|d| {
            d.filter_map(|e| e.ok())
                .any(|e| e.file_name().to_string_lossy().starts_with("lvp_icd"))
        })
        .unwrap_or(false);
    let loader = Path::new("/usr/lib/x86_64-linux-gnu/libvulkan.so.1").exists()
        || Path::new("/usr/lib/aarch64-linux-gnu/libvulkan.so.1").exists();
    if present && loader {
        return Ok(());
    }
    eprintln!("vulkan: installing lavapipe (mesa-vulkan-drivers, libvulkan1) from Debian");
    let apt = |args: &[&str]| -> Result<()> {
        let mut cmd = Command::new("apt-get");
        cmd.args(args).env("DEBIAN_FRONTEND", "noninteractive");
        crate::run(cmd).context("install mesa-vulkan-drivers and libvulkan1 as root")
    };
    apt(&["-q", "update"])?;
    apt(&[
        "-q",
        "install",
        "-y",
        "--no-install-recommends",
        "mesa-vulkan-drivers",
        "libvulkan1",
    ])
}

/// Runs `bin` with `args` in `root`, failing with its output when it fails.
fn output(root: &Path, bin: &Path, args: &[&str]) -> Result<String> {
    let mut cmd = Command::new(bin);
    cmd.args(args).current_dir(root);
    eprintln!("$ {}", describe(&cmd));
    let out = cmd
        .output()
        .with_context(|| format!("running {}", describe(&cmd)))?;
    let text = String::from_utf8_lossy(&out.stdout).into_owned();
    if !out.status.success() {
        bail!(
            "{} failed ({}):\n{text}{}",
            describe(&cmd),
            out.status,
            String::from_utf8_lossy(&out.stderr)
        );
    }
    Ok(text)
}

/// The qualification plans' base dtype: lavapipe holds f16, not bf16.
const DTYPE: &str = "f16";

/// The largest log-probability difference f16 base weights are allowed from f32 ones on the
/// tiny model (hr-policy's `dtype` tests state it for the CPU).
const F16_TOLERANCE: f64 = 5e-3;

/// Greedy completions of two prompts on `device` with the base in `dtype`.
fn generate(root: &Path, bin: &Path, device: &str, dtype: &str) -> Result<Vec<serde_json::Value>> {
    let text = output(
        root,
        bin,
        &[
            "generate",
            "--device",
            device,
            "--dtype",
            dtype,
            "--model",
            "target/tiny-model",
            "--json",
            "--prompt",
            "What is 2 + 3?",
            "--prompt",
            "Name a colour.",
            "--max-new-tokens",
            "16",
        ],
    )?;
    text.lines()
        .map(|l| serde_json::from_str(l).context("a generate --json line"))
        .collect()
}

/// Greedy generation on `vulkan` equals the CPU's (`cpu`): the same tokens, log-probabilities
/// within 1e-4.
fn parity(root: &Path, bin: &Path, cpu: &[serde_json::Value]) -> Result<()> {
    same_tokens(cpu, &generate(root, bin, "vulkan", "f32")?, 1e-4)
}

/// The base in f16 on `vulkan` stays within [`F16_TOLERANCE`] of the CPU's f32 base (same greedy
/// tokens); a bf16 plan is refused before training, naming `model.dtype`, and leaves no folder.
fn half(root: &Path, bin: &Path, dir: &Path, cpu: &[serde_json::Value]) -> Result<()> {
    same_tokens(cpu, &generate(root, bin, "vulkan", DTYPE)?, F16_TOLERANCE)?;
    let (plan_path, out) = (dir.join("plan-bf16.json"), dir.join("bf16-run"));
    let mut cmd = Command::new(bin);
    cmd.current_dir(root)
        .args(["train", "--device", "vulkan", "--plan"])
        .arg(&plan_path)
        .arg("--output")
        .arg(&out);
    eprintln!("$ {}", describe(&cmd));
    let refused = cmd.output()?;
    let stderr = String::from_utf8_lossy(&refused.stderr);
    ensure!(
        refused.status.code() == Some(2)
            && stderr.contains("model.dtype: this device cannot hold bf16 weights"),
        "a bf16 plan on lavapipe was not refused naming model.dtype ({}): {stderr}",
        refused.status
    );
    ensure!(!root.join(out).exists(), "the refused run left its folder");
    Ok(())
}

/// The CPU's and Vulkan's completions hold the same tokens, their log-probabilities within
/// `tolerance`.
fn same_tokens(
    cpu: &[serde_json::Value],
    vulkan: &[serde_json::Value],
    tolerance: f64,
) -> Result<()> {
    ensure!(cpu.len() == 2 && vulkan.len() == 2, "two completions each");
    for (a, b) in cpu.iter().zip(vulkan) {
        ensure!(
            a["tokens"] == b["tokens"],
            "tokens differ: cpu {} vulkan {}",
            a["tokens"],
            b["tokens"]
        );
        let logprobs = |v: &serde_json::Value| -> Vec<f64> {
            v["logprobs"]
                .as_array()
                .map(|a| a.iter().filter_map(serde_json::Value::as_f64).collect())
                .unwrap_or_default()
        };
        let worst = logprobs(a)
            .iter()
            .zip(logprobs(b))
            .map(|(x, y)| (x - y).abs())
            .fold(0.0, f64::max);
        ensure!(
            worst <= tolerance,
            "log-probabilities differ by {worst:e} (> {tolerance:e})"
        );
        eprintln!("vulkan: largest log-probability difference from the CPU's f32 {worst:e}");
    }
    Ok(())
}

/// The proof at `path`: equal, and made on lavapipe.
fn check_proof(path: &Path) -> Result<()> {
    let proof: serde_json::Value = serde_json::from_slice(
        &std::fs::read(path).with_context(|| format!("reading {}", path.display()))?,
    )?;
    ensure!(
        proof["equal"] == true,
        "{} is not equal: {proof}",
        path.display()
    );
    let device = &proof["device"];
    ensure!(
        device["kind"] == "vulkan"
            && device["name"]
                .as_str()
                .is_some_and(|n| n.contains("llvmpipe")),
        "{} names the device {device}, not lavapipe",
        path.display()
    );
    Ok(())
}

/// `scripts/gpu-check.sh --device vulkan` end to end (generate, the four-step native and managed
/// qualifications of the tiny plan, train throughput; TRL left out), so the script itself is
/// tested. Its proofs, checked here, are the ones the gate reads (`dir/proofs/{native,managed}`).
fn gpu_check(root: &Path, bin: &Path, dir: &Path) -> Result<()> {
    let out = root.join(dir).join("gpu-check");
    let mut cmd = Command::new("bash");
    cmd.current_dir(root)
        .args([
            "scripts/gpu-check.sh",
            "--device",
            "vulkan",
            "--dtype",
            DTYPE,
            "--bin",
        ])
        .arg(bin)
        .args(["--tiny", "target/tiny-model"])
        .arg(&out)
        .env_remove("TRL_PYTHON");
    crate::run(cmd)
        .with_context(|| std::fs::read_to_string(out.join("summary.txt")).unwrap_or_default())?;
    let (native, managed) = (out.join("qualify"), out.join("managed"));
    check_proof(&native.join(hr_proof::NATIVE_PROOF_FILE))?;
    check_proof(&managed.join(hr_proof::MANAGED_PROOF_FILE))?;
    let proofs = hr_proof::ProofsDir::new(root.join(dir).join("proofs"));
    std::fs::create_dir_all(proofs.root())?;
    std::os::unix::fs::symlink(native, proofs.native())?;
    std::os::unix::fs::symlink(managed, proofs.managed())?;
    Ok(())
}

/// The gate with those proofs: a six-step plan of their family is admitted on `--device vulkan`
/// and refused on `--device cpu`, the refusal naming the proofs' device.
fn gate(root: &Path, bin: &Path, dir: &Path) -> Result<()> {
    let prepare = |device: &str| {
        let mut cmd = Command::new(bin);
        cmd.current_dir(root).args(["managed", "prepare", "--plan"]);
        cmd.arg(dir.join("plan-6.json"))
            .arg("--output")
            .arg(dir.join(format!("prepared-{device}")))
            .args(["--profile", "local", "--max-wall-seconds", "600"])
            .args(["--device", device, "--proofs"])
            .arg(dir.join("proofs"));
        eprintln!("$ {}", describe(&cmd));
        cmd.output()
            .with_context(|| format!("running {}", describe(&cmd)))
    };
    let admitted = prepare("vulkan")?;
    ensure!(
        admitted.status.success(),
        "not admitted on vulkan: {}",
        String::from_utf8_lossy(&admitted.stderr)
    );
    let refused = prepare("cpu")?;
    let stderr = String::from_utf8_lossy(&refused.stderr);
    ensure!(
        refused.status.code() == Some(2) && stderr.contains("made on vulkan: llvmpipe"),
        "a cpu run was not refused as made elsewhere ({}): {stderr}",
        refused.status
    );
    Ok(())
}

/// In `dir`, from the tiny qualification plan: a six-step plan of the family gpu-check
/// qualifies (base in f16) for the gate, and the four-step plan with a bf16 base.
fn write_plans(root: &Path, dir: &Path) -> Result<()> {
    let mut plan: serde_json::Value =
        serde_json::from_slice(&std::fs::read(root.join("plans/native-tiny.json"))?)?;
    plan["model"]["path"] = root.join("target/tiny-model").display().to_string().into();
    std::fs::create_dir_all(root.join(dir))?;
    plan["model"]["dtype"] = "bf16".into();
    std::fs::write(root.join(dir).join("plan-bf16.json"), plan.to_string())?;
    plan["model"]["dtype"] = DTYPE.into();
    plan["steps"] = 6.into();
    plan["name"] = "native-tiny-6".into();
    std::fs::write(root.join(dir).join("plan-6.json"), plan.to_string())?;
    Ok(())
}

/// The phase: each check counted on its own; the folder is removed when all pass.
/// One decode token's kernel launches, host reads and the values they carry (counts, not
/// timings) within their ceilings (`bench decode`'s, printed).
fn decode_cost(root: &Path, bin: &Path) -> Result<()> {
    use crate::bench_decode::{
        CEILINGS, PROMPTS, READS_PER_TOKEN_CEILING, VALUES_PER_ROW_CEILING, measure,
    };
    for (what, lora, ceiling) in CEILINGS {
        let cost = measure(root, bin, "vulkan", lora)?;
        println!(
            "vulkan: per decode token {what}: {:.1} kernel launches per layer (+{:.1} outside), \
             {:.1} host reads of {:.0} values",
            cost.launches_per_layer, cost.launches_outside, cost.reads, cost.values
        );
        ensure!(
            cost.launches_per_layer <= ceiling,
            "{what}: {:.1} launches per layer per decode token, above {ceiling}",
            cost.launches_per_layer
        );
        ensure!(
            cost.reads <= READS_PER_TOKEN_CEILING,
            "{what}: {:.1} host reads per decode token, above {READS_PER_TOKEN_CEILING}",
            cost.reads
        );
        let per_row = cost.values / PROMPTS.len() as f64;
        ensure!(
            per_row <= VALUES_PER_ROW_CEILING,
            "{what}: {per_row:.1} values read back per row per decode token, above \
             {VALUES_PER_ROW_CEILING}: the logits came back to the host"
        );
    }
    Ok(())
}

pub(crate) fn phase(root: &Path, bin: &Path) -> Result<(u64, u64)> {
    ensure_lavapipe()?;
    let dir = PathBuf::from(format!("target/vulkan-ci-{}", std::process::id()));
    write_plans(root, &dir)?;
    let (mut passed, mut failed) = (0, 0);
    // The CPU's greedy completions, which both parity checks compare against.
    let cpu = generate(root, bin, "cpu", "f32");
    let cpu = || {
        cpu.as_deref()
            .map_err(|e| anyhow::anyhow!("the CPU's generation: {e:#}"))
    };
    for name in ["parity", "half", "gpu-check", "gate", "decode cost"] {
        let verdict = match name {
            "parity" => cpu().and_then(|c| parity(root, bin, c)),
            "half" => cpu().and_then(|c| half(root, bin, &dir, c)),
            "gpu-check" => gpu_check(root, bin, &dir),
            "gate" => gate(root, bin, &dir),
            _ => decode_cost(root, bin),
        };
        match verdict {
            Ok(()) => {
                println!("vulkan {name}: 1 passed, 0 failed");
                passed += 1;
            }
            Err(e) => {
                println!(
                    "vulkan {name}: 0 passed, 1 failed ({e:#}); see {}",
                    dir.display()
                );
                failed += 1;
            }
        }
    }
    if failed == 0 {
        std::fs::remove_dir_all(root.join(&dir))?;
    }
    Ok((passed, failed))
}
