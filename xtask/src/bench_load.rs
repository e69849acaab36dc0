//! `cargo xtask bench load`: peak memory while the policy loads a 0.5B model. `transformers`
//! writes a random model of Qwen2-0.5B's shape (bf16, tied embeddings) once into the cache, as
//! one file and as 300 MB shards; the release binary loads each and generates one token under a
//! peak-RSS probe. The table gives peak RSS against the size of the loaded f32 weights (a tied
//! head is the embedding itself, no copy); writes `docs/bench/load.md`.

use std::{path::Path, process::Command};

use anyhow::{Context, Result, bail};

use crate::bench_trl::{HF_PACKAGES, HF_VENV, measured_commit, peak_rss};
use crate::cache::{cache_dir, venv};
use crate::conformance::tiny_model;
use crate::release_binary;

/// Qwen2-0.5B's shape (494M parameters).
const SHAPE: &str = "dict(vocab_size=151936, hidden_size=896, intermediate_size=4864, \
num_hidden_layers=24, num_attention_heads=14, num_key_value_heads=2, tie_word_embeddings=True, \
max_position_embeddings=32768, rope_theta=1000000.0)";

/// Writes the model (single file and sharded) and prints its parameter count.
fn writer() -> String {
    format!(
        r#"import sys, shutil, torch, transformers
torch.manual_seed(0)
config = transformers.AutoConfig.for_model('qwen2', **{SHAPE})
model = transformers.AutoModelForCausalLM.from_config(config, dtype=torch.bfloat16)
for out, shard in [(sys.argv[1], '10GB'), (sys.argv[2], '300MB')]:
    model.save_pretrained(out, max_shard_size=shard)
    shutil.copy(sys.argv[3], out + '/tokenizer.json')
print(sum(p.numel() for p in model.parameters()))
"#
    )
}

pub(crate) fn run_task(root: &Path, args: &[String]) -> Result<()> {
    if let Some(a) = args.first() {
        bail!("bench load: unknown argument {a:?}: it takes none");
    }
    let commit = measured_commit();
    let python = venv(HF_VENV, HF_PACKAGES)?.join("bin/python");
    let binary = release_binary(root, &[])?;
    let models = cache_dir()?.join("bench-load");
    let (single, sharded) = (models.join("qwen2-0.5b"), models.join("qwen2-0.5b-sharded"));
    let count = models.join("parameters");
    if !count.is_file() {
        let out = Command::new(&python)
            .args(["-c", &writer()])
            .arg(&single)
            .arg(&sharded)
            .arg(tiny_model(root).join("tokenizer.json"))
            .output()
            .context("writing the 0.5B model")?;
        if !out.status.success() {
            bail!(
                "bench load: transformers failed: {}",
                String::from_utf8_lossy(&out.stderr)
            );
        }
        std::fs::write(&count, &out.stdout)?;
    }
    let parameters: u64 = std::fs::read_to_string(&count)?.trim().parse()?;
    // Every parameter in f32 (the tied head is the embedding).
    let loaded = parameters * 4;
    let gib = |bytes: u64| bytes as f64 / (1u64 << 30) as f64;
    let mut rows = Vec::new();
    for (label, dir) in [("one file", &single), ("300 MB shards", &sharded)] {
        let files: u64 = std::fs::read_dir(dir)?
            .filter_map(|e| e.ok())
            .filter(|e| e.path().extension().is_some_and(|x| x == "safetensors"))
            .map(|e| e.metadata().map_or(0, |m| m.len()))
            .sum();
        let mut generate = Command::new(&binary);
        generate
            .args([
                "generate",
                "--raw",
                "--prompt",
                "hi",
                "--max-new-tokens",
                "1",
            ])
            .arg("--model")
            .arg(dir);
        let started = std::time::Instant::now();
        let peak = peak_rss(&python, &generate, &models.join("peak-rss"))? * 1024;
        let seconds = started.elapsed().as_secs_f64();
        println!(
            "bench load: {label}: peak RSS {:.2} GiB for {:.2} GiB of loaded weights ({:.2}x), {seconds:.1} s",
            gib(peak),
            gib(loaded),
            peak as f64 / loaded as f64
        );
        rows.push(format!(
            "| {label} | {:.2} GiB | {:.2} GiB | {:.2} GiB | {:.2}x | {seconds:.1} s |",
            gib(files),
            gib(loaded),
            gib(peak),
            peak as f64 / loaded as f64
        ));
    }
    let doc = format!(
        "# Loading a 0.5B model\n\n\
Measured at commit {commit} with `cargo xtask bench load` (release binary, CPU backend, this \
project's 2-core machine). A random model of Qwen2-0.5B's shape ({parameters} parameters, bf16, \
tied embeddings) written by `transformers`, loaded by `hessian-recipes generate --raw --prompt hi \
--max-new-tokens 1` (load, one forward pass, one token) under a peak-RSS probe. Loaded weights: \
every parameter in f32 (the tied head is the embedding itself).\n\n\
| checkpoint | safetensors on disk | loaded f32 weights | peak RSS | peak / loaded | wall |\n\
|---|---|---|---|---|---|\n{}\n",
        rows.join("\n")
    );
    let path = root.join("docs/bench/load.md");
    std::fs::write(&path, doc)?;
    println!("bench load: wrote {}", path.display());
    Ok(())
}
