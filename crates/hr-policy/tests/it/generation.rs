//! Sampling: cache-equivalence, explicit RNG, greedy, consistency with scoring, gradients.

use burn::backend::Autodiff;
use burn::module::{AutodiffModule, Module};
use hr_policy::{
    Adapters, Execution, LoraConfig, Policy, PolicyRng, Sampler, SamplingConfig, Target, host_f32,
};
use hr_tests::tiny_model::{EOS, TinySpec, write_tiny_model};

use crate::{Cpu, tiny};

fn prompts() -> Vec<Vec<u32>> {
    vec![
        vec![1, 40, 41, 42, 7],
        vec![5, 6],
        vec![100, 101, 102, 103, 104, 105, 106],
    ]
}

pub(crate) fn sampling(temperature: f64, top_p: f64) -> SamplingConfig {
    SamplingConfig {
        temperature,
        top_k: 0,
        top_p,
        min_p: 0.0,
        repetition_penalty: 1.0,
        max_new_tokens: 12,
        stop_tokens: vec![EOS],
    }
}

#[test]
fn cached_and_uncached_generation_agree() -> anyhow::Result<()> {
    let dir = tempfile::tempdir()?;
    let (_, qwen2) = tiny(
        &dir.path().join("qwen2"),
        &TinySpec {
            model_type: "qwen2",
            ..TinySpec::default()
        },
    )?;
    // Qwen3 whose second block attends within a window of 3, shorter than the sequences: the
    // cached mask must slide as the uncached one does.
    let windowed = dir.path().join("qwen3");
    write_tiny_model(
        &windowed,
        &TinySpec {
            model_type: "qwen3",
            ..TinySpec::default()
        },
    );
    let config_path = windowed.join("config.json");
    let mut config: serde_json::Value = serde_json::from_slice(&std::fs::read(&config_path)?)?;
    config["use_sliding_window"] = serde_json::json!(true);
    config["sliding_window"] = serde_json::json!(3);
    config["max_window_layers"] = serde_json::json!(1);
    std::fs::write(&config_path, config.to_string())?;
    let qwen3 = Policy::<Cpu>::load(&windowed, &Default::default())?;
    assert_eq!(qwen3.config().sliding_windows, vec![None, Some(3)]);
    for policy in [qwen2, qwen3] {
        for cfg in [sampling(1.0, 1.0), sampling(0.7, 0.9), sampling(0.0, 1.0)] {
            let cached =
                policy.generate(None, &prompts(), &cfg, &mut PolicyRng::from_seed(5), true)?;
            let uncached =
                policy.generate(None, &prompts(), &cfg, &mut PolicyRng::from_seed(5), false)?;
            assert_alike(&cached, &uncached, &format!("{cfg:?}"));
            assert!(cached.tokens.iter().all(|t| !t.is_empty() && t.len() <= 12));
        }
    }
    Ok(())
}

/// The same tokens and stops, and log-probabilities equal up to the kernels' rounding.
fn assert_alike(a: &hr_policy::Generation, b: &hr_policy::Generation, what: &str) {
    assert_eq!(a.tokens, b.tokens, "{what}");
    assert_eq!(a.stopped, b.stopped, "{what}");
    for (x, y) in a.logprobs.iter().flatten().zip(b.logprobs.iter().flatten()) {
        assert!((x - y).abs() < 1e-5, "{what}: {x} vs {y}");
    }
}

#[test]
fn the_rng_alone_decides_the_samples_and_its_state_resumes_the_stream() -> anyhow::Result<()> {
    let dir = tempfile::tempdir()?;
    let (_, policy) = tiny(dir.path(), &TinySpec::default())?;
    let cfg = sampling(1.0, 1.0);
    let run = |rng: &mut PolicyRng| policy.generate(None, &prompts(), &cfg, rng, true);
    let first = run(&mut PolicyRng::from_seed(9))?;
    assert_eq!(first, run(&mut PolicyRng::from_seed(9))?);
    assert_ne!(first.tokens, run(&mut PolicyRng::from_seed(10))?.tokens);

    let mut rng = PolicyRng::from_seed(9);
    run(&mut rng)?;
    let saved = serde_json::to_string(&rng.state())?;
    let continued = run(&mut rng)?;
    let mut restored = PolicyRng::from_state(&serde_json::from_str(&saved)?)?;
    assert_eq!(continued, run(&mut restored)?);
    Ok(())
}

/// A GPU's layout (tokens drawn on the device, every product `x·Wᵀ`), run on the CPU, samples
/// what the CPU's does.
#[test]
fn drawing_on_the_device_gives_the_hosts_samples() -> anyhow::Result<()> {
    let dir = tempfile::tempdir()?;
    let (_, policy) = tiny(dir.path(), &TinySpec::default())?;
    let on_device = |lanes: usize| {
        policy.clone().with_execution(Execution {
            lanes,
            sampler: Sampler::Device,
            weight_left_rows: 0,
            ..Execution::default()
        })
    };
    let batch = [prompts(), prompts()].concat();
    for cfg in [sampling(1.0, 1.0), sampling(0.7, 1.0), sampling(0.0, 1.0)] {
        let (mut host_rng, mut device_rng) = (PolicyRng::from_seed(5), PolicyRng::from_seed(5));
        let host = policy.generate(None, &batch, &cfg, &mut host_rng, true)?;
        let device = on_device(1).generate(None, &batch, &cfg, &mut device_rng, true)?;
        let what = format!("{cfg:?}");
        // The same numbers drawn, the same tokens (a boundary within f32 rounding of a draw
        // could move one; these seeds hit none), the log-probabilities to f32 rounding.
        assert_alike(&device, &host, &what);
        assert_eq!(device_rng, host_rng, "{what}");
        // Lanes split the rows, each drawing its own with the numbers of its rows.
        let mut rng = PolicyRng::from_seed(5);
        assert_alike(
            &on_device(2).generate(None, &batch, &cfg, &mut rng, true)?,
            &host,
            &what,
        );
    }
    // Top-p needs the whole sorted distribution: it stays on the host.
    let cfg = sampling(0.7, 0.9);
    let (mut host_rng, mut device_rng) = (PolicyRng::from_seed(3), PolicyRng::from_seed(3));
    assert_alike(
        &on_device(1).generate(None, &batch, &cfg, &mut device_rng, true)?,
        &policy.generate(None, &batch, &cfg, &mut host_rng, true)?,
        "top-p",
    );
    assert_eq!(device_rng, host_rng);
    Ok(())
}

#[test]
fn decoding_in_lanes_samples_alike_and_repeats_exactly() -> anyhow::Result<()> {
    let dir = tempfile::tempdir()?;
    let (_, policy) = tiny(
        dir.path(),
        &TinySpec {
            model_type: "qwen3",
            ..TinySpec::default()
        },
    )?;
    // Mixed lengths and repeats, so each lane prefills its own distinct prompts.
    let (a, b, c) = (
        vec![1, 40, 41, 42, 7],
        vec![5, 6],
        vec![100, 101, 102, 103, 104, 105],
    );
    let batch = vec![a.clone(), b.clone(), a.clone(), c, b, a];
    for cfg in [sampling(1.0, 1.0), sampling(0.7, 0.9), sampling(0.0, 1.0)] {
        for use_cache in [true, false] {
            let run = |lanes: usize| {
                policy
                    .clone()
                    .with_execution(Execution {
                        lanes,
                        ..Execution::default()
                    })
                    .generate(None, &batch, &cfg, &mut PolicyRng::from_seed(11), use_cache)
            };
            let one = run(1)?;
            assert!(one.tokens.iter().all(|t| !t.is_empty()));
            // Even and uneven splits, one row per lane, and more lanes than rows: the same
            // tokens, log-probabilities equal up to the kernels' rounding, and bit for bit the
            // same output whenever the number of lanes is the same.
            for lanes in [2, 4, 6, 9] {
                let split = run(lanes)?;
                let what = format!("{lanes} lanes, cache {use_cache}, {cfg:?}");
                assert_alike(&split, &one, &what);
                assert_eq!(run(lanes)?, split, "{what}");
            }
        }
    }
    Ok(())
}

#[test]
fn greedy_takes_the_argmax_and_top_p_limits_the_choices() -> anyhow::Result<()> {
    let dir = tempfile::tempdir()?;
    let (_, policy) = tiny(dir.path(), &TinySpec::default())?;
    let prompt = vec![vec![3, 4, 5, 6]];
    let greedy = policy.generate(
        None,
        &prompt,
        &sampling(0.0, 1.0),
        &mut PolicyRng::from_seed(1),
        true,
    )?;
    let logits = host_f32(policy.logits(None, &prompt)?)?;
    let vocab = policy.config().vocab_size;
    let last = &logits[3 * vocab..4 * vocab];
    let argmax = (0..vocab)
        .max_by(|a, b| last[*a].total_cmp(&last[*b]))
        .expect("vocab");
    assert_eq!(greedy.tokens[0][0] as usize, argmax);

    // A tiny nucleus keeps only the most likely token: sampling becomes greedy.
    let nucleus = policy.generate(
        None,
        &prompt,
        &sampling(1.0, 1e-9),
        &mut PolicyRng::from_seed(2),
        true,
    )?;
    assert_eq!(nucleus.tokens, greedy.tokens);
    Ok(())
}

#[test]
fn scoring_reproduces_the_sampling_log_probs_and_the_reference_ignores_adapters()
-> anyhow::Result<()> {
    let dir = tempfile::tempdir()?;
    let (_, policy) = tiny(dir.path(), &TinySpec::default())?;
    let cfg = sampling(0.8, 1.0);
    let generation = policy.generate(None, &prompts(), &cfg, &mut PolicyRng::from_seed(4), true)?;
    let scored = host_f32(policy.score(None, &prompts(), &generation.tokens, 0.8)?)?;
    let width = generation.tokens.iter().map(Vec::len).max().unwrap_or(0);
    for (row, logprobs) in generation.logprobs.iter().enumerate() {
        for (j, lp) in logprobs.iter().enumerate() {
            let s = f64::from(scored[row * width + j]);
            assert!(
                (s - lp).abs() < 1e-4,
                "row {row} token {j}: scored {s}, sampled {lp}"
            );
        }
        assert!(
            scored[row * width + logprobs.len()..(row + 1) * width]
                .iter()
                .all(|x| *x == 0.0)
        );
    }
    let lora = LoraConfig::new(2, 4.0, vec![Target::QProj, Target::UpProj])?;
    let adapters =
        Adapters::<Cpu>::init(&policy, lora, &mut PolicyRng::from_seed(3), policy.device());
    let with = host_f32(policy.score(Some(&adapters), &prompts(), &generation.tokens, 0.8)?)?;
    assert_eq!(
        scored, with,
        "B = 0 adapters leave the policy equal to the reference"
    );
    Ok(())
}

#[test]
fn only_adapters_receive_gradients() -> anyhow::Result<()> {
    type Train = Autodiff<Cpu>;
    let dir = tempfile::tempdir()?;
    write_tiny_model(dir.path(), &TinySpec::default());
    let policy = Policy::<Train>::load(dir.path(), &Default::default())?;
    let lora = LoraConfig::new(2, 4.0, vec![Target::VProj])?;
    let adapters =
        Adapters::<Train>::init(&policy, lora, &mut PolicyRng::from_seed(3), policy.device());
    let before = policy.flops();
    let logp = policy.score(Some(&adapters), &[vec![3, 4, 5]], &[vec![6, 7, 8]], 1.0)?;
    // A pass through adapters on an autodiff backend counts its backward; the reference's and
    // the inference view's passes count none, and the view shares the count.
    let scored = policy.flops().since(&before);
    assert!(
        scored.forward > 0 && scored.backward > scored.forward / 2,
        "{scored:?}"
    );
    let before = policy.flops();
    policy.score(None, &[vec![3, 4, 5]], &[vec![6, 7, 8]], 1.0)?;
    policy.valid().score(
        Some(&adapters.valid()),
        &[vec![3, 4, 5]],
        &[vec![6, 7, 8]],
        1.0,
    )?;
    let untrained = policy.flops().since(&before);
    assert_eq!(untrained.backward, 0);
    assert!(
        untrained.forward > 2 * scored.forward * 9 / 10,
        "{untrained:?} {scored:?}"
    );
    let grads = logp.sum().backward();
    let b_grad = adapters.layers[0].slots[2]
        .as_ref()
        .expect("v_proj adapter")
        .b
        .grad(&grads)
        .expect("grad of B");
    assert!(host_f32(b_grad)?.iter().any(|g| *g != 0.0));
    assert!(
        policy.base().blocks[0].attn.v.grad(&grads).is_none(),
        "base weights are frozen"
    );
    assert!(policy.base().embed.grad(&grads).is_none());
    assert_eq!(adapters.num_params(), 2 * (2 * 32 + 2 * 16));
    Ok(())
}

#[test]
fn bad_requests_are_refused_with_the_reason() -> anyhow::Result<()> {
    let dir = tempfile::tempdir()?;
    let (_, policy) = tiny(dir.path(), &TinySpec::default())?;
    let mut rng = PolicyRng::from_seed(1);
    let err = |r: Result<_, hr_policy::PolicyError>| {
        r.map(|_: hr_policy::Generation| ())
            .expect_err("refused")
            .to_string()
    };
    assert!(
        err(policy.generate(None, &[vec![]], &sampling(1.0, 1.0), &mut rng, true))
            .contains("prompt 0 is empty")
    );
    assert!(
        err(policy.generate(None, &[vec![9999]], &sampling(1.0, 1.0), &mut rng, true))
            .contains("outside the vocabulary")
    );
    assert!(
        err(policy.generate(None, &[vec![3]], &sampling(-1.0, 1.0), &mut rng, true))
            .contains("temperature")
    );
    assert!(
        err(policy.generate(None, &[vec![3]], &sampling(1.0, 0.0), &mut rng, true))
            .contains("top_p")
    );
    Ok(())
}

#[test]
fn repeated_prompts_run_once_with_the_same_samples_scores_and_gradients() -> anyhow::Result<()> {
    type Train = Autodiff<Cpu>;
    let dir = tempfile::tempdir()?;
    write_tiny_model(dir.path(), &TinySpec::default());
    let policy = Policy::<Train>::load(dir.path(), &Default::default())?;
    let lora = LoraConfig::new(2, 4.0, vec![Target::QProj, Target::VProj])?;
    let mut adapters =
        Adapters::<Train>::init(&policy, lora, &mut PolicyRng::from_seed(3), policy.device());
    // Non-zero B, so the adapters change every position the shared prompts compute.
    for layer in &mut adapters.layers {
        for pair in layer.slots.iter_mut().flatten() {
            pair.b = pair
                .b
                .clone()
                .map(|b| b.ones_like().mul_scalar(0.1).require_grad());
        }
    }
    let (a, b) = (vec![1, 40, 41, 42, 7], vec![5, 6]);
    let repeated = vec![a.clone(), b.clone(), a.clone(), a, b];
    // Generation: the cached path runs each distinct prompt once, the uncached one every row.
    let inference = policy.valid();
    let frozen = adapters.valid();
    let cfg = sampling(1.0, 1.0);
    let cached = inference.generate(
        Some(&frozen),
        &repeated,
        &cfg,
        &mut PolicyRng::from_seed(9),
        true,
    )?;
    let uncached = inference.generate(
        Some(&frozen),
        &repeated,
        &cfg,
        &mut PolicyRng::from_seed(9),
        false,
    )?;
    assert_eq!(cached.tokens, uncached.tokens);
    // Scoring: the batch shares prompts; one row at a time shares nothing.
    let logp = policy.score(Some(&adapters), &repeated, &cached.tokens, 1.0)?;
    let width = logp.dims()[1];
    let batch = host_f32(logp.clone())?;
    let grads = logp.sum().backward();
    let shared = host_f32(
        adapters.layers[0].slots[0]
            .as_ref()
            .expect("q")
            .a
            .grad(&grads)
            .expect("grad"),
    )?;
    let mut separate = vec![0.0f32; shared.len()];
    for (row, completion) in cached.tokens.iter().enumerate() {
        let alone = policy.score(
            Some(&adapters),
            &[repeated[row].clone()],
            std::slice::from_ref(completion),
            1.0,
        )?;
        let values = host_f32(alone.clone())?;
        for (j, v) in values.iter().enumerate() {
            let x = batch[row * width + j];
            assert!((x - v).abs() < 1e-4, "row {row} token {j}: {x} vs {v}");
        }
        let g = alone.sum().backward();
        let part = host_f32(
            adapters.layers[0].slots[0]
                .as_ref()
                .expect("q")
                .a
                .grad(&g)
                .expect("grad"),
        )?;
        for (s, p) in separate.iter_mut().zip(part) {
            *s += p;
        }
    }
    for (x, y) in shared.iter().zip(&separate) {
        assert!(
            (x - y).abs() < 1e-3 * (1.0 + y.abs()),
            "gradient {x} vs {y}"
        );
    }
    assert!(shared.iter().any(|g| *g != 0.0));
    Ok(())
}

#[test]
fn scoring_in_row_chunks_gives_the_same_scores_and_gradients() -> anyhow::Result<()> {
    type Train = Autodiff<Cpu>;
    let dir = tempfile::tempdir()?;
    write_tiny_model(dir.path(), &TinySpec::default());
    let whole = Policy::<Train>::load(dir.path(), &Default::default())?;
    // One row's logits at a time (the chunk is smaller than any row).
    let chunked = whole.clone().with_execution(Execution {
        score_chunk_elements: 1,
        ..Execution::default()
    });
    let lora = LoraConfig::new(2, 4.0, vec![Target::QProj, Target::VProj])?;
    let adapters =
        Adapters::<Train>::init(&whole, lora, &mut PolicyRng::from_seed(5), whole.device());
    let prompts = vec![vec![1, 40, 41], vec![5, 6], vec![1, 40, 41], vec![7]];
    let completions = vec![vec![3, 4, 5], vec![9], vec![3, 8], vec![2, 2, 2]];
    let run = |policy: &Policy<Train>| -> anyhow::Result<(Vec<f32>, Vec<f32>, Vec<f32>)> {
        let (logp, entropy) = policy.score_with_entropy(
            Some(&adapters),
            &prompts,
            &completions,
            0.7,
            hr_policy::Entropy::Detached,
        )?;
        let scores = host_f32(logp.clone())?;
        let entropy = host_f32(entropy)?;
        let grads = logp.sum().backward();
        let q = adapters.layers[0].slots[0].as_ref().expect("q");
        let grad = host_f32(q.a.grad(&grads).expect("grad"))?;
        Ok((scores, entropy, grad))
    };
    let (a, b) = (run(&whole)?, run(&chunked)?);
    // Bit for bit: each row's products and reductions do not depend on the other rows.
    let same = |x: &[f32], y: &[f32], what: &str| {
        assert_eq!(x.len(), y.len(), "{what}");
        for (u, v) in x.iter().zip(y) {
            assert_eq!(u.to_bits(), v.to_bits(), "{what}: {u} vs {v}");
        }
    };
    same(&a.0, &b.0, "scores");
    same(&a.1, &b.1, "entropy");
    same(&a.2, &b.2, "gradient");
    Ok(())
}

/// DoRA holds `‖W + ΔW‖` constant for gradients, as PEFT does: at initialisation (B = 0,
/// `m = ‖W‖`, so the factor is exactly 1) its gradients for A and B are plain LoRA's, bit for bit,
/// and its magnitudes get gradients of their own. Were the norm differentiated, B's gradient
/// would gain a term through it. On Qwen2, whose q/k/v carry biases.
#[test]
fn dora_holds_the_norm_constant_for_gradients() -> anyhow::Result<()> {
    type Train = Autodiff<Cpu>;
    let dir = tempfile::tempdir()?;
    let spec = TinySpec {
        model_type: "qwen2",
        ..TinySpec::default()
    };
    write_tiny_model(dir.path(), &spec);
    let policy = Policy::<Train>::load(dir.path(), &Default::default())?;
    // The gradients of layer 0's v_proj adapter: A, B and DoRA's magnitude.
    type Grads = (Vec<f32>, Vec<f32>, Option<Vec<f32>>);
    let grads_of = |dora: bool| -> anyhow::Result<Grads> {
        let lora = LoraConfig::new(2, 4.0, vec![Target::QProj, Target::VProj])?.with_dora(dora);
        let adapters =
            Adapters::<Train>::init(&policy, lora, &mut PolicyRng::from_seed(3), policy.device());
        let logp = policy.score(Some(&adapters), &[vec![3, 4, 5]], &[vec![6, 7, 8]], 1.0)?;
        let grads = logp.sum().backward();
        let v = adapters.layers[0].slots[2]
            .as_ref()
            .expect("v_proj adapter");
        let grad = |p: &burn::module::Param<burn::tensor::Tensor<Train, 2>>| {
            host_f32(p.grad(&grads).expect("a gradient"))
        };
        Ok((
            grad(&v.a)?,
            grad(&v.b)?,
            v.magnitude.as_ref().map(grad).transpose()?,
        ))
    };
    let (lora_a, lora_b, none) = grads_of(false)?;
    let (dora_a, dora_b, magnitude) = grads_of(true)?;
    assert!(none.is_none());
    assert!(lora_b.iter().any(|g| *g != 0.0));
    assert_eq!((dora_a, dora_b), (lora_a, lora_b));
    let magnitude = magnitude.expect("DoRA's magnitude has a gradient");
    assert!(magnitude.iter().any(|g| *g != 0.0), "{magnitude:?}");
    Ok(())
}

/// LoRA dropout acts in training passes only: `for_training(seed)` drops the adapters' input with
/// masks that follow the seed alone, the adapters as they are drop nothing, and `p = 0` drops
/// nothing anywhere.
#[test]
fn lora_dropout_acts_in_training_passes_with_masks_that_follow_the_seed() -> anyhow::Result<()> {
    let dir = tempfile::tempdir()?;
    let (_, policy) = tiny(dir.path(), &TinySpec::default())?;
    let logits = |adapters: &Adapters<Cpu>| -> anyhow::Result<Vec<f32>> {
        Ok(host_f32(
            policy.logits(Some(adapters), &[vec![1, 40, 41, 42, 7]])?,
        )?)
    };
    for p in [0.0, 0.3] {
        let lora =
            LoraConfig::new(2, 4.0, vec![Target::QProj, Target::DownProj])?.with_dropout(p)?;
        let mut adapters =
            Adapters::<Cpu>::init(&policy, lora, &mut PolicyRng::from_seed(3), policy.device());
        // Non-zero B, so the adapters' input matters.
        for layer in &mut adapters.layers {
            for pair in layer.slots.iter_mut().flatten() {
                pair.b = pair.b.clone().map(|b| b.ones_like().mul_scalar(0.1));
            }
        }
        let plain = logits(&adapters)?;
        let one = logits(&adapters.for_training(7))?;
        assert_eq!(one, logits(&adapters.for_training(7))?, "p = {p}");
        let other = logits(&adapters.for_training(8))?;
        if p == 0.0 {
            assert_eq!((&one, &other), (&plain, &plain));
        } else {
            assert_ne!(one, plain);
            assert_ne!(one, other);
        }
    }
    Ok(())
}
