//! Data-parallel steps keyed by shard: four shards stepped by one rank, by two and by four give
//! the same episodes, metrics and adapter, optimizer and RNG bytes at every step, with μ = 2,
//! several micro-batches per shard, LoRA dropout, the high-entropy mask and adaptive entropy
//! control (everything a rank must exchange); a run resumed at another rank count continues
//! bit for bit.

use std::collections::BTreeMap;
use std::sync::{Arc, Barrier, Mutex, MutexGuard, PoisonError};

use burn::backend::{Autodiff, Flex};
use hr_env::{Environment, FixtureEnvironment, FixtureKind, Task, fixture_tasks};
use hr_grpo::{
    AdamWSettings, AdaptiveEntropy, Exchange, GrpoConfig, GrpoError, LossConfig, LrSchedule,
    NativeState, RolloutConfig, StepReport, Trainer,
};
use hr_policy::{Adapters, ChatTokenizer, LoraConfig, Policy, PolicyRng, Target};
use hr_tests::tiny_model::{TinySpec, write_tiny_model};

type B = Autodiff<Flex>;

const SHARDS: usize = 4;

fn config() -> GrpoConfig {
    GrpoConfig {
        rollout: RolloutConfig {
            num_generations: 4,
            max_completion_length: 8,
            max_turn_tokens: 8,
            max_turns: 1,
            ..RolloutConfig::default()
        },
        advantage: Default::default(),
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
            decay: hr_grpo::Decay::Cosine,
            total_steps: 4,
        },
        max_grad_norm: Some(1.0),
        // Two micro-batches per shard.
        gradient_accumulation_steps: 2 * SHARDS,
        mask_truncated_completions: false,
        shards: SHARDS,
    }
}

/// Only one rank computes at a time (the others wait in the exchange): trainers computing at
/// once in one process were seen to differ in the last bits (`resume.rs`), while the product runs
/// a rank per process.
static COMPUTE: Mutex<()> = Mutex::new(());

fn compute() -> MutexGuard<'static, ()> {
    COMPUTE.lock().unwrap_or_else(PoisonError::into_inner)
}

/// An all-gather between threads: each rank leaves its bytes in its slot, and all read once every
/// slot is filled.
struct Room {
    slots: Mutex<Vec<Vec<u8>>>,
    barrier: Barrier,
}

struct Rank {
    rank: usize,
    room: Arc<Room>,
    turn: Option<MutexGuard<'static, ()>>,
}

impl Exchange for Rank {
    fn rank(&self) -> usize {
        self.rank
    }

    fn ranks(&self) -> usize {
        self.room.slots.lock().map_or(0, |s| s.len())
    }

    fn all_gather(&mut self, bytes: Vec<u8>) -> Result<Vec<Vec<u8>>, GrpoError> {
        self.room.slots.lock().map_err(|_| poisoned())?[self.rank] = bytes;
        self.turn = None;
        self.room.barrier.wait();
        let all = self.room.slots.lock().map_err(|_| poisoned())?.clone();
        self.room.barrier.wait();
        self.turn = Some(compute());
        Ok(all)
    }
}

fn poisoned() -> GrpoError {
    GrpoError::Exchange("a rank panicked".to_owned())
}

fn trainer(model: &std::path::Path, state: Option<&NativeState>) -> anyhow::Result<Trainer<B>> {
    let policy = Policy::<B>::load(model, &Default::default())?;
    let tokenizer = ChatTokenizer::from_file(&model.join("tokenizer.json"))?;
    if let Some(state) = state {
        return Ok(Trainer::resume(policy, tokenizer, config(), state, model)?);
    }
    let lora = LoraConfig::new(2, 4.0, vec![Target::QProj, Target::VProj, Target::DownProj])?
        .with_dropout(0.1)?;
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

/// What a step must give alike on every rank count: the episodes, advantages and every metric
/// but the wall-clock ones.
type Seen = (Vec<hr_grpo::Episode>, Vec<f64>, BTreeMap<String, u64>);

fn seen(report: StepReport) -> Seen {
    let metrics = report
        .metrics
        .into_iter()
        .filter(|(k, _)| !k.starts_with("timing/") && k != "tokens_per_second")
        .map(|(k, v)| (k, v.to_bits()))
        .collect();
    (report.episodes, report.advantages, metrics)
}

/// `steps` steps at `ranks` ranks, from `state` or fresh: each rank's steps and final state.
fn run(
    model: &std::path::Path,
    tasks: &[Task],
    ranks: usize,
    steps: usize,
    state: Option<&NativeState>,
) -> Vec<(Vec<Seen>, NativeState)> {
    let room = Arc::new(Room {
        slots: Mutex::new(vec![Vec::new(); ranks]),
        barrier: Barrier::new(ranks),
    });
    std::thread::scope(|scope| {
        let handles: Vec<_> = (0..ranks)
            .map(|rank| {
                let room = Arc::clone(&room);
                scope.spawn(move || -> anyhow::Result<(Vec<Seen>, NativeState)> {
                    let mut me = Rank {
                        rank,
                        room,
                        turn: Some(compute()),
                    };
                    let mut t = trainer(model, state)?;
                    let mut out = Vec::new();
                    for _ in 0..steps {
                        out.push(seen(t.step_with(tasks, &mut fixture, &mut me)?));
                    }
                    Ok((out, t.capture("tiny")?))
                })
            })
            .collect();
        handles
            .into_iter()
            .map(|h| h.join().expect("rank thread").expect("rank"))
            .collect()
    })
}

#[test]
fn one_two_and_four_ranks_give_the_same_steps_and_state_and_resume_across_counts() {
    let dir = tempfile::tempdir().expect("tempdir");
    let model = dir.path().join("model");
    write_tiny_model(&model, &TinySpec::default());
    let tasks = fixture_tasks(FixtureKind::Digits, SHARDS * 2, 3);

    let alone = run(&model, &tasks, 1, 3, None).remove(0);
    for ranks in [2, 4] {
        for (rank, (steps, state)) in run(&model, &tasks, ranks, 3, None).iter().enumerate() {
            for (i, (ours, theirs)) in steps.iter().zip(&alone.0).enumerate() {
                assert!(
                    ours.0 == theirs.0,
                    "{ranks} ranks, rank {rank}: step {i}'s episodes"
                );
                assert_eq!(
                    ours.1, theirs.1,
                    "{ranks} ranks, rank {rank}: step {i}'s advantages"
                );
                assert_eq!(
                    ours.2, theirs.2,
                    "{ranks} ranks, rank {rank}: step {i}'s metrics"
                );
            }
            assert!(
                *state == alone.1,
                "{ranks} ranks, rank {rank}: the state after 3 steps"
            );
        }
    }

    // Stopped after a step at two ranks, resumed at four (and at one): steps 2-3 are the
    // uninterrupted run's.
    let first = run(&model, &tasks, 2, 1, None).remove(0);
    for ranks in [4, 1] {
        let resumed = run(&model, &tasks, ranks, 2, Some(&first.1)).remove(0);
        assert!(
            resumed.0 == alone.0[1..],
            "resumed at {ranks} ranks: steps 2-3"
        );
        assert!(resumed.1 == alone.1, "resumed at {ranks} ranks: the state");
    }
}

#[test]
fn shards_that_do_not_divide_the_tasks_or_ranks_that_do_not_divide_the_shards_are_refused() {
    let dir = tempfile::tempdir().expect("tempdir");
    let model = dir.path().join("model");
    write_tiny_model(&model, &TinySpec::default());
    let _turn = compute();
    let mut t = trainer(&model, None).expect("trainer");
    let tasks = fixture_tasks(FixtureKind::Digits, 6, 3);
    let err = t
        .step(&tasks, &mut fixture)
        .expect_err("6 tasks in 4 shards");
    assert!(err.to_string().contains("parallel.shards"), "{err}");
    assert_eq!(t.step_index(), 0, "nothing was stepped");
}
