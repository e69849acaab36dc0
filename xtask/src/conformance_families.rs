//! `cargo xtask conformance families`: our forward pass and our PEFT adapters against the real
//! `transformers` and `peft`, in the Hugging Face venv (the one the TRL bench uses).
//!
//! `xtask/conformance/families.py` has `transformers` write a tiny random model per family
//! (Llama, Llama 3 with RoPE scaling, linear RoPE, Qwen2 with and without a sliding window on
//! some layers, Qwen3 tied and untied, Mistral with a sliding window, Gemma 2 with soft-capping,
//! Gemma 3 with its own RoPE base on the window layers, in both spellings, Phi-3 with its fused
//! q/k/v and gate/up; f32, bf16 and f16 weights; both config spellings; one named by its Hub id
//! from a Hugging Face cache). Each is generated from greedily, trained for two steps with LoRA
//! on every projection (`all-linear`, which on Phi-3 is its fused ones; a
//! learning rate high enough that the adapters move away from PEFT's zero-initialised B) and
//! generated from with its adapter; the script checks tokens and log-probs against
//! `transformers` within 1e-4, loads the final and an intermediate checkpoint's adapter with
//! `AutoPeftModelForCausalLM` through their own `base_model_name_or_path`, and runs negative
//! controls. LoRA variants (a layer subset, a regular expression, DoRA on Llama and on Phi-3)
//! are trained the same way and must adapt in PEFT exactly the projections they hold.

use std::{
    path::{Path, PathBuf},
    process::Command,
};

use anyhow::{Context, Result, bail};

use crate::{
    bench_trl::{HF_PACKAGES, HF_VENV},
    cache::venv,
    conformance::{run_driver, target_dir, tiny_model, training_plan},
};

/// A PEFT folder's config file (xtask does not link the tensor crate that names it).
const ADAPTER_CONFIG: &str = "adapter_config.json";

/// Prompts whose greedy completions are compared (raw text, no chat template).
const PROMPTS: [&str; 2] = ["12 + 30 =", "Answer with digits only:"];

/// Returns (passed, failed).
pub(crate) fn families(root: &Path) -> Result<(u64, u64)> {
    let python = venv(HF_VENV, HF_PACKAGES)?.join("bin/python");
    let bin = crate::debug_binaries(root)?.join("hessian-recipes");
    let script = root.join("xtask/conformance/families.py");
    let work = work_dir(root, "families")?;
    let models = work.join("models");
    let out = offline(&python)
        .arg(&script)
        .arg("write")
        .arg("--out")
        .arg(&models)
        .arg("--tokenizer")
        .arg(tiny_model(root).join("tokenizer.json"))
        .output()
        .context("running families.py write")?;
    if !out.status.success() {
        bail!(
            "conformance families: writing the models failed ({}): {}",
            out.status,
            String::from_utf8_lossy(&out.stderr)
        );
    }
    let results = work.join("results");
    // One family is named by its Hub id and found in this cache, by our plan and by PEFT.
    let hub_cache = models.join("hub");
    let manifest = std::fs::read_to_string(models.join("families.jsonl"))?;
    for line in manifest.lines() {
        let family: serde_json::Value = serde_json::from_str(line)?;
        let name = family["name"].as_str().context("a family without a name")?;
        let model = PathBuf::from(family["dir"].as_str().context("a family without dir")?);
        let dir = results.join(name);
        std::fs::create_dir_all(&dir)?;
        eprintln!("conformance families: {name}");
        generate_json(&bin, &model, None, 12, &dir.join("base.jsonl"))?;
        let source = match family["hub_id"].as_str() {
            Some(id) => ModelSource::HubId(id, &hub_cache),
            None => ModelSource::Folder(&model),
        };
        let run = train_lora(root, &bin, &dir, name, source, &all_linear())?;
        keep_adapter(&bin, &model, &run, &dir)?;
        let checkpoint = first_checkpoint(&run)?;
        std::fs::rename(checkpoint, dir.join("checkpoint"))?;
    }
    // PEFT's ways to pick fewer projections, and DoRA: PEFT must adapt exactly what we trained
    // and give our log-probs.
    let mut variants = String::new();
    for (name, family, lora) in lora_variants() {
        let model = manifest
            .lines()
            .map(serde_json::from_str::<serde_json::Value>)
            .collect::<Result<Vec<_>, _>>()?
            .into_iter()
            .find(|f| f["name"] == family)
            .and_then(|f| f["dir"].as_str().map(PathBuf::from))
            .with_context(|| format!("no family {family} was written"))?;
        let dir = results.join(name);
        std::fs::create_dir_all(&dir)?;
        eprintln!("conformance families: LoRA {name}");
        let run = train_lora(root, &bin, &dir, name, ModelSource::Folder(&model), &lora)?;
        keep_adapter(&bin, &model, &run, &dir)?;
        variants.push_str(&format!(
            "{}\n",
            serde_json::json!({"name": name, "dir": model})
        ));
    }
    std::fs::write(results.join("lora_variants.jsonl"), variants)?;
    let mut driver = offline(&python);
    driver
        .env("HF_HUB_CACHE", &hub_cache)
        .arg(&script)
        .arg("check")
        .arg("--models")
        .arg(&models)
        .arg("--results")
        .arg(&results);
    finish(&work, run_driver(driver, "families-conformance")?)
}

/// The venv's Python with the Hugging Face libraries kept off the network: every model and
/// adapter is a local folder, and a name that is not one must fail at once, not retry a hub.
pub(crate) fn offline(python: &Path) -> Command {
    let mut command = Command::new(python);
    command.env("HF_HUB_OFFLINE", "1");
    command
}

/// A fresh work folder for a suite under the target folder.
pub(crate) fn work_dir(root: &Path, suite: &str) -> Result<PathBuf> {
    let work = target_dir(root)
        .join("conformance")
        .join(format!("{suite}-{}", std::process::id()));
    std::fs::create_dir_all(&work)?;
    Ok(work)
}

/// Removes the work folder when every check passed, else keeps it for inspection.
pub(crate) fn finish(work: &Path, (passed, failed): (u64, u64)) -> Result<(u64, u64)> {
    if failed == 0 {
        std::fs::remove_dir_all(work)?;
    } else {
        eprintln!("conformance: kept {} for inspection", work.display());
    }
    Ok((passed, failed))
}

/// How a training plan names its model.
#[derive(Clone, Copy)]
enum ModelSource<'a> {
    /// `model.path`.
    Folder(&'a Path),
    /// `model.hub_id` alone, found in this Hugging Face cache.
    HubId(&'a str, &'a Path),
}

/// Generates with the final adapter of `run` on `model` into `dir/adapter.jsonl` and moves the
/// adapter to `dir/adapter`, where the check reads both.
fn keep_adapter(bin: &Path, model: &Path, run: &Path, dir: &Path) -> Result<()> {
    generate_json(
        bin,
        model,
        Some(&run.join("adapter")),
        12,
        &dir.join("adapter.jsonl"),
    )?;
    std::fs::rename(run.join("adapter"), dir.join("adapter"))?;
    Ok(())
}

/// LoRA (rank 4) on every projection the model has, as PEFT's `all-linear` picks them.
fn all_linear() -> serde_json::Value {
    serde_json::json!({"rank": 4, "alpha": 8.0, "targets": "all-linear"})
}

/// LoRA variants in PEFT's spellings, each with the family it trains on: a rank alone (PEFT's
/// defaults for the rest), fewer projections (some layers only, `layers_to_transform`; a
/// regular-expression `target_modules`), and DoRA (`use_dora`) on every projection, on Llama
/// (trained with `lora_dropout`) and on Phi-3's fused ones.
fn lora_variants() -> [(&'static str, &'static str, serde_json::Value); 5] {
    [
        // PEFT's defaults for all but the rank.
        ("lora-r16", "llama", serde_json::json!({"r": 16})),
        (
            "lora-layers",
            "llama",
            serde_json::json!({"r": 4, "lora_alpha": 8.0,
                "target_modules": ["q_proj", "v_proj", "down_proj"], "layers_to_transform": 1}),
        ),
        (
            "lora-regex",
            "llama",
            serde_json::json!({"r": 4, "lora_alpha": 8.0,
                "target_modules": r"model\.layers\.0\.(self_attn\.(q|k)_proj|mlp\.up_proj)"}),
        ),
        (
            "dora",
            "llama",
            serde_json::json!({"r": 4, "lora_alpha": 8.0, "target_modules": "all-linear",
                "use_dora": true, "lora_dropout": 0.05}),
        ),
        (
            "dora-phi3",
            "phi3",
            serde_json::json!({"r": 4, "lora_alpha": 8.0, "target_modules": "all-linear",
                "use_dora": true}),
        ),
    ]
}

/// Trains a model for two steps with `lora`, one checkpoint per step, into `work/run`; returns
/// the run folder.
fn train_lora(
    root: &Path,
    bin: &Path,
    work: &Path,
    name: &str,
    model: ModelSource<'_>,
    lora: &serde_json::Value,
) -> Result<PathBuf> {
    let environment = serde_json::json!({"backend": "fixture",
        "tasks": {"kind": "digits", "count": 4, "seed": 1}});
    let grpo = serde_json::json!({"tasks_per_step": 2, "num_generations": 4,
        "max_completion_length": 8, "max_turn_tokens": 8, "prompt_format": "plain"});
    let plan_path = training_plan(root, work, name, &environment, &grpo, 2)?;
    let mut plan: serde_json::Value = serde_json::from_slice(&std::fs::read(&plan_path)?)?;
    let mut train = Command::new(bin);
    match model {
        ModelSource::Folder(dir) => plan["model"]["path"] = serde_json::json!(dir),
        ModelSource::HubId(id, cache) => {
            plan["model"] = serde_json::json!({"hub_id": id});
            train.env("HF_HUB_CACHE", cache);
        }
    }
    plan["model"]["lora"] = lora.clone();
    plan["optimizer"]["learning_rate"] = serde_json::json!(0.05);
    std::fs::write(&plan_path, serde_json::to_vec_pretty(&plan)?)?;
    let run = work.join("run");
    let status = train
        .arg("train")
        .arg("--plan")
        .arg(&plan_path)
        .arg("--output")
        .arg(&run)
        .status()
        .context("running hessian-recipes train")?;
    if !status.success() {
        bail!("conformance: train for {name} failed ({status})");
    }
    Ok(run)
}

/// Greedy `generate --raw --json` of [`PROMPTS`] on `model` (with `adapter`), written to `out`.
fn generate_json(
    bin: &Path,
    model: &Path,
    adapter: Option<&Path>,
    max_new_tokens: u32,
    out: &Path,
) -> Result<()> {
    let mut generate = Command::new(bin);
    generate.arg("generate").arg("--model").arg(model);
    if let Some(adapter) = adapter {
        generate.arg("--adapter").arg(adapter);
    }
    generate.args(["--raw", "--json", "--temperature", "0", "--max-new-tokens"]);
    generate.arg(max_new_tokens.to_string());
    for prompt in PROMPTS {
        generate.arg("--prompt").arg(prompt);
    }
    let output = generate
        .output()
        .context("running hessian-recipes generate")?;
    if !output.status.success() {
        bail!(
            "conformance: generate on {} failed ({}): {}",
            model.display(),
            output.status,
            String::from_utf8_lossy(&output.stderr)
        );
    }
    std::fs::write(out, &output.stdout)?;
    Ok(())
}

/// The run's first reported checkpoint folder (an intermediate one: the run has two steps, one
/// checkpoint each), as `det checkpoint download` would give it: PEFT's files at its root.
fn first_checkpoint(run: &Path) -> Result<PathBuf> {
    let list = hr_files::RunDir::new(run).checkpoint_list();
    let text = std::fs::read_to_string(&list).with_context(|| list.display().to_string())?;
    let first: serde_json::Value = serde_json::from_str(text.lines().next().unwrap_or_default())
        .with_context(|| format!("{}: the first line", list.display()))?;
    let uuid = first["uuid"]
        .as_str()
        .context("a checkpoint line without uuid")?;
    let checkpoint = hr_files::RunDir::new(run).checkpoint(uuid);
    if !checkpoint.join(ADAPTER_CONFIG).is_file() {
        bail!(
            "{} holds no {ADAPTER_CONFIG} at its root",
            checkpoint.display()
        );
    }
    Ok(checkpoint)
}
