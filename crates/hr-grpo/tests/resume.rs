//! Native state: stopping after step 2 and resuming in a new trainer (fresh model load, state
//! read back from files) continues bit for bit; dropping the RNG, optimizer or adaptive entropy
//! state does not.

use burn::backend::{Autodiff, Flex};
use hr_env::{Environment, FixtureEnvironment, FixtureKind, Task, fixture_tasks};
use hr_grpo::{
    AdamWSettings, AdaptiveEntropy, AdvantageConfig, Decay, GrpoConfig, GrpoError, LossConfig,
    LrSchedule, NativeState, RolloutConfig, TRAINER_STATE, Trainer,
};
use hr_policy::{Adapters, ChatTokenizer, LoraConfig, Policy, PolicyRng, Target};
use hr_tests::tiny_model::{TinySpec, write_tiny_model};

type B = Autodiff<Flex>;

fn config() -> GrpoConfig {
    GrpoConfig {
        rollout: RolloutConfig {
            num_generations: 4,
            max_completion_length: 8,
            max_turn_tokens: 8,
            max_turns: 1,
            ..RolloutConfig::default()
        },
        advantage: AdvantageConfig::default(),
        // The high-entropy mask and the bonus read the policy between updates, and the adaptive
        // controller carries its coefficient and the last entropy from step to step (a target
        // above any entropy: the bonus applies from the second update on): resumed, they must
        // read the same.
        loss: LossConfig {
            max_completion_length: 8,
            top_entropy_quantile: 0.5,
            entropy_coef: 0.01,
            adaptive_entropy: Some(AdaptiveEntropy {
                coef_min: 0.0,
                coef_max: 1.0,
                coef_delta: 0.005,
                target: 100.0,
            }),
            ..LossConfig::default()
        },
        num_iterations: 2,
        adamw: AdamWSettings::default(),
        schedule: LrSchedule {
            learning_rate: 2e-2,
            warmup_steps: 1,
            decay: Decay::Cosine,
            total_steps: 4,
        },
        max_grad_norm: Some(1.0),
        gradient_accumulation_steps: 1,
        mask_truncated_completions: false,
        shards: 1,
    }
}

fn load(dir: &std::path::Path) -> anyhow::Result<(Policy<B>, ChatTokenizer)> {
    Ok((
        Policy::<B>::load(dir, &Default::default())?,
        ChatTokenizer::from_file(&dir.join("tokenizer.json"))?,
    ))
}

/// Held by each test: two trainers running at once in one process (the test harness's threads)
/// were seen to differ in the last bits about one run in 60 (they share the process's CPU thread
/// pool and Burn's autodiff state), while the product runs one trainer per process; these tests
/// compare bits, so they run one at a time.
static ONE_TRAINER: std::sync::Mutex<()> = std::sync::Mutex::new(());

/// This test's turn ([`ONE_TRAINER`]), a folder with the tiny model in `model/`, and the tasks.
fn setup() -> anyhow::Result<(
    std::sync::MutexGuard<'static, ()>,
    tempfile::TempDir,
    Vec<Task>,
)> {
    let one = ONE_TRAINER
        .lock()
        .unwrap_or_else(std::sync::PoisonError::into_inner);
    let dir = tempfile::tempdir()?;
    write_tiny_model(&dir.path().join("model"), &TinySpec::default());
    Ok((one, dir, fixture_tasks(FixtureKind::Digits, 2, 3)))
}

fn fresh(dir: &std::path::Path) -> anyhow::Result<Trainer<B>> {
    fresh_with(dir, false, 0.0)
}

fn fresh_with(dir: &std::path::Path, dora: bool, dropout: f64) -> anyhow::Result<Trainer<B>> {
    let (policy, tokenizer) = load(dir)?;
    let lora = LoraConfig::new(2, 4.0, vec![Target::QProj, Target::VProj, Target::DownProj])?
        .with_dora(dora)
        .with_dropout(dropout)?;
    let adapters = Adapters::init(&policy, lora, &mut PolicyRng::from_seed(1), policy.device());
    Ok(Trainer::new(
        policy,
        tokenizer,
        adapters,
        PolicyRng::from_seed(2),
        config(),
    )?)
}

fn fixture() -> Result<Box<dyn Environment>, GrpoError> {
    Ok(Box::new(FixtureEnvironment::new()))
}

type Evidence = Vec<(Vec<Vec<u32>>, Vec<f64>, Vec<f64>)>;

fn steps(t: &mut Trainer<B>, tasks: &[Task], n: usize) -> anyhow::Result<Evidence> {
    let mut out = Vec::new();
    for _ in 0..n {
        let r = t.step(tasks, &mut fixture)?;
        out.push((
            r.episodes.iter().map(|e| e.completion.clone()).collect(),
            r.advantages,
            vec![r.metrics["loss"], r.metrics["grad_norm"]],
        ));
    }
    Ok(out)
}

fn resumed(
    model: &std::path::Path,
    state: &NativeState,
    origin: &std::path::Path,
) -> anyhow::Result<Trainer<B>> {
    let (policy, tokenizer) = load(model)?;
    Ok(Trainer::resume(policy, tokenizer, config(), state, origin)?)
}

#[test]
fn resuming_from_files_equals_the_uninterrupted_run_and_controls_diverge() -> anyhow::Result<()> {
    let (_one, dir, tasks) = setup()?;
    let model = dir.path().join("model");

    let mut reference = fresh(&model)?;
    let all = steps(&mut reference, &tasks, 4)?;
    let final_state = reference.capture("tiny")?;

    let mut first = fresh(&model)?;
    assert_eq!(steps(&mut first, &tasks, 2)?, all[..2]);
    let saved = dir.path().join("step-2");
    std::fs::create_dir(&saved)?;
    first.capture("tiny")?.write(&saved)?;
    drop(first);
    let state = NativeState::read(&saved)?;

    let mut second = resumed(&model, &state, &saved)?;
    assert_eq!(second.step_index(), 2);
    assert_eq!(
        steps(&mut second, &tasks, 2)?,
        all[2..],
        "steps 3-4 after resume"
    );
    let resumed_state = second.capture("tiny")?;
    for (name, bytes) in &final_state.files {
        assert!(
            resumed_state.files.get(name) == Some(bytes),
            "{name} differs after resume:\n{}\nvs\n{}",
            String::from_utf8_lossy(&resumed_state.files[name]),
            String::from_utf8_lossy(bytes)
        );
    }
    assert_eq!(
        resumed_state, final_state,
        "adapter, optimizer, step and RNG bytes"
    );

    // Control: the RNG restore skipped (a fresh stream) changes step 3's samples.
    let mut no_rng = state.clone();
    let text = String::from_utf8(no_rng.files[TRAINER_STATE].clone())?;
    let mut meta: serde_json::Value = serde_json::from_str(&text)?;
    meta["rng"] = serde_json::to_value(PolicyRng::from_seed(2).state())?;
    no_rng
        .files
        .insert(TRAINER_STATE.to_owned(), serde_json::to_vec(&meta)?);
    let mut t = resumed(&model, &no_rng, &saved)?;
    assert_ne!(
        steps(&mut t, &tasks, 1)?[0].0,
        all[2].0,
        "step 3 samples must differ"
    );

    // Control: the adaptive controller's state is kept, and resuming without it is refused
    // (it would silently restart the coefficient and skip the next bonus).
    meta = serde_json::from_str(&text)?;
    let control = &meta["entropy_control"];
    assert!(
        control["coef"]
            .as_f64()
            .is_some_and(|c| (c - (0.01 + 4.0 * 0.005)).abs() < 1e-12)
            && control["last_world_entropy"].as_f64().is_some(),
        "two steps of two updates each, every one under target: {control}"
    );
    meta.as_object_mut()
        .expect("object")
        .remove("entropy_control");
    let mut no_control = state.clone();
    no_control
        .files
        .insert(TRAINER_STATE.to_owned(), serde_json::to_vec(&meta)?);
    let err = resumed(&model, &no_control, &saved)
        .err()
        .map(|e| e.to_string())
        .unwrap_or_default();
    assert!(err.contains("use_adaptive_entropy"), "{err}");

    // Control: dropped optimizer state is refused at load, naming a tensor without state,
    // instead of silently restarting AdamW from zero moments.
    let mut no_optim = state.clone();
    meta = serde_json::from_str(&text)?;
    meta["adam_steps"] = serde_json::json!({});
    no_optim
        .files
        .insert(TRAINER_STATE.to_owned(), serde_json::to_vec(&meta)?);
    let err = resumed(&model, &no_optim, &saved)
        .err()
        .map(|e| e.to_string())
        .unwrap_or_default();
    assert!(err.contains("has no optimizer state at step 2"), "{err}");
    // So is one moment tensor missing from optimizer.safetensors.
    let moments = hr_policy::read_f32_safetensors(&saved, &state.files["optimizer.safetensors"])?;
    let kept: Vec<(String, Vec<usize>, Vec<u8>)> = moments
        .iter()
        .skip(1)
        .map(|(k, (shape, v))| {
            (
                k.clone(),
                shape.clone(),
                v.iter().flat_map(|x| x.to_le_bytes()).collect(),
            )
        })
        .collect();
    let mut short = state.clone();
    short.files.insert(
        "optimizer.safetensors".to_owned(),
        hr_policy::f32_safetensors(&kept)?,
    );
    let err = resumed(&model, &short, &saved)
        .err()
        .map(|e| e.to_string())
        .unwrap_or_default();
    assert!(err.contains("is missing"), "{err}");

    // A missing file is a typed error naming it.
    let mut broken = state;
    broken.files.remove("optimizer.safetensors");
    let err = resumed(&model, &broken, &saved)
        .err()
        .map(|e| e.to_string())
        .unwrap_or_default();
    assert!(
        err.contains("optimizer.safetensors") && err.contains("missing"),
        "{err}"
    );
    Ok(())
}

/// DoRA's magnitudes train (AdamW state and all), LoRA dropout changes the gradients, and a
/// resumed DoRA run with dropout is the uninterrupted one, bit for bit.
#[test]
fn a_dora_run_with_dropout_resumes_bit_for_bit() -> anyhow::Result<()> {
    let (_one, dir, tasks) = setup()?;
    let model = dir.path().join("model");
    let mut reference = fresh_with(&model, true, 0.2)?;
    let initial = reference.capture("tiny")?;
    let all = steps(&mut reference, &tasks, 3)?;
    let final_state = reference.capture("tiny")?;
    let magnitudes = |state: &NativeState| -> anyhow::Result<Vec<Vec<f32>>> {
        let tensors =
            hr_policy::read_f32_safetensors(&model, &state.files[hr_policy::ADAPTER_WEIGHTS])?;
        Ok(tensors
            .iter()
            .filter(|(name, _)| name.ends_with("lora_magnitude_vector"))
            .map(|(_, (_, values))| values.clone())
            .collect())
    };
    let (before, after) = (magnitudes(&initial)?, magnitudes(&final_state)?);
    assert_eq!(
        before.len(),
        2 * 3,
        "a magnitude per adapted projection and layer"
    );
    assert_ne!(before, after, "the magnitudes trained");
    let optimizer = String::from_utf8(final_state.files[TRAINER_STATE].clone())?;
    assert!(optimizer.contains("lora_magnitude_vector"), "{optimizer}");

    // Dropout acted: without it the first step's samples are the same, its gradient not.
    let undropped = steps(&mut fresh_with(&model, true, 0.0)?, &tasks, 1)?;
    assert_eq!(undropped[0].0, all[0].0);
    assert_ne!(
        undropped[0].2[1], all[0].2[1],
        "grad_norm with and without dropout"
    );

    let mut first = fresh_with(&model, true, 0.2)?;
    assert_eq!(steps(&mut first, &tasks, 1)?, all[..1]);
    let saved = dir.path().join("step-1");
    std::fs::create_dir(&saved)?;
    first.capture("tiny")?.write(&saved)?;
    drop(first);
    let state = NativeState::read(&saved)?;
    let mut second = resumed(&model, &state, &saved)?;
    assert_eq!(
        steps(&mut second, &tasks, 2)?,
        all[1..],
        "steps 2-3 after resume"
    );
    assert_eq!(
        second.capture("tiny")?,
        final_state,
        "adapter, optimizer, step and RNG bytes"
    );
    Ok(())
}
