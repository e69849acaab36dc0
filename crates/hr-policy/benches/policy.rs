//! `cargo xtask bench policy`: generation tokens/s and LoRA train-step time on the CPU backend,
//! for the tiny test model and, when `HR_SMOLLM2_DIR` names the folder `hessian-recipes model
//! fetch smollm2` printed, SmolLM2-135M. The digest column hashes every sampled token and log-prob:
//! equal digests from two runs mean bit-identical generation across processes.
#![allow(clippy::print_stdout, missing_docs)]

use std::path::{Path, PathBuf};
use std::time::Instant;

use burn::backend::Autodiff;
use burn::optim::{AdamWConfig, GradientsParams, Optimizer};
use burn::tensor::backend::Backend;
use hr_policy::{Adapters, LoraConfig, Policy, PolicyRng, SamplingConfig, Target};
use hr_tests::tiny_model::{TinySpec, write_tiny_model};

#[cfg(not(feature = "bench-ndarray"))]
type Cpu = burn::backend::Flex;
#[cfg(feature = "bench-ndarray")]
type Cpu = burn::backend::NdArray;

const BACKEND: &str = if cfg!(feature = "bench-ndarray") {
    "ndarray"
} else {
    "flex"
};

struct Row {
    model: String,
    batch: usize,
    new_tokens: usize,
    gen_tokens_per_s: f64,
    step_ms: f64,
    digest: u64,
}

fn fnv(hash: &mut u64, bytes: &[u8]) {
    for b in bytes {
        *hash ^= u64::from(*b);
        *hash = hash.wrapping_mul(0x100_0000_01b3);
    }
}

fn prompts(batch: usize, len: usize, vocab: usize) -> Vec<Vec<u32>> {
    (0..batch)
        .map(|b| {
            (0..len + b)
                .map(|t| ((t * 31 + b * 7 + 3) % vocab) as u32)
                .collect()
        })
        .collect()
}

fn measure(
    name: &str,
    dir: &Path,
    batch: usize,
    new_tokens: usize,
    steps: usize,
) -> anyhow::Result<Row> {
    let device = Default::default();
    let policy = Policy::<Cpu>::load(dir, &device)?;
    let vocab = policy.config().vocab_size;
    let prompts = prompts(batch, 24, vocab);
    let sampling = SamplingConfig {
        temperature: 1.0,
        top_k: 0,
        top_p: 1.0,
        min_p: 0.0,
        repetition_penalty: 1.0,
        max_new_tokens: new_tokens,
        stop_tokens: vec![],
    };
    let started = Instant::now();
    let out = policy.generate(
        None,
        &prompts,
        &sampling,
        &mut PolicyRng::from_seed(1),
        true,
    )?;
    let gen_secs = started.elapsed().as_secs_f64();
    let generated: usize = out.tokens.iter().map(Vec::len).sum();
    let mut digest = 0xcbf2_9ce4_8422_2325u64;
    for (tokens, logprobs) in out.tokens.iter().zip(&out.logprobs) {
        tokens
            .iter()
            .for_each(|t| fnv(&mut digest, &t.to_le_bytes()));
        logprobs
            .iter()
            .for_each(|l| fnv(&mut digest, &l.to_bits().to_le_bytes()));
    }
    drop(policy);

    // One LoRA step: score the sampled completions, loss = −mean log-prob, AdamW on adapters.
    type Train = Autodiff<Cpu>;
    let policy = Policy::<Train>::load(dir, &device)?;
    let lora = LoraConfig::new(8, 16.0, vec![Target::QProj, Target::VProj])?;
    let mut adapters =
        Adapters::<Train>::init(&policy, lora, &mut PolicyRng::from_seed(2), &device);
    let mut optim = AdamWConfig::new()
        .with_epsilon(1e-8)
        .with_weight_decay(0.01)
        .init::<Train, Adapters<Train>>();
    let mut step_secs = 0.0;
    for step in 0..=steps {
        let started = Instant::now();
        let logp = policy.score(Some(&adapters), &prompts, &out.tokens, 1.0)?;
        let loss = logp.sum().neg().div_scalar(generated as f64);
        let grads = GradientsParams::from_grads(loss.backward(), &adapters);
        adapters = optim.step(1e-4, adapters, grads);
        <Train as Backend>::sync(&device)?;
        if step > 0 {
            // The first step warms allocations up and is not counted.
            step_secs += started.elapsed().as_secs_f64();
        }
    }
    Ok(Row {
        model: name.to_owned(),
        batch,
        new_tokens,
        gen_tokens_per_s: generated as f64 / gen_secs,
        step_ms: step_secs / steps as f64 * 1000.0,
        digest,
    })
}

fn main() -> anyhow::Result<()> {
    let tmp = tempfile::tempdir()?;
    let tiny = tmp.path().join("tiny");
    write_tiny_model(&tiny, &TinySpec::default());
    let mut rows = vec![measure("tiny (2 layers, d=32)", &tiny, 8, 64, 5)?];
    match std::env::var_os("HR_SMOLLM2_DIR").map(PathBuf::from) {
        Some(dir) => rows.push(measure("SmolLM2-135M", &dir, 4, 32, 2)?),
        None => println!(
            "(HR_SMOLLM2_DIR unset: SmolLM2-135M skipped; `cargo xtask bench policy` sets it)"
        ),
    }
    println!(
        "\nbackend: {BACKEND}, threads: {}",
        std::thread::available_parallelism().map_or(1, |n| n.get())
    );
    println!(
        "| model | batch | new tokens | generation tokens/s | LoRA train step (ms) | digest |"
    );
    println!("|---|---|---|---|---|---|");
    for r in rows {
        println!(
            "| {} | {} | {} | {:.1} | {:.1} | {:016x} |",
            r.model, r.batch, r.new_tokens, r.gen_tokens_per_s, r.step_ms, r.digest
        );
    }
    Ok(())
}
