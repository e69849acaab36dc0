//! The update half of a step: μ iterations over the episodes in micro-batches, each scored
//! and back-propagated in chunks whose activations fit a budget, the loss of each chunk a share
//! of its micro-batch's, and the loss statistics folded in chunk order.

use std::collections::BTreeMap;
use std::ops::Range;
use std::time::Instant;

use burn::module::AutodiffModule;
use burn::optim::{GradientsAccumulator, GradientsParams, Optimizer};
use burn::tensor::backend::AutodiffBackend;
use burn::tensor::{Tensor, TensorData};
use hr_policy::{Adapters, Entropy};

use super::stats::{Sums, Totals};
use super::{Timing, Trainer, clip_global_norm, named_params, scalar};
use crate::exchange::{Exchange, ParallelFault, gather, owned, sequential_fold, tree_fold};
use crate::rollout::Episode;
use crate::{
    GrpoError, LossConfig, LossInputs, Whole, active_positions, grpo_loss, high_entropy_mask,
};

impl<B: AutodiffBackend> Trainer<B> {
    /// μ iterations over the episodes, each accumulating gradients over
    /// `gradient_accumulation_steps` micro-batches before one AdamW step. Returns the mean loss,
    /// the last gradient norm (before clipping) and the loss statistics.
    pub(super) fn optimise(
        &mut self,
        episodes: &[Episode],
        adv: &[f64],
        lr: f64,
        timing: &mut Timing,
        exchange: &mut dyn Exchange,
    ) -> Result<(f64, f64, BTreeMap<String, f64>), GrpoError> {
        let layout = self.micro_batches(episodes.len());
        let shards = self.config.shards;
        let mine = owned(shards, exchange.rank(), exchange.ranks());
        let mut micros = self.micros(episodes, adv, &layout, &mine)?;
        let mut metrics = BTreeMap::new();
        let (mut loss_sum, mut grad_norm) = (0.0, 0.0);
        let mut totals = Totals::default();
        // LoRA dropout's masks: a seed per step from a stream forked off the trainer's (its
        // position and the step, so restored on resume; forked, so turning dropout on changes no
        // sample), and from it one per chunk of each update.
        let dropout_seed = (self.adapters.config().dropout > 0.0).then(|| {
            let step = self.step_index().wrapping_mul(0x9e37_79b9_7f4a_7c15);
            self.rng.fork(DROPOUT_STREAM).next_u64() ^ step
        });
        // The adaptive entropy coefficient after each update (TRL logs it per optimiser step).
        let mut coefs = Vec::new();
        for iteration in 0..self.config.num_iterations {
            if self.config.loss.top_entropy_quantile < 1.0 {
                self.mask_high_entropy(&mut micros)?;
            }
            // Every micro-batch of an update applies the coefficient the controller held at its
            // start, as TRL's do.
            let mut loss = self.config.loss.clone();
            if let (Some(settings), Some(control)) = (&loss.adaptive_entropy, &self.entropy_control)
            {
                loss.entropy_coef = control.applied(settings);
            }
            // Every chunk of every micro-batch, numbered over the step's (every shard's), in
            // order; this rank back-propagates its own one after the other. (Two chunks side by
            // side, each through its own autodiff leaves of the adapters, were faster on the CPU
            // but not repeatable: under load, about one run in three of the data-parallel e2e
            // tests gave other gradient bits; one at a time, none did.) This rank's
            // micro-batches are one contiguous run of the step's.
            let first = micros.first().map_or(0, |m| m.index);
            let chunks: Vec<(usize, &Micro<B>, Range<usize>)> = layout
                .iter()
                .enumerate()
                .flat_map(|(index, (_, rows))| {
                    let micro = index.checked_sub(first).and_then(|i| micros.get(i));
                    self.backward_chunks(&episodes[rows.clone()])
                        .into_iter()
                        .map(move |rows| (micro, rows))
                })
                .enumerate()
                .filter_map(|(i, (m, rows))| Some((i, m?, rows)))
                .collect();
            let mut accumulators: Vec<GradientsAccumulator<Adapters<B>>> =
                mine.clone().map(|_| GradientsAccumulator::new()).collect();
            let mut records = Vec::with_capacity(chunks.len());
            for (i, m, rows) in &chunks {
                let adapters = match dropout_seed {
                    Some(seed) => self
                        .adapters
                        .for_training(seed.wrapping_add(((iteration as u64) << 32) | *i as u64)),
                    None => self.adapters.clone(),
                };
                let out = self.chunk(m, rows.clone(), &adapters, iteration, &loss)?;
                timing.backward += out.backward_s;
                accumulators[m.shard - mine.start].accumulate(&self.adapters, out.grads);
                records.push(out.record);
            }
            let clock = Instant::now();
            let (records, mut grads) = if shards == 1 {
                let one = accumulators.pop().map(|mut a| a.grads());
                (records, one.unwrap_or_default())
            } else {
                self.fold_shards(accumulators, records, exchange)?
            };
            // The update's entropy over the tokens the bonus acts on: (sum, count).
            let mut world = (0.0, 0.0);
            for record in records {
                loss_sum += record.loss;
                if let Some((micro, sums)) = record.stats {
                    totals.add(micro, sums);
                }
                if let Some((sum, count)) = record.world_entropy {
                    world.0 += sum;
                    world.1 += count;
                }
            }
            grad_norm = clip_global_norm(&self.adapters, &mut grads, self.config.max_grad_norm);
            self.adapters = self.optimizer.step(lr, self.adapters.clone(), grads);
            timing.optimizer += clock.elapsed().as_secs_f64();
            if let (Some(settings), Some(control)) = (
                &self.config.loss.adaptive_entropy,
                &mut self.entropy_control,
            ) {
                control.update(settings, world.0 / f64::max(world.1, 1.0));
                coefs.push(control.coef);
            }
        }
        // Under adaptive control the logged coefficient is the mean of the step's updates' (TRL
        // logs one per optimiser step), not the plan's starting one.
        let mut logged = self.config.loss.clone();
        if !coefs.is_empty() {
            logged.entropy_coef = coefs.iter().sum::<f64>() / coefs.len() as f64;
        }
        totals.record(&logged, &mut metrics);
        Ok((
            loss_sum / self.config.num_iterations as f64,
            grad_norm,
            metrics,
        ))
    }

    /// This rank's micro-batches of the step (`layout`: every micro-batch's shard and rows;
    /// `mine`: this rank's shards): their tokens, loss masks and denominators, and the
    /// reference and old policies' log-probs where the loss needs them.
    fn micros(
        &self,
        episodes: &[Episode],
        adv: &[f64],
        layout: &[(usize, Range<usize>)],
        mine: &Range<usize>,
    ) -> Result<Vec<Micro<B>>, GrpoError> {
        let policy_err = |e: hr_policy::PolicyError| GrpoError::Policy(e.to_string());
        let temperature = self.config.rollout.temperature;
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
        for (index, (shard, rows)) in layout.iter().enumerate() {
            if !mine.contains(shard) {
                continue;
            }
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
                index,
                shard: *shard,
                advantages: adv[rows.clone()].to_vec(),
                whole: Whole {
                    batch_active_tokens: Some(active as f64),
                    micro_batch: Some((rows.len(), micro_active)),
                    entropy_tokens: Some(micro_active),
                    accumulation: layout.len(),
                },
                prompts,
                completions,
                mask,
                entropy_mask: None,
                reference,
                old,
            });
        }
        Ok(micros)
    }
}

/// One micro-batch of a step: its rows' advantages and tokens, the loss's mask and
/// denominators, and the log-probs of the reference and old policies where the loss needs them.
struct Micro<B: AutodiffBackend> {
    /// Its place among the step's micro-batches.
    index: usize,
    /// The shard its rows belong to.
    shard: usize,
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

/// What one chunk adds to the step's loss, statistics and entropy control: the part of a chunk's
/// result the ranks of a data-parallel step exchange.
#[derive(serde::Serialize, serde::Deserialize)]
struct ChunkRecord {
    /// The chunk's share of the loss.
    loss: f64,
    /// Its micro-batch's index and what the chunk adds to its loss statistics (first
    /// iteration only).
    stats: Option<(usize, Sums)>,
    /// The entropy summed over the rows' tokens the bonus acts on, and their count, under
    /// adaptive entropy control.
    world_entropy: Option<(f64, f64)>,
}

/// What scoring and back-propagating one chunk of a micro-batch gave.
struct ChunkOut {
    record: ChunkRecord,
    /// The adapters' gradients.
    grads: GradientsParams,
    /// Seconds its backward pass took.
    backward_s: f64,
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
    /// itself a share of the step's) and back-propagates it; the statistics are what the rows
    /// add to their micro-batch's. `loss` is the configured one with the entropy coefficient this
    /// update applies.
    fn chunk(
        &self,
        m: &Micro<B>,
        rows: Range<usize>,
        adapters: &Adapters<B>,
        iteration: usize,
        loss_config: &LossConfig,
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
        let bonus = loss_config.entropy_coef > 0.0;
        let adaptive = loss_config.adaptive_entropy.is_some();
        let (logp, ent) = if iteration == 0 || bonus || adaptive {
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
            loss_config,
            m.whole,
        )?;
        let loss = out.loss;
        let loss_value = scalar(loss.clone());
        let ent = ent
            .filter(|_| iteration == 0 || adaptive)
            .map(|ent| host_f64(ent.detach()));
        // The rows' active positions `(row, column)`, read by the statistics and the controller.
        let active = active_positions(&mask);
        let world_entropy = ent.as_ref().filter(|_| adaptive).map(|ent| {
            active
                .iter()
                .filter(|(i, j)| entropy_mask.as_ref().is_none_or(|k| k[*i][*j]))
                .fold((0.0, 0.0), |(sum, count), (i, j)| {
                    (sum + ent[i * width + j], count + 1.0)
                })
        });
        let stats = ent.filter(|_| iteration == 0).map(|ent| {
            let tokens = active.len() as f64;
            let n = rows.len() as f64;
            // Counts from the loss's shares (each a count over `clip_counted`).
            let count = |share: f64| (share * out.clip_counted).round();
            let sums = Sums {
                low: count(out.clip_ratio_low),
                high: count(out.clip_ratio_high),
                region: count(out.clip_ratio_region),
                cispo: out.cispo_clip_ratio.map_or(0.0, count),
                counted: out.clip_counted,
                row_low: out.row_clip_low.iter().flatten().copied().collect(),
                row_high: out.row_clip_high.iter().flatten().copied().collect(),
                kl: out.kl.map(|kl| kl * tokens),
                active: tokens,
                entropy: active.iter().map(|(i, j)| ent[i * width + j]).sum(),
                positions: tokens,
                phi: out.vespo_phi_mean.map(|phi| phi * n),
                rows: n,
                policy_loss: out.policy_loss,
            };
            (m.index, sums)
        });
        let clock = Instant::now();
        let grads = GradientsParams::from_grads(loss.backward(), adapters);
        Ok(ChunkOut {
            record: ChunkRecord {
                loss: loss_value,
                stats,
                world_entropy,
            },
            grads,
            backward_s: clock.elapsed().as_secs_f64(),
        })
    }
}

/// The activations one back-propagated chunk of a micro-batch may keep for its backward pass by
/// default (estimated from the model's shapes, [`Trainer::backward_chunks`]).
pub(super) const ACTIVATION_BUDGET: usize = 1280 << 20;

impl<B: AutodiffBackend> Trainer<B> {
    /// The row ranges of a micro-batch (its episodes) that are scored and back-propagated
    /// one after the other, their gradients summed (the loss's
    /// denominators stay the micro-batch's, [`Whole`], so the update is the micro-batch's):
    /// whole groups of `num_generations` rows, so each prompt is still run once, as many as keep
    /// the estimated activations within the trainer's budget; when not
    /// even one group fits (long completions of a large model: Qwen2.5-0.5B's 8 × 256 tokens
    /// came to 24 GB and were killed), as many rows as fit, at least one, each running its
    /// prompt. A single row over the budget still runs (no recompute yet). The estimate per row
    /// and layer: 12 hidden-wide and 6 intermediate-wide values and 4 attention scores per head
    /// and column, for every completion position, in f32 (it overestimates SmolLM2's by about a
    /// quarter).
    fn backward_chunks(&self, episodes: &[Episode]) -> Vec<Range<usize>> {
        let c = self.policy.config();
        let width = episodes
            .iter()
            .map(|e| e.completion.len())
            .max()
            .unwrap_or(0)
            .max(1);
        let columns = episodes.iter().map(|e| e.prompt.len()).max().unwrap_or(0) + width;
        let per_position = 12 * c.hidden_size + 6 * c.intermediate_size + 4 * c.num_heads * columns;
        let per_row = (width * c.num_layers * per_position * 4).max(1);
        let g = self.config.rollout.num_generations.max(1);
        let fit = self.activation_budget / per_row;
        let chunk = if fit >= g { fit / g * g } else { fit.max(1) };
        let rows = episodes.len();
        (0..rows)
            .step_by(chunk)
            .map(|start| start..(start + chunk).min(rows))
            .collect()
    }
}

impl<B: AutodiffBackend> Trainer<B> {
    /// The step's micro-batches as `(shard, rows)`, in order: each shard's episodes cut into
    /// `gradient_accumulation_steps / shards` parts (at least one, at most one per episode), so a
    /// step has at least one micro-batch per shard and no micro-batch spans two shards.
    fn micro_batches(&self, episodes: usize) -> Vec<(usize, Range<usize>)> {
        let shards = self.config.shards.max(1);
        let per_shard = episodes / shards;
        let parts = (self.config.gradient_accumulation_steps / shards).clamp(1, per_shard.max(1));
        let size = per_shard.div_ceil(parts).max(1);
        (0..shards)
            .flat_map(|shard| {
                let end = (shard + 1) * per_shard;
                (shard * per_shard..end)
                    .step_by(size)
                    .map(move |start| (shard, start..(start + size).min(end)))
            })
            .collect()
    }

    /// The update's gradient and every chunk's record over all ranks: this rank's shard
    /// gradients, read to the host, summed as the subtree of [`tree_fold`] they form, exchanged
    /// with its chunk records, and the ranks' subtrees summed; the same bits on every rank and for
    /// every number of ranks.
    fn fold_shards(
        &self,
        accumulators: Vec<GradientsAccumulator<Adapters<B>>>,
        records: Vec<ChunkRecord>,
        exchange: &mut dyn Exchange,
    ) -> Result<(Vec<ChunkRecord>, GradientsParams), GrpoError> {
        let params = named_params(&self.adapters);
        let mut leaves: Vec<Vec<Option<Vec<f32>>>> = vec![Vec::new(); params.len()];
        for mut accumulator in accumulators {
            let mut grads = accumulator.grads();
            for ((_, param), leaf) in params.iter().zip(&mut leaves) {
                let values = grads
                    .remove::<B::InnerBackend, 2>(param.id)
                    .map(hr_policy::host_f32)
                    .transpose()
                    .map_err(|e| GrpoError::Policy(e.to_string()))?;
                leaf.push(values);
            }
        }
        let fold = match self.fault {
            Some(ParallelFault::SequentialSum) => sequential_fold,
            _ => tree_fold,
        };
        let roots: Gradients = leaves.into_iter().map(fold).collect();
        let parts: Vec<(Vec<ChunkRecord>, Gradients)> = gather(exchange, &(records, roots))?;
        let mut records = Vec::new();
        let mut roots: Vec<Vec<Option<Vec<f32>>>> = vec![Vec::new(); params.len()];
        for (rank, (rank_records, rank_roots)) in parts.into_iter().enumerate() {
            records.extend(rank_records);
            if rank_roots.len() != params.len() {
                return Err(GrpoError::Exchange(format!(
                    "rank {rank} sent gradients for {} adapter tensors, this one has {}",
                    rank_roots.len(),
                    params.len()
                )));
            }
            for (root, all) in rank_roots.into_iter().zip(&mut roots) {
                all.push(root);
            }
        }
        let mut grads = GradientsParams::new();
        for ((name, param), all) in params.iter().zip(roots) {
            let Some(sum) = fold(all) else { continue };
            let value = param.val();
            let shape = value.shape();
            if sum.len() != shape.num_elements() {
                return Err(GrpoError::Exchange(format!(
                    "{name}: a rank sent {} gradient values for {} weights",
                    sum.len(),
                    shape.num_elements()
                )));
            }
            let tensor = Tensor::<B::InnerBackend, 2>::from_data(
                TensorData::new(sum, shape),
                &value.device(),
            );
            grads.register(param.id, tensor);
        }
        Ok((records, grads))
    }
}

/// One value per adapter tensor, in `named_params` order, on the host (`None`: no gradient).
type Gradients = Vec<Option<Vec<f32>>>;

fn host_f64<B: burn::tensor::backend::Backend>(t: Tensor<B, 2>) -> Vec<f64> {
    t.into_data()
        .convert::<f64>()
        .to_vec::<f64>()
        .unwrap_or_default()
}

/// The ChaCha stream LoRA dropout's seeds are forked onto (the sampling stream is stream 0).
const DROPOUT_STREAM: u64 = 0x6472_6f70;
