//! `cargo xtask bench grpo`: GRPO step time and tokens/s on the CPU for the tiny test model and,
//! when `HR_SMOLLM2_DIR` names the folder `hessian-recipes model fetch smollm2` printed,
//! SmolLM2-135M. Each step: G = 4 episodes for each of 2 digits tasks, μ = 1, LoRA on q/v.
#![allow(clippy::print_stdout, missing_docs)]

use std::path::{Path, PathBuf};
use std::time::Instant;

use burn::backend::{Autodiff, Flex};
use hr_env::{Environment, FixtureEnvironment, FixtureKind, fixture_tasks};
use hr_grpo::{
    AdamWSettings, AdvantageConfig, Decay, GrpoConfig, GrpoError, LossConfig, LrSchedule,
    RolloutConfig, Trainer,
};
use hr_policy::{Adapters, ChatTokenizer, LoraConfig, Policy, PolicyRng, Target};
use hr_tests::tiny_model::{TinySpec, write_tiny_model};

type B = Autodiff<Flex>;

fn measure(name: &str, dir: &Path, completion: usize, steps: usize) -> anyhow::Result<String> {
    let device = Default::default();
    let policy = Policy::<B>::load(dir, &device)?;
    let tokenizer = ChatTokenizer::from_file(&dir.join("tokenizer.json"))?;
    let lora = LoraConfig::new(8, 16.0, vec![Target::QProj, Target::VProj])?;
    let adapters = Adapters::init(&policy, lora, &mut PolicyRng::from_seed(1), &device);
    let config = GrpoConfig {
        rollout: RolloutConfig {
            num_generations: 4,
            max_completion_length: completion,
            max_turn_tokens: completion,
            max_turns: 1,
            ..RolloutConfig::default()
        },
        advantage: AdvantageConfig::default(),
        loss: LossConfig {
            max_completion_length: completion,
            ..LossConfig::default()
        },
        num_iterations: 1,
        adamw: AdamWSettings::default(),
        schedule: LrSchedule {
            learning_rate: 1e-3,
            warmup_steps: 0,
            decay: Decay::Constant,
            total_steps: steps as u64,
        },
        max_grad_norm: Some(1.0),
        gradient_accumulation_steps: 1,
        mask_truncated_completions: false,
        shards: 1,
    };
    let mut trainer = Trainer::new(policy, tokenizer, adapters, PolicyRng::from_seed(2), config)?;
    let tasks = fixture_tasks(FixtureKind::Digits, 2, 3);
    let mut env =
        || -> Result<Box<dyn Environment>, GrpoError> { Ok(Box::new(FixtureEnvironment::new())) };
    let (mut secs, mut tokens) = (0.0, 0.0);
    for step in 0..=steps {
        let started = Instant::now();
        let report = trainer.step(&tasks, &mut env)?;
        if step > 0 {
            // The first step warms allocations up and is not counted.
            secs += started.elapsed().as_secs_f64();
            tokens += report.metrics["step_tokens"];
        }
    }
    Ok(format!(
        "| {name} | 8 | {completion} | {:.0} | {:.1} |",
        secs / steps as f64 * 1000.0,
        tokens / secs
    ))
}

fn main() -> anyhow::Result<()> {
    let tmp = tempfile::tempdir()?;
    let tiny = tmp.path().join("tiny");
    write_tiny_model(&tiny, &TinySpec::default());
    let mut rows = vec![measure("tiny (2 layers, d=32)", &tiny, 32, 5)?];
    match std::env::var_os("HR_SMOLLM2_DIR").map(PathBuf::from) {
        Some(dir) => rows.push(measure("SmolLM2-135M", &dir, 32, 2)?),
        None => println!(
            "(HR_SMOLLM2_DIR unset: SmolLM2-135M skipped; `cargo xtask bench grpo` sets it)"
        ),
    }
    println!(
        "\nbackend: flex (CPU), threads: {}",
        std::thread::available_parallelism().map_or(1, |n| n.get())
    );
    println!(
        "| model | episodes/step | max completion | GRPO step (ms) | tokens/s (prompt+completion) |"
    );
    println!("|---|---|---|---|---|");
    for r in rows {
        println!("{r}");
    }
    Ok(())
}
