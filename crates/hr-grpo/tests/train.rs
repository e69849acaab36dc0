//! GRPO steps on a tiny random model with the fixture environment: determinism, multi-turn
//! masking, and learning.
#![allow(clippy::print_stderr)]

use std::collections::BTreeMap;

use burn::backend::{Autodiff, Flex};
use hr_env::{
    EnvError, Environment, FixtureEnvironment, FixtureKind, Observation, StepOutcome, Task,
    fixture_tasks,
};
use hr_grpo::{
    AdamWSettings, AdvantageConfig, Decay, EnvironmentFactory, GrpoConfig, GrpoError, LossConfig,
    LrSchedule, RolloutConfig, Trainer,
};
use hr_policy::{
    Adapters, ChatTokenizer, Execution, LoraConfig, Policy, PolicyRng, Target, save_adapters,
};
use hr_tests::tiny_model::{TinySpec, write_tiny_model};

type B = Autodiff<Flex>;

fn config(max_turns: usize) -> GrpoConfig {
    GrpoConfig {
        rollout: RolloutConfig {
            num_generations: 4,
            max_completion_length: 8,
            max_turn_tokens: 8,
            max_turns,
            ..RolloutConfig::default()
        },
        advantage: AdvantageConfig::default(),
        loss: LossConfig {
            max_completion_length: 8,
            ..LossConfig::default()
        },
        num_iterations: 1,
        adamw: AdamWSettings {
            weight_decay: 0.0,
            ..AdamWSettings::default()
        },
        schedule: LrSchedule {
            learning_rate: 2e-2,
            warmup_steps: 0,
            decay: Decay::Constant,
            total_steps: 50,
        },
        max_grad_norm: Some(1.0),
        gradient_accumulation_steps: 1,
        mask_truncated_completions: false,
        shards: 1,
    }
}

fn trainer(dir: &std::path::Path, config: GrpoConfig) -> anyhow::Result<Trainer<B>> {
    trainer_in_lanes(dir, config, 1)
}

/// A trainer whose policy decodes, and whose chunks are back-propagated, in `lanes` lanes.
fn trainer_in_lanes(
    dir: &std::path::Path,
    config: GrpoConfig,
    lanes: usize,
) -> anyhow::Result<Trainer<B>> {
    write_tiny_model(dir, &TinySpec::default());
    let device = Default::default();
    let policy = Policy::<B>::load(dir, &device)?.with_execution(Execution {
        lanes,
        ..Execution::default()
    });
    let tokenizer = ChatTokenizer::from_file(&dir.join("tokenizer.json"))?;
    let lora = LoraConfig::new(4, 8.0, Target::ALL.to_vec())?;
    let adapters = Adapters::init(&policy, lora, &mut PolicyRng::from_seed(11), &device);
    Ok(Trainer::new(
        policy,
        tokenizer,
        adapters,
        PolicyRng::from_seed(5),
        config,
    )?)
}

fn fixture() -> Result<Box<dyn Environment>, GrpoError> {
    Ok(Box::new(FixtureEnvironment::new()))
}

#[test]
fn the_same_seeds_give_the_same_steps_and_adapters() -> anyhow::Result<()> {
    let dir = tempfile::tempdir()?;
    let tasks = fixture_tasks(FixtureKind::Arithmetic, 2, 1);
    let mut runs = Vec::new();
    // Twice in one lane, then twice in two (chunks back-propagated side by side).
    for (run, lanes) in [(0, 1), (1, 1), (2, 2), (3, 2)] {
        let model = dir.path().join(format!("model{run}"));
        // A row per chunk (a budget of one byte), so that two lanes have chunks to run side by
        // side.
        let mut t = trainer_in_lanes(&model, config(1), lanes)?.with_activation_budget(1);
        let mut rewards = Vec::new();
        for _ in 0..3 {
            let report = t.step(&tasks, &mut fixture)?;
            assert_eq!(report.episodes.len(), 8);
            assert!(report.metrics["grad_norm"].is_finite());
            rewards.push((report.episodes, report.metrics["loss"]));
        }
        let out = dir.path().join(format!("adapter{run}"));
        save_adapters(t.adapters(), "tiny", &out)?;
        runs.push((
            rewards,
            std::fs::read(out.join("adapter_model.safetensors"))?,
            t.rng().state(),
        ));
    }
    assert_eq!(runs[0], runs[1]);
    assert_eq!(runs[2], runs[3]);
    Ok(())
}

/// Continues once with a reply, then ends with reward 1.
struct TwoTurns(usize);

impl Environment for TwoTurns {
    fn reset(&mut self, _task: &Task, _seed: u64) -> Result<Observation, EnvError> {
        self.0 = 0;
        Ok(Observation {
            text: "start".into(),
            raw: serde_json::Value::Null,
        })
    }
    fn step(&mut self, _action: &str) -> Result<StepOutcome, EnvError> {
        self.0 += 1;
        let text = if self.0 == 1 {
            "tool says 7".to_owned()
        } else {
            String::new()
        };
        Ok(StepOutcome {
            observation: Observation {
                text,
                raw: serde_json::Value::Null,
            },
            reward: 1.0,
            done: self.0 == 2,
        })
    }
    fn close(&mut self) -> Result<(), EnvError> {
        Ok(())
    }
}

#[test]
fn environment_replies_are_in_the_sequence_but_masked_out_of_the_loss() -> anyhow::Result<()> {
    let dir = tempfile::tempdir()?;
    let mut cfg = config(2);
    cfg.rollout.max_completion_length = 64;
    cfg.rollout.max_turn_tokens = 6;
    let mut t = trainer(dir.path(), cfg)?;
    let tasks = fixture_tasks(FixtureKind::Arithmetic, 1, 1);
    let tokenizer = ChatTokenizer::from_file(&dir.path().join("tokenizer.json"))?;
    let reply =
        tokenizer.encode("<|im_start|>user\ntool says 7<|im_end|>\n<|im_start|>assistant\n")?;
    let mut two_turns = || -> Result<Box<dyn Environment>, GrpoError> { Ok(Box::new(TwoTurns(0))) };
    let report = t.step(&tasks, &mut two_turns)?;
    for e in &report.episodes {
        assert_eq!((e.turns, e.done, e.reward), (2, true, 2.0));
        let masked: Vec<u32> = e
            .completion
            .iter()
            .zip(&e.policy_mask)
            .filter(|(_, m)| !**m)
            .map(|(t, _)| *t)
            .collect();
        assert!(masked.ends_with(&reply), "the reply is masked: {masked:?}");
        assert!(e.policy_mask.first() == Some(&true) && e.policy_mask.last() == Some(&true));
    }
    // TRL's clipped completion: the last turn hit a token limit (6 here) without a stop token,
    // whether or not the environment ended the episode (it ended every one).
    let config: serde_json::Value =
        serde_json::from_slice(&std::fs::read(dir.path().join("config.json"))?)?;
    let mut stops = tokenizer.stop_token_ids();
    stops.extend(config["eos_token_id"].as_u64().map(|t| t as u32));
    let cut: Vec<bool> = report
        .episodes
        .iter()
        .map(|e| {
            let last_turn = e.policy_mask.iter().rev().take_while(|m| **m).count();
            last_turn == 6 && !e.completion.last().is_some_and(|t| stops.contains(t))
        })
        .collect();
    assert_eq!(
        cut,
        report
            .episodes
            .iter()
            .map(|e| e.truncated)
            .collect::<Vec<_>>()
    );
    assert!(
        cut.iter().any(|c| *c),
        "some last turns are cut at 6 tokens"
    );
    let share = cut.iter().filter(|c| **c).count() as f64 / cut.len() as f64;
    assert_eq!(report.metrics["completions/clipped_ratio"], share);
    // Equal rewards in every group: zero advantages, all groups zero-std.
    assert_eq!(report.metrics["frac_reward_zero_std"], 1.0);
    assert!(report.advantages.iter().all(|a| *a == 0.0));
    Ok(())
}

#[test]
fn the_tiny_model_learns_the_digits_task() -> anyhow::Result<()> {
    let dir = tempfile::tempdir()?;
    let mut cfg = config(1);
    cfg.schedule.learning_rate = 5e-2;
    let mut t = trainer(dir.path(), cfg)?;
    let tasks = fixture_tasks(FixtureKind::Digits, 4, 3);
    let mut rewards = Vec::new();
    for _ in 0..50 {
        rewards.push(t.step(&tasks, &mut fixture)?.metrics["reward"]);
    }
    let first = rewards[..10].iter().sum::<f64>() / 10.0;
    let last = rewards[40..].iter().sum::<f64>() / 10.0;
    eprintln!("mean reward steps 1-10: {first:.3}, steps 41-50: {last:.3}");
    assert!(
        last > first + 0.1 && last > 1.5 * first,
        "steps 1-10: {first:.3}, steps 41-50: {last:.3}"
    );
    Ok(())
}

#[test]
fn gradient_accumulation_and_chunked_backward_give_the_same_update_and_entropy_is_logged()
-> anyhow::Result<()> {
    let dir = tempfile::tempdir()?;
    let tasks = fixture_tasks(FixtureKind::Digits, 2, 3);
    let mut adapters = Vec::new();
    let mut losses = Vec::new();
    let mut logged = Vec::new();
    // One micro-batch; three; one back-propagated a row at a time (a budget of one byte), in
    // one lane and in two side by side; the first, third and fourth with a reference (β > 0),
    // two iterations (μ = 2) and the `grpo` aggregation, whose old and reference log-probs the
    // chunks take their rows of; and again with sequence-level weights, δ, the off-policy and
    // high-entropy masks and the entropy bonus, whose quantile and bonus are over the whole
    // micro-batch however it is chunked.
    let runs = [
        (1, None, Variant::Plain, 1),
        (3, None, Variant::Plain, 1),
        (1, Some(1), Variant::Plain, 1),
        (1, Some(1), Variant::Plain, 2),
    ];
    let tricky = [
        (1, None, Variant::Tricky, 1),
        (1, Some(1), Variant::Tricky, 1),
        (1, Some(1), Variant::Tricky, 2),
    ];
    let variants = [
        (1, None, Variant::Trl116, 1),
        (1, Some(1), Variant::Trl116, 1),
        (1, Some(1), Variant::Trl116, 2),
    ];
    for (k, budget, variant, lanes) in runs.into_iter().chain(tricky).chain(variants) {
        let mut cfg = config(1);
        cfg.gradient_accumulation_steps = k;
        if variant != Variant::Plain {
            cfg.loss.beta = 0.04;
            cfg.loss.loss_type = hr_grpo::LossType::Grpo;
            cfg.num_iterations = 2;
        }
        if variant == Variant::Trl116 {
            cfg.loss.loss_type = hr_grpo::LossType::Luspo;
            cfg.loss.importance_sampling_level = hr_grpo::ImportanceSamplingLevel::Sequence;
            cfg.loss.delta = Some(1.5);
            cfg.loss.off_policy_mask_threshold = Some(0.01);
            cfg.loss.top_entropy_quantile = 0.5;
            cfg.loss.entropy_coef = 0.05;
        }
        let name = format!("m{k}-{budget:?}-{variant:?}-{lanes}");
        let mut t = trainer_in_lanes(&dir.path().join(&name), cfg, lanes)?;
        if let Some(bytes) = budget {
            t = t.with_activation_budget(bytes);
        }
        let report = t.step(&tasks, &mut fixture)?;
        losses.push(report.metrics["loss"]);
        logged.push(report.metrics.clone());
        let entropy = report.metrics["entropy"];
        assert!(
            entropy > 0.0 && entropy < (hr_tests::tiny_model::VOCAB as f64).ln() + 1e-6,
            "entropy {entropy}"
        );
        let out = dir.path().join(format!("a-{name}"));
        save_adapters(t.adapters(), "tiny", &out)?;
        let bytes = std::fs::read(out.join("adapter_model.safetensors"))?;
        adapters.push(hr_policy::read_f32_safetensors(&out, &bytes)?);
    }
    let worst = |a: &hr_policy::HostTensors, b: &hr_policy::HostTensors| {
        let mut worst = 0.0f32;
        for (name, (_, x)) in a {
            for (x, y) in x.iter().zip(&b[name].1) {
                worst = worst.max((x - y).abs());
            }
        }
        worst
    };
    // Same update up to float summation order, and the same loss.
    // The loss statistics are each micro-batch's, however it is chunked.
    for (first, other) in [(0, 2), (0, 3), (4, 5), (4, 6), (7, 8), (7, 9)] {
        for (key, value) in &logged[first] {
            let loss_stat = ["clip_ratio", "kl", "entropy", "policy_loss"]
                .iter()
                .any(|p| key.starts_with(p));
            if loss_stat {
                let theirs = logged[other].get(key).copied().unwrap_or(f64::NAN);
                assert!(
                    (value - theirs).abs() < 1e-6,
                    "runs {first} and {other}: {key} {value} vs {theirs}"
                );
            }
        }
    }
    for (first, other) in [(0, 1), (0, 2), (0, 3), (4, 5), (4, 6), (7, 8), (7, 9)] {
        let w = worst(&adapters[first], &adapters[other]);
        assert!(w < 1e-5, "runs {first} and {other}: largest difference {w}");
        assert!((losses[first] - losses[other]).abs() < 1e-6, "{losses:?}");
    }
    assert!(
        worst(&adapters[0], &adapters[4]) > 1e-6,
        "β, μ and the aggregation matter"
    );
    assert!(
        worst(&adapters[4], &adapters[7]) > 1e-6,
        "the TRL 1.16 variants matter"
    );
    Ok(())
}

/// The loss settings of a run in the test above.
#[derive(Debug, Clone, Copy, PartialEq)]
enum Variant {
    /// The defaults.
    Plain,
    /// β > 0, μ = 2, `grpo`.
    Tricky,
    /// Those with `luspo` at sequence level, δ, the off-policy and high-entropy masks and the
    /// entropy bonus.
    Trl116,
}

#[test]
fn plain_prompts_are_the_task_text_without_the_chat_template() -> anyhow::Result<()> {
    let dir = tempfile::tempdir()?;
    let mut plain = config(1);
    plain.rollout.prompt_format = hr_grpo::PromptFormat::Plain;
    let mut t = trainer(dir.path(), plain)?;
    let tasks = fixture_tasks(FixtureKind::Arithmetic, 1, 2);
    let report = t.step(&tasks, &mut fixture)?;
    let tokenizer = ChatTokenizer::from_file(&dir.path().join("tokenizer.json"))?;
    let question = tasks[0].payload["question"].as_str().unwrap_or_default();
    for e in &report.episodes {
        assert_eq!(e.prompt, tokenizer.encode(question)?);
    }
    Ok(())
}

/// Ends at once, rewarded by the reply's length in bytes.
struct ByLength;

impl Environment for ByLength {
    fn reset(&mut self, _task: &Task, _seed: u64) -> Result<Observation, EnvError> {
        Ok(Observation {
            text: "say something".into(),
            raw: serde_json::Value::Null,
        })
    }
    fn step(&mut self, action: &str) -> Result<StepOutcome, EnvError> {
        Ok(StepOutcome {
            observation: Observation {
                text: String::new(),
                raw: serde_json::Value::Null,
            },
            reward: action.len() as f64,
            done: true,
        })
    }
    fn close(&mut self) -> Result<(), EnvError> {
        Ok(())
    }
}

#[test]
fn mask_truncated_completions_leaves_cut_episodes_out_of_the_loss() -> anyhow::Result<()> {
    let dir = tempfile::tempdir()?;
    let tasks = fixture_tasks(FixtureKind::Arithmetic, 2, 1);
    // Rewarded by the reply's bytes: cut completions still differ in reward.
    let mut by_length = || -> Result<Box<dyn Environment>, GrpoError> { Ok(Box::new(ByLength)) };
    // Two new tokens: the tiny model's random completions are all cut, none ends on a stop
    // token.
    let short = |mask: bool| {
        let mut c = config(1);
        c.rollout.max_completion_length = 2;
        c.rollout.max_turn_tokens = 2;
        c.loss.max_completion_length = 2;
        c.mask_truncated_completions = mask;
        c
    };
    let adapter = |t: &Trainer<B>, name: &str| -> anyhow::Result<Vec<u8>> {
        let out = dir.path().join(name);
        save_adapters(t.adapters(), "tiny", &out)?;
        Ok(std::fs::read(out.join("adapter_model.safetensors"))?)
    };
    let mut results = Vec::new();
    for mask in [false, true] {
        let mut t = trainer(&dir.path().join(format!("model-{mask}")), short(mask))?;
        let before = adapter(&t, &format!("before-{mask}"))?;
        let report = t.step(&tasks, &mut by_length)?;
        assert!(
            report.episodes.iter().all(|e| e.truncated),
            "every episode is cut"
        );
        results.push((
            before == adapter(&t, &format!("after-{mask}"))?,
            report.metrics["grad_norm"],
        ));
    }
    let ((unmasked_same, unmasked_norm), (masked_same, masked_norm)) = (results[0], results[1]);
    assert!(
        !unmasked_same && unmasked_norm > 0.0,
        "without the mask the step learns"
    );
    assert!(
        masked_same && masked_norm == 0.0,
        "with it nothing counts: {masked_norm}"
    );
    Ok(())
}

/// Fixture episodes plus one batch reward that applies to no episode of the first task and to
/// every other one, and is called once per batch with the completions in episode order.
struct HalfScored {
    calls: Vec<usize>,
    /// What its reward "logs" with TRL's `log_metric`, by name.
    logged: &'static str,
}

impl EnvironmentFactory for HalfScored {
    fn create(&mut self) -> Result<Box<dyn Environment>, GrpoError> {
        fixture()
    }

    fn score_batch(
        &mut self,
        batch: &hr_env::RewardBatch<'_>,
    ) -> Result<Vec<hr_env::BatchScores>, GrpoError> {
        self.calls.push(batch.completions.len());
        let first = batch.rows[0];
        let scores = batch
            .rows
            .iter()
            .zip(batch.completion_ids)
            .map(|(row, ids)| (*row != first).then_some(ids.len() as f64 / 8.0))
            .collect();
        Ok(vec![("length".to_owned(), 2.0, scores)])
    }

    fn reward_metrics(&mut self) -> Result<BTreeMap<String, f64>, GrpoError> {
        Ok(BTreeMap::from([(self.logged.to_owned(), 0.25)]))
    }
}

#[test]
fn batch_rewards_score_once_per_step_and_none_leaves_an_episode_out() -> anyhow::Result<()> {
    let dir = tempfile::tempdir()?;
    let tasks = fixture_tasks(FixtureKind::Digits, 2, 3);
    let mut t = trainer(dir.path(), config(1))?;
    let mut factory = HalfScored {
        calls: Vec::new(),
        logged: "judge/agreement",
    };
    let report = t.step(&tasks, &mut factory)?;
    assert_eq!(
        factory.calls,
        [8],
        "one call for the step's 2 tasks × 4 episodes"
    );
    // The fixture reports no reward parts, so the first task's episodes have no reward that
    // applies: unscorable, advantage 0; the others carry the weighted batch reward.
    for (i, episode) in report.episodes.iter().enumerate() {
        assert_eq!(episode.scorable, i >= 4, "episode {i}");
        if i < 4 {
            assert_eq!((episode.reward, report.advantages[i]), (0.0, 0.0));
        } else {
            let part = episode.reward_parts["length"];
            assert!(
                (part - episode.completion.len() as f64 / 8.0).abs() < 1e-12,
                "{part}"
            );
        }
    }
    assert!(report.metrics["reward"].is_finite() && report.metrics["rewards/length/mean"] > 0.0);
    // What the reward logged is a metric under its own name, as TRL logs it; one of the
    // trainer's own names is refused, not overwritten.
    assert_eq!(report.metrics["judge/agreement"], 0.25);
    // Nor a metrics row's own fields.
    for name in ["loss", "epoch", "step"] {
        factory.logged = name;
        let err = t
            .step(&tasks, &mut factory)
            .expect_err("collides")
            .to_string();
        assert!(
            err.contains(&format!("log_metric({name:?}")) && err.contains("another name"),
            "{err}"
        );
    }
    Ok(())
}
