//! `cargo xtask conformance peft`: a finished run's `RUN/adapter/` loads in the real `peft`.
//! Trains the tiny test model for two steps with LoRA on every target module (a learning rate
//! high enough that the adapters move away from PEFT's zero-initialised B), generates greedily
//! with `generate --adapter RUN/adapter --json`, and runs `xtask/conformance/peft_adapter.py` in
//! the Hugging Face venv (the one the TRL bench uses): `AutoPeftModelForCausalLM` loads the
//! folder as it is and its log-probabilities of our completions must match ours within 1e-4
//! relative error, with the base model alone as the negative control.

use std::{path::Path, process::Command};

use anyhow::{Context, Result, bail};

use crate::{
    bench_trl::{HF_PACKAGES, HF_VENV},
    conformance::{run_driver, target_dir, tiny_model, training_plan, venv},
};

/// Prompts whose greedy completions are compared (raw text, no chat template).
const PROMPTS: [&str; 2] = ["12 + 30 =", "Answer with digits only:"];

/// Returns (passed, failed).
pub(crate) fn peft(root: &Path) -> Result<(u64, u64)> {
    let python = venv(HF_VENV, HF_PACKAGES)?.join("bin/python");
    let bin = crate::debug_binaries(root)?.join("hessian-recipes");
    let work = target_dir(root)
        .join("conformance")
        .join(format!("peft-{}", std::process::id()));
    std::fs::create_dir_all(&work)?;
    let environment = serde_json::json!({"backend": "fixture",
        "tasks": {"kind": "digits", "count": 4, "seed": 1}});
    let grpo = serde_json::json!({"tasks_per_step": 2, "num_generations": 4,
        "max_completion_length": 8, "max_turn_tokens": 8, "prompt_format": "plain"});
    let plan_path = training_plan(root, &work, "peft", &environment, &grpo, 2)?;
    let mut plan: serde_json::Value = serde_json::from_slice(&std::fs::read(&plan_path)?)?;
    plan["model"]["lora"] = serde_json::json!({"rank": 4, "alpha": 8.0, "targets":
        ["q_proj", "k_proj", "v_proj", "o_proj", "gate_proj", "up_proj", "down_proj"]});
    plan["optimizer"]["learning_rate"] = serde_json::json!(0.05);
    std::fs::write(&plan_path, serde_json::to_vec_pretty(&plan)?)?;

    let run = work.join("run");
    let status = Command::new(&bin)
        .arg("train")
        .arg("--plan")
        .arg(&plan_path)
        .arg("--output")
        .arg(&run)
        .status()
        .context("running hessian-recipes train")?;
    if !status.success() {
        bail!("conformance peft: train failed ({status})");
    }
    let adapter = run.join("adapter");
    let mut generate = Command::new(&bin);
    generate
        .arg("generate")
        .arg("--model")
        .arg(tiny_model(root))
        .arg("--adapter")
        .arg(&adapter)
        .args([
            "--raw",
            "--json",
            "--temperature",
            "0",
            "--max-new-tokens",
            "8",
        ]);
    for prompt in PROMPTS {
        generate.arg("--prompt").arg(prompt);
    }
    let out = generate
        .output()
        .context("running hessian-recipes generate")?;
    if !out.status.success() {
        bail!(
            "conformance peft: generate failed ({}): {}",
            out.status,
            String::from_utf8_lossy(&out.stderr)
        );
    }
    let generations = work.join("generations.jsonl");
    std::fs::write(&generations, &out.stdout)?;

    let mut driver = Command::new(&python);
    driver
        .arg(root.join("xtask/conformance/peft_adapter.py"))
        .arg("--adapter")
        .arg(&adapter)
        .arg("--model")
        .arg(tiny_model(root))
        .arg("--generations")
        .arg(&generations);
    let (passed, failed) = run_driver(driver, "peft-conformance")?;
    if failed == 0 {
        std::fs::remove_dir_all(&work)?;
    } else {
        eprintln!("conformance: kept {} for inspection", work.display());
    }
    Ok((passed, failed))
}
