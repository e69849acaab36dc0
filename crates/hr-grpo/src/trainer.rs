//! One GRPO optimiser step: rollouts on the inference copy of the policy, group advantages, the
//! scoring pass with gradients through the LoRA adapters only, μ iterations of the clipped loss
//! with AdamW, global gradient-norm clipping and the scheduled learning rate, and TRL's metrics.

mod optimise;
mod stats;

use std::collections::BTreeMap;
use std::time::Instant;

use burn::module::AutodiffModule;
use burn::optim::adaptor::OptimizerAdaptor;
use burn::optim::{AdamW, AdamWConfig, GradientsParams};
use burn::tensor::Tensor;
use burn::tensor::backend::AutodiffBackend;
use hr_env::Task;
use hr_policy::{Adapters, ChatTokenizer, LoraPair, Policy, PolicyRng, Target};

use crate::exchange::{Alone, Exchange, ParallelFault, check_layout, gather, owned};
use crate::rollout::{EnvironmentFactory, Episode, RewardState, RolloutConfig, rollouts};
use crate::{AdvantageConfig, EntropyControl, GrpoError, LossConfig, LrSchedule, advantages};
use optimise::ACTIVATION_BUDGET;

/// AdamW's constants (set explicitly: Burn's defaults differ from torch's).
#[derive(Debug, Clone, PartialEq)]
pub struct AdamWSettings {
    /// β1.
    pub beta1: f64,
    /// β2.
    pub beta2: f64,
    /// ε.
    pub epsilon: f64,
    /// Decoupled weight decay.
    pub weight_decay: f64,
}

impl Default for AdamWSettings {
    fn default() -> Self {
        Self {
            beta1: 0.9,
            beta2: 0.999,
            epsilon: 1e-8,
            weight_decay: 0.01,
        }
    }
}

/// Everything one GRPO step needs.
#[derive(Debug, Clone, PartialEq)]
pub struct GrpoConfig {
    /// Sampling of episodes.
    pub rollout: RolloutConfig,
    /// Advantage computation.
    pub advantage: AdvantageConfig,
    /// The loss.
    pub loss: LossConfig,
    /// μ: optimiser updates per batch of rollouts (old log-probs are snapshotted when > 1).
    pub num_iterations: usize,
    /// AdamW constants.
    pub adamw: AdamWSettings,
    /// Learning-rate schedule.
    pub schedule: LrSchedule,
    /// Clip the global gradient norm to this (TRL `max_grad_norm`, 1.0); `None` disables.
    pub max_grad_norm: Option<f64>,
    /// Micro-batches per optimiser step: the step's episodes are scored and back-propagated in
    /// this many parts whose gradients are summed (memory for time; the update is the same).
    pub gradient_accumulation_steps: usize,
    /// TRL's `mask_truncated_completions`: an episode cut by a token limit counts for nothing.
    pub mask_truncated_completions: bool,
    /// S: the step's tasks are cut into this many contiguous shards (a power of two dividing
    /// the tasks), each sampled from its own stream and scored in its own micro-batches, and
    /// their gradients summed as a fixed tree ([`crate::Exchange`]); 1 is one shard, as TRL.
    pub shards: usize,
}

/// What a step did: its rollouts, their advantages and TRL-named metrics.
#[derive(Debug, Clone)]
pub struct StepReport {
    /// The 0-based optimiser step that was taken.
    pub step: u64,
    /// The episodes, `num_generations` per task in task order.
    pub episodes: Vec<Episode>,
    /// One advantage per episode.
    pub advantages: Vec<f64>,
    /// `reward`, `reward_std`, `frac_reward_zero_std`, `kl`, `clip_ratio/*`, `entropy`,
    /// `completions/*`, `learning_rate`, `grad_norm`, `loss`, `num_tokens` (prompt and
    /// completion tokens of all steps so far, as TRL counts them), `step_tokens` (this step's),
    /// `tokens_per_second`,
    /// the step's matrix arithmetic (`flops/forward`, `flops/backward`, and `flops/rollout`, the
    /// forward's part spent sampling), and the wall-clock split
    /// of the step (`timing/*`, seconds; like `tokens_per_second` they are the only values that
    /// differ between identical runs).
    pub metrics: BTreeMap<String, f64>,
}

/// The trainable state of a GRPO run and the step that advances it.
pub struct Trainer<B: AutodiffBackend> {
    policy: Policy<B>,
    tokenizer: ChatTokenizer,
    pub(crate) adapters: Adapters<B>,
    pub(crate) optimizer: OptimizerAdaptor<AdamW, Adapters<B>, B>,
    pub(crate) rng: PolicyRng,
    pub(crate) step: u64,
    /// Prompt and completion tokens of every step so far (TRL's `num_input_tokens_seen`).
    pub(crate) tokens_seen: u64,
    /// The adaptive entropy controller, when the loss has one.
    pub(crate) entropy_control: Option<EntropyControl>,
    config: GrpoConfig,
    /// Bytes of activations a back-propagated chunk may keep ([`ACTIVATION_BUDGET`]).
    activation_budget: usize,
    /// A deliberate bug of data-parallel steps (negative controls only).
    pub(crate) fault: Option<ParallelFault>,
}

impl<B: AutodiffBackend> Trainer<B> {
    /// A trainer at step 0. The settings come from a plan `hr-plan` has validated (G ≥ 2, a
    /// positive temperature, μ ≥ 1, plain prompts single-turn); only the loss's ranges are
    /// checked again here.
    pub fn new(
        policy: Policy<B>,
        tokenizer: ChatTokenizer,
        adapters: Adapters<B>,
        rng: PolicyRng,
        config: GrpoConfig,
    ) -> Result<Self, GrpoError> {
        config.loss.validate()?;
        let a = &config.adamw;
        let optimizer = AdamWConfig::new()
            .with_beta_1(a.beta1 as f32)
            .with_beta_2(a.beta2 as f32)
            .with_epsilon(a.epsilon as f32)
            .with_weight_decay(a.weight_decay as f32)
            .init::<B, Adapters<B>>();
        Ok(Self {
            policy,
            tokenizer,
            adapters,
            optimizer,
            rng,
            step: 0,
            tokens_seen: 0,
            entropy_control: config
                .loss
                .adaptive_entropy
                .map(|_| EntropyControl::new(config.loss.entropy_coef)),
            config,
            activation_budget: ACTIVATION_BUDGET,
            fault: None,
        })
    }

    /// Sets the bytes of activations a back-propagated chunk of a micro-batch may keep (at least
    /// one group of `num_generations` rows per chunk, or one row). Smaller budgets lower peak memory
    /// for smaller products; the update is the same up to float summation order. Default 1.25 GiB.
    #[must_use]
    pub fn with_activation_budget(mut self, bytes: usize) -> Self {
        self.activation_budget = bytes;
        self
    }

    /// Steps with a deliberate bug of data-parallel steps: a negative control that must make a
    /// run diverge from one rank's.
    #[must_use]
    pub fn with_fault(mut self, fault: Option<ParallelFault>) -> Self {
        self.fault = fault;
        self
    }

    /// The adapters being trained.
    pub fn adapters(&self) -> &Adapters<B> {
        &self.adapters
    }

    /// The tokenizer episodes are rendered and decoded with.
    pub fn tokenizer(&self) -> &ChatTokenizer {
        &self.tokenizer
    }

    /// The next step to take (0-based).
    pub fn step_index(&self) -> u64 {
        self.step
    }

    /// The sampling RNG.
    pub fn rng(&self) -> &PolicyRng {
        &self.rng
    }

    /// The sampling RNG itself, e.g. to keep its state intact around calls that must not touch
    /// it (`hr_snapshot::with_rng_preserved`).
    pub fn rng_mut(&mut self) -> &mut PolicyRng {
        &mut self.rng
    }

    /// Episodes of the current adapters on `tasks`, `num_generations` each, sampled from an RNG
    /// seeded with `seed` alone: the trainer's own RNG and state are untouched (an evaluation
    /// during training, as `hessian-recipes evaluate` samples a checkpoint later).
    pub fn episodes_from_seed(
        &self,
        tasks: &[Task],
        envs: &mut dyn EnvironmentFactory,
        num_generations: usize,
        seed: u64,
    ) -> Result<Vec<Episode>, GrpoError> {
        let mut rollout = self.config.rollout.clone();
        rollout.num_generations = num_generations;
        rollouts(
            &self.policy.valid(),
            Some(&self.adapters.valid()),
            &self.tokenizer,
            tasks,
            envs,
            &rollout,
            &mut PolicyRng::from_seed(seed),
            self.reward_state(),
        )
    }

    /// Where the run stands for batch rewards' `trainer_state`.
    fn reward_state(&self) -> RewardState {
        RewardState {
            global_step: self.step,
            max_steps: self.config.schedule.total_steps,
        }
    }

    /// Runs one GRPO step on `tasks` (each sampled `num_generations` times).
    pub fn step(
        &mut self,
        tasks: &[Task],
        envs: &mut dyn EnvironmentFactory,
    ) -> Result<StepReport, GrpoError> {
        self.step_with(tasks, envs, &mut Alone)
    }

    /// Runs one GRPO step on `tasks` as rank `exchange.rank()` of `exchange.ranks()`: it samples
    /// and back-propagates only its own shards, and every rank ends the step with the same
    /// report and the same adapters, equal to one rank's (every rank passes the same tasks).
    pub fn step_with(
        &mut self,
        tasks: &[Task],
        envs: &mut dyn EnvironmentFactory,
        exchange: &mut dyn Exchange,
    ) -> Result<StepReport, GrpoError> {
        check_layout(tasks.len(), self.config.shards, exchange.ranks())?;
        let started = Instant::now();
        let flops = self.policy.flops();
        let g = self.config.rollout.num_generations;
        let lr = self.config.schedule.at(self.step);
        let mut timing = Timing::default();
        let (episodes, logged) = self.sample(tasks, envs, exchange)?;
        timing.rollout = started.elapsed().as_secs_f64();
        let rollout_flops = self.policy.flops().since(&flops).forward;
        // An unscorable episode's reward is NaN here: out of the statistics, advantage 0.
        let rewards: Vec<f64> = episodes
            .iter()
            .map(|e| if e.scorable { e.reward } else { f64::NAN })
            .collect();
        let adv = advantages(&rewards, g, &self.config.advantage)?;
        let (loss_mean, grad_norm, mut metrics) =
            self.optimise(&episodes, &adv, lr, &mut timing, exchange)?;
        self.check_finite(loss_mean, grad_norm)?;
        let step = self.step;
        self.step += 1;
        let policy_tokens: Vec<usize> = episodes
            .iter()
            .map(|e| e.policy_mask.iter().filter(|m| **m).count())
            .collect();
        let total_tokens: usize = episodes
            .iter()
            .map(|e| e.prompt.len() + e.completion.len())
            .sum();
        self.tokens_seen += total_tokens as u64;
        let n = rewards.len() as f64;
        let (mean, std) = mean_std(&rewards);
        let zero_std = rewards
            .chunks(g)
            .filter(|grp| {
                // TRL's nanstd of fewer than two scored rewards is NaN, not zero.
                let scored: Vec<&f64> = grp.iter().filter(|r| !r.is_nan()).collect();
                scored.len() >= 2 && scored.iter().all(|r| *r == scored[0])
            })
            .count() as f64
            / (rewards.len() / g) as f64;
        let elapsed = started.elapsed().as_secs_f64();
        metrics.insert("reward".to_owned(), mean);
        metrics.insert("reward_std".to_owned(), std);
        // Each reward function on its own, under TRL's names.
        let names: std::collections::BTreeSet<&String> = episodes
            .iter()
            .flat_map(|e| e.reward_parts.keys())
            .collect();
        for name in names {
            // Over the episodes it applies to (TRL's nanmean of a function's `None`s).
            let scores: Vec<f64> = episodes
                .iter()
                .map(|e| e.reward_parts.get(name).copied().unwrap_or(f64::NAN))
                .collect();
            let (m, s) = mean_std(&scores);
            metrics.insert(format!("rewards/{name}/mean"), m);
            metrics.insert(format!("rewards/{name}/std"), s);
        }
        metrics.insert("frac_reward_zero_std".to_owned(), zero_std);
        metrics.insert(
            "completions/mean_length".to_owned(),
            policy_tokens.iter().sum::<usize>() as f64 / n,
        );
        metrics.insert(
            "completions/min_length".to_owned(),
            policy_tokens.iter().copied().min().unwrap_or(0) as f64,
        );
        metrics.insert(
            "completions/max_length".to_owned(),
            policy_tokens.iter().copied().max().unwrap_or(0) as f64,
        );
        // TRL's meanings: clipped = cut by a token limit; terminated = ended on a stop token
        // (lengths 0 when none did).
        let terminated: Vec<usize> = episodes
            .iter()
            .zip(&policy_tokens)
            .filter(|(e, _)| !e.truncated)
            .map(|(_, len)| *len)
            .collect();
        metrics.insert(
            "completions/clipped_ratio".to_owned(),
            1.0 - terminated.len() as f64 / n,
        );
        metrics.insert(
            "completions/mean_terminated_length".to_owned(),
            terminated.iter().sum::<usize>() as f64 / terminated.len().max(1) as f64,
        );
        metrics.insert(
            "completions/min_terminated_length".to_owned(),
            terminated.iter().copied().min().unwrap_or(0) as f64,
        );
        metrics.insert(
            "completions/max_terminated_length".to_owned(),
            terminated.iter().copied().max().unwrap_or(0) as f64,
        );
        metrics.insert("learning_rate".to_owned(), lr);
        metrics.insert("grad_norm".to_owned(), grad_norm);
        metrics.insert("loss".to_owned(), loss_mean);
        // TRL's `num_tokens` is the running total; this step's count has its own name.
        metrics.insert("num_tokens".to_owned(), self.tokens_seen as f64);
        metrics.insert("step_tokens".to_owned(), total_tokens as f64);
        metrics.insert(
            "tokens_per_second".to_owned(),
            total_tokens as f64 / elapsed.max(1e-9),
        );
        metrics.insert(
            "completion_tokens".to_owned(),
            policy_tokens.iter().sum::<usize>() as f64,
        );
        timing.record(elapsed, &mut metrics);
        // The step's matrix arithmetic, counted from the model's shapes (hr-policy's flops.rs),
        // over every rank's share.
        let work = self.policy.flops().since(&flops);
        let [forward, backward, rollout] = if exchange.ranks() > 1 {
            gather::<[u64; 3]>(exchange, &[work.forward, work.backward, rollout_flops])?
                .into_iter()
                .fold([0u64; 3], |sum, part| {
                    std::array::from_fn(|i| sum[i].saturating_add(part[i]))
                })
        } else {
            [work.forward, work.backward, rollout_flops]
        };
        metrics.insert("flops/forward".to_owned(), forward as f64);
        metrics.insert("flops/backward".to_owned(), backward as f64);
        metrics.insert("flops/rollout".to_owned(), rollout as f64);
        // What the reward functions logged, under their names as TRL logs them (never over one
        // of the trainer's own, nor over a metrics row's step number or the sampler's epoch).
        for (name, value) in logged {
            if metrics.contains_key(&name) || ["step", "epoch"].contains(&name.as_str()) {
                return Err(GrpoError::Environment(format!(
                    "a reward function called log_metric({name:?}, ...), which is one of the \
                     trainer's own metrics; log it under another name"
                )));
            }
            metrics.insert(name, value);
        }
        Ok(StepReport {
            step,
            episodes,
            advantages: adv,
            metrics,
        })
    }
}

/// What one shard's rollouts gave: its episodes and what its reward functions logged.
#[derive(serde::Serialize, serde::Deserialize)]
struct ShardRollout {
    episodes: Vec<Episode>,
    logged: BTreeMap<String, f64>,
}

impl<B: AutodiffBackend> Trainer<B> {
    /// The step's episodes, `num_generations` per task in task order, and what the reward
    /// functions logged. One shard samples from the trainer's stream; more draw one key from it
    /// and give shard `s` the stream `s` of that key, so a shard samples alike whichever rank
    /// runs it. Each rank samples its own shards and all ranks gather everyone's.
    fn sample(
        &mut self,
        tasks: &[Task],
        envs: &mut dyn EnvironmentFactory,
        exchange: &mut dyn Exchange,
    ) -> Result<(Vec<Episode>, BTreeMap<String, f64>), GrpoError> {
        let (inference, adapters) = (self.policy.valid(), self.adapters.valid());
        let state = self.reward_state();
        let shards = self.config.shards;
        let mut run = |tasks: &[Task], rng: &mut PolicyRng| {
            let episodes = rollouts(
                &inference,
                Some(&adapters),
                &self.tokenizer,
                tasks,
                envs,
                &self.config.rollout,
                rng,
                state,
            )?;
            Ok::<_, GrpoError>(ShardRollout {
                episodes,
                logged: envs.reward_metrics()?,
            })
        };
        if shards == 1 {
            let one = run(tasks, &mut self.rng)?;
            return Ok((one.episodes, one.logged));
        }
        let key = self.rng.next_u64();
        let per = tasks.len() / shards;
        let mine = owned(shards, exchange.rank(), exchange.ranks());
        let first = mine.start;
        let mine = mine
            .map(|s| {
                let stream = match self.fault {
                    Some(ParallelFault::RankKeyedRng) => s - first,
                    _ => s,
                };
                run(
                    &tasks[s * per..(s + 1) * per],
                    &mut PolicyRng::from_seed(key).fork(stream as u64),
                )
            })
            .collect::<Result<Vec<_>, _>>()?;
        let all: Vec<ShardRollout> = gather::<Vec<ShardRollout>>(exchange, &mine)?
            .into_iter()
            .flatten()
            .collect();
        // A reward function's metric: the mean of the shards' means that have it, in shard order.
        let mut sums: BTreeMap<String, (f64, f64)> = BTreeMap::new();
        for (name, value) in all.iter().flat_map(|s| &s.logged) {
            let (sum, count) = sums.entry(name.clone()).or_default();
            *sum += value;
            *count += 1.0;
        }
        let logged = sums
            .into_iter()
            .map(|(name, (sum, count))| (name, sum / count))
            .collect();
        Ok((all.into_iter().flat_map(|s| s.episodes).collect(), logged))
    }

    /// Refuses a step whose loss, gradient norm or updated adapters are not finite (NaN or
    /// infinite): a diverged run must stop before its state is captured, never be sealed.
    fn check_finite(&self, loss: f64, grad_norm: f64) -> Result<(), GrpoError> {
        let diverged = |what: String| GrpoError::Diverged {
            step: self.step + 1,
            what,
        };
        if !loss.is_finite() {
            return Err(diverged(format!("loss {loss}")));
        }
        if !grad_norm.is_finite() {
            return Err(diverged(format!("grad_norm {grad_norm}")));
        }
        // One reduction over every adapter tensor, off the autodiff graph, and one read back: a
        // NaN or infinity anywhere makes the sum non-finite.
        let total = named_params(&self.adapters)
            .into_iter()
            .map(|(_, param)| param.val().inner().abs().sum())
            .reduce(|a, b| a + b);
        if let Some(total) = total {
            let total = total
                .into_data()
                .convert::<f64>()
                .to_vec::<f64>()
                .map_err(|e| GrpoError::Policy(format!("reading the adapter weights: {e:?}")))?;
            if !total.iter().all(|v| v.is_finite()) {
                return Err(diverged("the adapter weights are not finite".to_owned()));
            }
        }
        Ok(())
    }
}

/// Where a step's wall-clock time went, in seconds.
#[derive(Debug, Default)]
struct Timing {
    /// Sampling the episodes (generation and the environments).
    rollout: f64,
    /// Back-propagation.
    backward: f64,
    /// Gradient clipping and AdamW.
    optimizer: f64,
}

impl Timing {
    fn record(&self, step: f64, metrics: &mut BTreeMap<String, f64>) {
        for (key, value) in [
            ("timing/step_s", step),
            ("timing/rollout_s", self.rollout),
            // The rest: scoring passes (reference and old policy included) and the loss.
            (
                "timing/forward_s",
                step - self.rollout - self.backward - self.optimizer,
            ),
            ("timing/backward_s", self.backward),
            ("timing/optimizer_s", self.optimizer),
        ] {
            metrics.insert(key.to_owned(), value);
        }
    }
}

fn scalar<B: burn::tensor::backend::Backend>(t: Tensor<B, 1>) -> f64 {
    t.into_data()
        .convert::<f64>()
        .to_vec::<f64>()
        .ok()
        .and_then(|v| v.first().copied())
        .unwrap_or(f64::NAN)
}

/// torch's `clip_grad_norm_` over all adapter gradients (LoRA's and DoRA's): returns the norm before clipping and
/// scales every gradient by `max / (norm + 1e-6)` when that is below 1.
fn clip_global_norm<B: AutodiffBackend>(
    adapters: &Adapters<B>,
    grads: &mut GradientsParams,
    max: Option<f64>,
) -> f64 {
    // Every trainable tensor (DoRA's magnitudes too), in `named_params`' fixed order.
    let ids: Vec<_> = named_params(adapters).iter().map(|(_, p)| p.id).collect();
    let mut sum = 0.0;
    for id in &ids {
        if let Some(g) = grads.get::<B::InnerBackend, 2>(*id) {
            sum += scalar(g.square().sum());
        }
    }
    let norm = sum.sqrt();
    if let Some(max) = max {
        let coef = max / (norm + 1e-6);
        if coef < 1.0 {
            for id in ids {
                if let Some(g) = grads.remove::<B::InnerBackend, 2>(id) {
                    grads.register(id, g.mul_scalar(coef));
                }
            }
        }
    }
    norm
}

/// `(name, pair, which)` for every adapter tensor, in a fixed order.
pub(crate) fn named_params<B: AutodiffBackend>(
    adapters: &Adapters<B>,
) -> Vec<(String, &burn::module::Param<Tensor<B, 2>>)> {
    let mut out = Vec::new();
    for (layer, slots) in adapters.layers.iter().enumerate() {
        for (target, pair) in Target::ALL.iter().zip(&slots.slots) {
            if let Some(LoraPair { a, b, magnitude }) = pair {
                out.push((format!("layers.{layer}.{}.lora_A", target.name()), a));
                out.push((format!("layers.{layer}.{}.lora_B", target.name()), b));
                if let Some(m) = magnitude {
                    let name = format!("layers.{layer}.{}.lora_magnitude_vector", target.name());
                    out.push((name, m));
                }
            }
        }
    }
    out
}

/// Mean and Bessel standard deviation of the values that are not NaN, as the advantages take
/// them, with 0 where they are undefined (no value, or one), so a metric is always a number.
fn mean_std(values: &[f64]) -> (f64, f64) {
    let defined = |x: f64| if x.is_nan() { 0.0 } else { x };
    (
        defined(crate::advantage::mean(values)),
        defined(crate::advantage::std(values)),
    )
}
