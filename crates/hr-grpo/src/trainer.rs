//! One GRPO optimiser step: rollouts on the inference copy of the policy, group advantages, the
//! scoring pass with gradients through the LoRA adapters only, μ iterations of the clipped loss
//! with AdamW, global gradient-norm clipping and the scheduled learning rate, and TRL's metrics.

use std::collections::BTreeMap;
use std::ops::Range;
use std::time::Instant;

use burn::module::AutodiffModule;
use burn::optim::adaptor::OptimizerAdaptor;
use burn::optim::{AdamW, AdamWConfig, GradientsAccumulator, GradientsParams, Optimizer};
use burn::tensor::Tensor;
use burn::tensor::backend::AutodiffBackend;
use hr_env::Task;
use hr_policy::{Adapters, ChatTokenizer, Entropy, LoraPair, Policy, PolicyRng, Target};
use rayon::prelude::*;

use crate::rollout::{EnvironmentFactory, Episode, RewardState, RolloutConfig, rollouts};
use crate::{
    AdvantageConfig, GrpoError, LossConfig, LossInputs, LrSchedule, Whole, advantages, grpo_loss,
    high_entropy_mask,
};

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
    config: GrpoConfig,
    /// Bytes of activations the back-propagated chunks running at once may keep, shared
    /// between the policy's lanes ([`ACTIVATION_BUDGET`]).
    activation_budget: usize,
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
            config,
            activation_budget: ACTIVATION_BUDGET,
        })
    }

    /// Sets the bytes of activations the back-propagated chunks of a micro-batch running at once
    /// may keep, shared between the policy's lanes (at least one group of `num_generations` rows
    /// per chunk). Smaller budgets lower peak memory
    /// for smaller products; the update is the same up to float summation order. Default 1.25 GiB.
    #[must_use]
    pub fn with_activation_budget(mut self, bytes: usize) -> Self {
        self.activation_budget = bytes;
        self
    }

    /// The adapters being trained.
    pub fn adapters(&self) -> &Adapters<B> {
        &self.adapters
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
        let started = Instant::now();
        let flops = self.policy.flops();
        let g = self.config.rollout.num_generations;
        let lr = self.config.schedule.at(self.step);
        let inference = self.policy.valid();
        let frozen_adapters = self.adapters.valid();
        let mut timing = Timing::default();
        let state = self.reward_state();
        let episodes = rollouts(
            &inference,
            Some(&frozen_adapters),
            &self.tokenizer,
            tasks,
            envs,
            &self.config.rollout,
            &mut self.rng,
            state,
        )?;
        timing.rollout = started.elapsed().as_secs_f64();
        let rollout_flops = self.policy.flops().since(&flops).forward;
        // An unscorable episode's reward is NaN here: out of the statistics, advantage 0.
        let rewards: Vec<f64> = episodes
            .iter()
            .map(|e| if e.scorable { e.reward } else { f64::NAN })
            .collect();
        let adv = advantages(&rewards, g, &self.config.advantage)?;
        let (loss_mean, grad_norm, mut metrics) =
            self.optimise(&episodes, &adv, lr, &mut timing)?;
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
                let mut scored = grp.iter().filter(|r| !r.is_nan());
                let first = scored.next();
                scored.all(|r| Some(r) == first)
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
        // The step's matrix arithmetic, counted from the model's shapes (hr-policy's flops.rs).
        let work = self.policy.flops().since(&flops);
        metrics.insert("flops/forward".to_owned(), work.forward as f64);
        metrics.insert("flops/backward".to_owned(), work.backward as f64);
        metrics.insert("flops/rollout".to_owned(), rollout_flops as f64);
        Ok(StepReport {
            step,
            episodes,
            advantages: adv,
            metrics,
        })
    }
}

impl<B: AutodiffBackend> Trainer<B> {
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

    /// μ iterations over the episodes, each accumulating gradients over
    /// `gradient_accumulation_steps` micro-batches before one AdamW step. Returns the mean loss,
    /// the last gradient norm (before clipping) and the loss statistics.
    fn optimise(
        &mut self,
        episodes: &[Episode],
        adv: &[f64],
        lr: f64,
        timing: &mut Timing,
    ) -> Result<(f64, f64, BTreeMap<String, f64>), GrpoError> {
        let policy_err = |e: hr_policy::PolicyError| GrpoError::Policy(e.to_string());
        let temperature = self.config.rollout.temperature;
        let k = self
            .config
            .gradient_accumulation_steps
            .clamp(1, episodes.len().max(1));
        let size = episodes.len().div_ceil(k);
        // TRL's mask_truncated_completions: an episode cut by a token limit counts for nothing.
        let mask_truncated = self.config.mask_truncated_completions;
        let loss_mask = |e: &Episode| -> Vec<bool> {
            if mask_truncated && e.truncated {
                vec![false; e.policy_mask.len()]
            } else {
                e.policy_mask.clone()
            }
        };
        let active: usize = episodes
            .iter()
            .map(|e| loss_mask(e).iter().filter(|m| **m).count())
            .sum();
        let (inference, frozen) = (self.policy.valid(), self.adapters.valid());
        let mut micros = Vec::new();
        for start in (0..episodes.len()).step_by(size.max(1)) {
            let rows = start..(start + size).min(episodes.len());
            let chunk = &episodes[rows.clone()];
            let prompts: Vec<Vec<u32>> = chunk.iter().map(|e| e.prompt.clone()).collect();
            let completions: Vec<Vec<u32>> = chunk.iter().map(|e| e.completion.clone()).collect();
            let width = completions.iter().map(Vec::len).max().unwrap_or(0).max(1);
            let mask: Vec<Vec<bool>> = chunk
                .iter()
                .map(|e| {
                    let mut m = loss_mask(e);
                    m.resize(width, false);
                    m
                })
                .collect();
            let micro_active = mask.iter().flatten().filter(|x| **x).count() as f64;
            // The reference (β > 0) and, when μ > 1, the old policy are scored once, before any update.
            // Both on the inference view: no graph is built for what is never back-propagated.
            let reference = (self.config.loss.beta > 0.0)
                .then(|| inference.score(None, &prompts, &completions, temperature))
                .transpose()
                .map_err(policy_err)?
                .map(Tensor::from_inner);
            let old = (self.config.num_iterations > 1)
                .then(|| inference.score(Some(&frozen), &prompts, &completions, temperature))
                .transpose()
                .map_err(policy_err)?
                .map(Tensor::from_inner);
            micros.push(Micro {
                advantages: adv[rows.clone()].to_vec(),
                whole: Whole {
                    batch_active_tokens: Some(active as f64),
                    micro_batch: Some((rows.len(), micro_active)),
                    entropy_tokens: Some(micro_active),
                    accumulation: 0,
                },
                prompts,
                completions,
                mask,
                entropy_mask: None,
                reference,
                old,
            });
        }
        let accumulation = micros.len();
        for m in &mut micros {
            m.whole.accumulation = accumulation;
        }
        let mut metrics = BTreeMap::new();
        let (mut loss_sum, mut grad_norm) = (0.0, 0.0);
        let mut totals = Totals::default();
        let lanes = self.policy.execution().lanes;
        for iteration in 0..self.config.num_iterations {
            if self.config.loss.top_entropy_quantile < 1.0 {
                self.mask_high_entropy(&mut micros)?;
            }
            let mut accumulator = GradientsAccumulator::new();
            // Every chunk of every micro-batch, in order; `lanes` of them run side by side, each
            // on its own copy of the adapters (its own autodiff graph), and their results are
            // folded in this order, so the sums do not depend on which lane finished first.
            let chunks: Vec<(&Micro<B>, Range<usize>)> = micros
                .iter()
                .flat_map(|m| {
                    self.backward_chunks(&m.prompts, &m.completions, lanes)
                        .into_iter()
                        .map(move |rows| (m, rows))
                })
                .collect();
            for group in chunks.chunks(lanes) {
                let run = |(m, rows): &(&Micro<B>, Range<usize>)| {
                    let adapters = if lanes > 1 {
                        self.adapters.fresh_leaves()
                    } else {
                        self.adapters.clone()
                    };
                    self.chunk(m, rows.clone(), &adapters, iteration, active)
                };
                let outs: Vec<Result<ChunkOut, GrpoError>> = if lanes > 1 {
                    group.par_iter().map(run).collect()
                } else {
                    group.iter().map(run).collect()
                };
                let mut slowest = 0.0f64;
                for out in outs {
                    let out = out?;
                    loss_sum += out.loss;
                    if let Some(stats) = out.stats {
                        totals.add(stats);
                    }
                    slowest = slowest.max(out.backward_s);
                    accumulator.accumulate(&self.adapters, out.grads);
                }
                timing.backward += slowest;
            }
            let clock = Instant::now();
            let mut grads = accumulator.grads();
            grad_norm = clip_global_norm(&self.adapters, &mut grads, self.config.max_grad_norm);
            self.adapters = self.optimizer.step(lr, self.adapters.clone(), grads);
            timing.optimizer += clock.elapsed().as_secs_f64();
        }
        totals.record(&self.config.loss, &mut metrics);
        Ok((
            loss_sum / self.config.num_iterations as f64,
            grad_norm,
            metrics,
        ))
    }
}

/// One micro-batch of a step: its rows' advantages and tokens, the loss's mask and
/// denominators, and the log-probs of the reference and old policies where the loss needs them.
struct Micro<B: AutodiffBackend> {
    /// Its rows' advantages.
    advantages: Vec<f64>,
    /// The denominators of its loss.
    whole: Whole,
    prompts: Vec<Vec<u32>>,
    completions: Vec<Vec<u32>>,
    mask: Vec<Vec<bool>>,
    /// The tokens the high-entropy mask keeps this iteration, when `top_entropy_quantile` < 1.
    entropy_mask: Option<Vec<Vec<bool>>>,
    reference: Option<Tensor<B, 2>>,
    old: Option<Tensor<B, 2>>,
}

/// What scoring and back-propagating one chunk of a micro-batch gave.
struct ChunkOut {
    /// The chunk's share of the loss.
    loss: f64,
    /// The loss statistics, weighted by the chunk's share of the active tokens (first
    /// iteration only).
    stats: Option<ChunkStats>,
    /// The adapters' gradients.
    grads: GradientsParams,
    /// Seconds its backward pass took.
    backward_s: f64,
}

/// A chunk's loss statistics, each weighted by its share of the step's active tokens, the
/// entropy of each of its active positions in row order, and its rows' clip shares.
struct ChunkStats {
    low: f64,
    high: f64,
    region: f64,
    kl: Option<f64>,
    cispo: Option<f64>,
    vespo_phi: Option<f64>,
    policy_loss: Option<f64>,
    row_low: Vec<Option<f64>>,
    row_high: Vec<Option<f64>>,
    entropy: Vec<f64>,
}

/// The step's loss statistics, summed over its chunks (first iteration).
#[derive(Default)]
struct Totals {
    low: f64,
    high: f64,
    region: f64,
    kl: Option<f64>,
    cispo: Option<f64>,
    vespo_phi: Option<f64>,
    policy_loss: Option<f64>,
    low_min: Option<f64>,
    high_max: Option<f64>,
    entropy: f64,
    counted: f64,
}

impl Totals {
    fn add(&mut self, stats: ChunkStats) {
        let sum = |total: &mut Option<f64>, v: Option<f64>| {
            if let Some(v) = v {
                *total = Some(total.unwrap_or(0.0) + v);
            }
        };
        self.low += stats.low;
        self.high += stats.high;
        self.region += stats.region;
        sum(&mut self.kl, stats.kl);
        sum(&mut self.cispo, stats.cispo);
        sum(&mut self.vespo_phi, stats.vespo_phi);
        sum(&mut self.policy_loss, stats.policy_loss);
        for v in stats.row_low.into_iter().flatten() {
            self.low_min = Some(self.low_min.map_or(v, |m| m.min(v)));
        }
        for v in stats.row_high.into_iter().flatten() {
            self.high_max = Some(self.high_max.map_or(v, |m| m.max(v)));
        }
        for e in stats.entropy {
            self.entropy += e;
            self.counted += 1.0;
        }
    }

    /// Writes TRL's metric names: the clip ratios for the clipped objectives (`low_min` and
    /// `high_max` over every row of the step), `cispo_clip_ratio`, `vespo/phi_seq_mean`, `kl`,
    /// `entropy`, and `policy_loss` with `entropy_coef` when the bonus is on.
    fn record(self, loss: &LossConfig, metrics: &mut BTreeMap<String, f64>) {
        if loss.loss_type.clips() {
            for (key, value) in [
                ("clip_ratio/low_mean", Some(self.low)),
                ("clip_ratio/high_mean", Some(self.high)),
                ("clip_ratio/region_mean", Some(self.region)),
                ("clip_ratio/low_min", self.low_min),
                ("clip_ratio/high_max", self.high_max),
            ] {
                if let Some(value) = value {
                    metrics.insert(key.to_owned(), value);
                }
            }
        }
        for (key, value) in [
            ("cispo_clip_ratio", self.cispo),
            ("vespo/phi_seq_mean", self.vespo_phi),
            ("kl", self.kl),
        ] {
            if let Some(value) = value {
                metrics.insert(key.to_owned(), value);
            }
        }
        if let Some(policy_loss) = self.policy_loss {
            metrics.insert("policy_loss".to_owned(), policy_loss);
            metrics.insert("entropy_coef".to_owned(), loss.entropy_coef);
        }
        metrics.insert("entropy".to_owned(), self.entropy / self.counted.max(1.0));
    }
}

impl<B: AutodiffBackend> Trainer<B> {
    /// The high-entropy mask of each micro-batch under the current adapters (TRL's
    /// `top_entropy_quantile`): the quantile is over the micro-batch's active tokens, so its
    /// entropies are computed first, on the inference view, whole; the bonus then averages over
    /// the tokens the mask keeps.
    fn mask_high_entropy(&self, micros: &mut [Micro<B>]) -> Result<(), GrpoError> {
        let (inference, frozen) = (self.policy.valid(), self.adapters.valid());
        let temperature = self.config.rollout.temperature;
        for m in micros {
            let (_, entropy) = inference
                .score_with_entropy(
                    Some(&frozen),
                    &m.prompts,
                    &m.completions,
                    temperature,
                    Entropy::Detached,
                )
                .map_err(|e| GrpoError::Policy(e.to_string()))?;
            let width = m.mask.first().map_or(0, Vec::len);
            let values =
                hr_policy::host_f32(entropy).map_err(|e| GrpoError::Policy(e.to_string()))?;
            let rows: Vec<Vec<f32>> = values.chunks(width.max(1)).map(<[f32]>::to_vec).collect();
            let kept = high_entropy_mask(&rows, &m.mask, self.config.loss.top_entropy_quantile);
            m.whole.entropy_tokens = Some(kept.iter().flatten().filter(|k| **k).count() as f64);
            m.entropy_mask = Some(kept);
        }
        Ok(())
    }

    /// Scores rows `rows` of micro-batch `m` with `adapters` (the trainer's, or a fresh copy of
    /// them for a lane of its own), computes their loss (their share of the micro-batch's,
    /// itself a share of the step's) and back-propagates it; the statistics are weighted by the
    /// rows' share of the step's `active` tokens.
    fn chunk(
        &self,
        m: &Micro<B>,
        rows: Range<usize>,
        adapters: &Adapters<B>,
        iteration: usize,
        active: usize,
    ) -> Result<ChunkOut, GrpoError> {
        let policy_err = |e: hr_policy::PolicyError| GrpoError::Policy(e.to_string());
        let temperature = self.config.rollout.temperature;
        let completions = &m.completions[rows.clone()];
        let width = completions.iter().map(Vec::len).max().unwrap_or(0).max(1);
        let part = |t: &Tensor<B, 2>| {
            t.clone()
                .narrow(0, rows.start, rows.len())
                .narrow(1, 0, width)
        };
        let mask: Vec<Vec<bool>> = m.mask[rows.clone()]
            .iter()
            .map(|row| row[..width].to_vec())
            .collect();
        // Entropy is reported for the first iteration only (later ones skip its pass over the
        // vocabulary unless the bonus needs it, through the graph).
        let prompts = &m.prompts[rows.clone()];
        let bonus = self.config.loss.entropy_coef > 0.0;
        let (logp, ent) = if iteration == 0 || bonus {
            let kind = if bonus {
                Entropy::Differentiable
            } else {
                Entropy::Detached
            };
            let (logp, ent) = self
                .policy
                .score_with_entropy(Some(adapters), prompts, completions, temperature, kind)
                .map_err(policy_err)?;
            (logp, Some(ent))
        } else {
            let logp = self
                .policy
                .score(Some(adapters), prompts, completions, temperature);
            (logp.map_err(policy_err)?, None)
        };
        let entropy_mask: Option<Vec<Vec<bool>>> = m.entropy_mask.as_ref().map(|k| {
            k[rows.clone()]
                .iter()
                .map(|row| row[..width].to_vec())
                .collect()
        });
        let out = grpo_loss(
            LossInputs {
                logp,
                old_logp: m.old.as_ref().map(part),
                ref_logp: m.reference.as_ref().map(part),
                entropy: ent.clone().filter(|_| bonus),
                advantages: &m.advantages[rows.clone()],
                mask: &mask,
                entropy_mask: entropy_mask.as_deref(),
            },
            &self.config.loss,
            m.whole,
        )?;
        let loss = out.loss;
        let loss_value = scalar(loss.clone());
        let stats = ent.filter(|_| iteration == 0).map(|ent| {
            let share = mask.iter().flatten().filter(|x| **x).count() as f64 / active.max(1) as f64;
            let ent = host_f64(ent.detach());
            let entropy = mask
                .iter()
                .enumerate()
                .flat_map(|(i, row)| {
                    row.iter()
                        .enumerate()
                        .filter(|(_, on)| **on)
                        .map(move |(j, _)| i * width + j)
                })
                .map(|k| ent[k])
                .collect();
            let row_share = rows.len() as f64
                / m.whole.micro_batch.map_or(rows.len(), |(r, _)| r).max(1) as f64;
            ChunkStats {
                low: out.clip_ratio_low * share,
                high: out.clip_ratio_high * share,
                region: out.clip_ratio_region * share,
                kl: out.kl.map(|v| v * share),
                cispo: out.cispo_clip_ratio.map(|v| v * share),
                vespo_phi: out
                    .vespo_phi_mean
                    .map(|v| v * row_share / m.whole.accumulation.max(1) as f64),
                // Averaged over the micro-batches, as TRL's logs average its per-call values.
                policy_loss: out.policy_loss.map(|v| {
                    if self.config.loss.loss_type.per_micro_batch() {
                        v / m.whole.accumulation.max(1) as f64
                    } else {
                        v
                    }
                }),
                row_low: out.row_clip_low,
                row_high: out.row_clip_high,
                entropy,
            }
        });
        let clock = Instant::now();
        let grads = GradientsParams::from_grads(loss.backward(), adapters);
        Ok(ChunkOut {
            loss: loss_value,
            stats,
            grads,
            backward_s: clock.elapsed().as_secs_f64(),
        })
    }
}

/// The activations one back-propagated chunk of a micro-batch may keep for its backward pass by
/// default (estimated from the model's shapes, [`Trainer::backward_chunks`]).
const ACTIVATION_BUDGET: usize = 1280 << 20;

impl<B: AutodiffBackend> Trainer<B> {
    /// The row ranges of a micro-batch (`prompts` and `completions`, one per episode) that are scored and back-propagated
    /// one after the other, or `lanes` at a time, their gradients summed (the loss's
    /// denominators stay the micro-batch's, [`Whole`], so the update is the micro-batch's):
    /// whole groups of `num_generations` rows, so each prompt is still run once, as many as keep
    /// the estimated activations within the trainer's budget shared by `lanes` chunks; when not
    /// even one group fits (long completions of a large model: Qwen2.5-0.5B's 8 × 256 tokens
    /// came to 24 GB and were killed), as many rows as fit, at least one, each running its
    /// prompt. A single row over the budget still runs (no recompute yet). The estimate per row
    /// and layer: 12 hidden-wide and 6 intermediate-wide values and 4 attention scores per head
    /// and column, for every completion position, in f32 (it overestimates SmolLM2's by about a
    /// quarter).
    fn backward_chunks(
        &self,
        prompts: &[Vec<u32>],
        completions: &[Vec<u32>],
        lanes: usize,
    ) -> Vec<Range<usize>> {
        let c = self.policy.config();
        let width = completions.iter().map(Vec::len).max().unwrap_or(0).max(1);
        let columns = prompts.iter().map(Vec::len).max().unwrap_or(0) + width;
        let per_position = 12 * c.hidden_size + 6 * c.intermediate_size + 4 * c.num_heads * columns;
        let per_row = (width * c.num_layers * per_position * 4).max(1);
        let g = self.config.rollout.num_generations.max(1);
        let fit = self.activation_budget / lanes.max(1) / per_row;
        let chunk = if fit >= g { fit / g * g } else { fit.max(1) };
        let rows = prompts.len();
        (0..rows)
            .step_by(chunk)
            .map(|start| start..(start + chunk).min(rows))
            .collect()
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

fn host_f64<B: burn::tensor::backend::Backend>(t: Tensor<B, 2>) -> Vec<f64> {
    t.into_data()
        .convert::<f64>()
        .to_vec::<f64>()
        .unwrap_or_default()
}

fn scalar<B: burn::tensor::backend::Backend>(t: Tensor<B, 1>) -> f64 {
    t.into_data()
        .convert::<f64>()
        .to_vec::<f64>()
        .ok()
        .and_then(|v| v.first().copied())
        .unwrap_or(f64::NAN)
}

/// torch's `clip_grad_norm_` over all adapter gradients: returns the norm before clipping and
/// scales every gradient by `max / (norm + 1e-6)` when that is below 1.
fn clip_global_norm<B: AutodiffBackend>(
    adapters: &Adapters<B>,
    grads: &mut GradientsParams,
    max: Option<f64>,
) -> f64 {
    let ids: Vec<_> = adapters
        .layers
        .iter()
        .flat_map(|l| l.slots.iter().flatten())
        .flat_map(|p| [p.a.id, p.b.id])
        .collect();
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
            if let Some(LoraPair { a, b }) = pair {
                out.push((format!("layers.{layer}.{}.lora_A", target.name()), a));
                out.push((format!("layers.{layer}.{}.lora_B", target.name()), b));
            }
        }
    }
    out
}

/// The mean and the sample standard deviation (TRL's `reward_std`) of `values`.
/// Mean and Bessel standard deviation of the values that are not NaN (0 and 0 when none is).
fn mean_std(values: &[f64]) -> (f64, f64) {
    let scored = || values.iter().filter(|v| !v.is_nan());
    let n = scored().count() as f64;
    if n == 0.0 {
        return (0.0, 0.0);
    }
    let mean = scored().sum::<f64>() / n;
    let var = scored().map(|r| (r - mean).powi(2)).sum::<f64>() / (n - 1.0).max(1.0);
    (mean, var.sqrt())
}
