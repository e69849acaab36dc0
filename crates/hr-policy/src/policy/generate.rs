//! Sampling: `generate` (prefill, then one decode step per token through the KV cache), the
//! picks drawn on the host (f64, every sampling option) or on the device (greedy and
//! temperature: two values read back per row and token), in lanes of rows.

use std::ops::Range;

use burn::tensor::backend::Backend;
use burn::tensor::{Tensor, TensorData};
use rayon::prelude::*;

use super::{Generation, PAD, Policy, Sampler, distinct_rows, host_f32};
use crate::device_sampling::{self, DeviceDraw};
use crate::model::{KvCache, Layout};
use crate::sampling::prepare;
use crate::{Adapters, PolicyError, PolicyRng, SamplingConfig};

impl<B: Backend> Policy<B> {
    /// Samples one completion per prompt. With `use_cache` each step feeds only the new tokens
    /// through a KV cache; without it every step recomputes the whole sequence (same result).
    pub fn generate(
        &self,
        adapters: Option<&Adapters<B>>,
        prompts: &[Vec<u32>],
        sampling: &SamplingConfig,
        rng: &mut PolicyRng,
        use_cache: bool,
    ) -> Result<Generation, PolicyError> {
        sampling.validate()?;
        self.check_tokens(prompts, "prompt")?;
        if let Some(i) = prompts.iter().position(Vec::is_empty) {
            return Err(PolicyError::Request(format!("prompt {i} is empty")));
        }
        match adapters {
            // One product per projection a step, not three: the adapters folded into the weights
            // for this call (`BaseModel::merged`).
            Some(adapters) => Self {
                base: self.base.merged(adapters),
                ..self.clone()
            }
            .sample(prompts, sampling, rng, use_cache),
            None => self.sample(prompts, sampling, rng, use_cache),
        }
    }

    /// [`Policy::generate`] of checked prompts from the base weights as they are.
    fn sample(
        &self,
        prompts: &[Vec<u32>],
        sampling: &SamplingConfig,
        rng: &mut PolicyRng,
        use_cache: bool,
    ) -> Result<Generation, PolicyError> {
        let batch = prompts.len();
        let mut out = Generation {
            tokens: vec![Vec::new(); batch],
            logprobs: vec![Vec::new(); batch],
            stopped: vec![false; batch],
        };
        let mut rows: Vec<Vec<u32>> = prompts.to_vec();
        // Every lane pads to the widest prompt of the whole batch, so each row sees the columns it
        // would see in one lane (the reductions over them then add in the same order).
        let width = prompts.iter().map(Vec::len).max().unwrap_or(0);
        let lanes = self.execution.lanes.min(batch);
        let mut lanes: Vec<Lane<B>> = (0..lanes)
            .into_par_iter()
            .map(|i| {
                let rows = i * batch / lanes..(i + 1) * batch / lanes;
                let cache = use_cache.then(|| {
                    KvCache::with_capacity(self.config.num_layers, width + sampling.max_new_tokens)
                });
                Lane::prefilled(self, prompts, rows, width, cache)
            })
            .collect();
        let on_device = self.execution.sampler == Sampler::Device && drawn_on_device(sampling);
        for step in 0..sampling.max_new_tokens {
            let picks = if on_device {
                self.device_picks(&lanes, sampling, &out.stopped, rng)?
            } else {
                self.host_picks(&lanes, sampling, &rows, &out.stopped, rng)?
            };
            let mut next = Vec::with_capacity(batch);
            for (row, pick) in picks.into_iter().enumerate() {
                let token = match pick {
                    None => PAD,
                    Some((token, logp)) => {
                        out.tokens[row].push(token);
                        out.logprobs[row].push(logp);
                        out.stopped[row] = sampling.stop_tokens.contains(&token);
                        token
                    }
                };
                next.push(token);
                rows[row].push(token);
            }
            if out.stopped.iter().all(|s| *s) || step + 1 == sampling.max_new_tokens {
                break;
            }
            lanes.par_iter_mut().for_each(|lane| {
                let feed = if use_cache {
                    let data: Vec<i64> = next[lane.rows.clone()]
                        .iter()
                        .map(|t| i64::from(*t))
                        .collect();
                    Tensor::from_data(TensorData::new(data, [lane.rows.len(), 1]), &self.device)
                } else {
                    let rows = &rows[lane.rows.clone()];
                    self.token_tensor(rows, width + step + 1, &lane.layout.pad_left)
                };
                lane.hidden = self.decoder(None, feed, &lane.layout, lane.cache.as_mut());
            });
        }
        Ok(out)
    }

    /// Each live row's next token and its log-probability, drawn on the host from the logits
    /// read back (`None` for rows that have stopped).
    fn host_picks(
        &self,
        lanes: &[Lane<B>],
        sampling: &SamplingConfig,
        rows: &[Vec<u32>],
        stopped: &[bool],
        rng: &mut PolicyRng,
    ) -> Result<Vec<Option<(u32, f64)>>, PolicyError> {
        let logits = lanes
            .par_iter()
            .map(|lane| host_f32(lane.next_logits(self)))
            .collect::<Result<Vec<_>, _>>()?;
        // The lanes hold consecutive rows, so this walks the rows in order. Each row's
        // distribution is prepared on rayon's pool (a few passes over the vocabulary); the
        // draws then take the RNG's numbers row by row.
        let vocab = self.config.vocab_size;
        let rows_logits: Vec<&[f32]> = logits.iter().flat_map(|l| l.chunks(vocab)).collect();
        let draws: Vec<_> = rows_logits
            .into_par_iter()
            .enumerate()
            .map(|(row, logits)| (!stopped[row]).then(|| prepare(logits, &rows[row], sampling)))
            .collect();
        Ok(draws
            .into_iter()
            .map(|draw| draw.map(|draw| draw.pick(rng)))
            .collect())
    }

    /// [`Policy::host_picks`] drawn on the device (`device_sampling.rs`): the uniform numbers
    /// come from `rng` first, one per live row in row order, as the host draws them.
    fn device_picks(
        &self,
        lanes: &[Lane<B>],
        sampling: &SamplingConfig,
        stopped: &[bool],
        rng: &mut PolicyRng,
    ) -> Result<Vec<Option<(u32, f64)>>, PolicyError> {
        let greedy = sampling.temperature == 0.0;
        let uniforms: Vec<f64> = stopped
            .iter()
            .map(|s| if *s || greedy { 0.0 } else { rng.next_f64() })
            .collect();
        let drawn = lanes
            .par_iter()
            .map(|lane| {
                let how = if greedy {
                    DeviceDraw::Greedy
                } else {
                    DeviceDraw::Sample {
                        temperature: sampling.temperature,
                        uniforms: uniforms[lane.rows.clone()].to_vec(),
                    }
                };
                let logits = lane.next_logits(self).flatten::<2>(1, 2);
                host_f32(device_sampling::draw(logits, &how))
            })
            .collect::<Result<Vec<_>, _>>()?;
        Ok(drawn
            .concat()
            .chunks(2)
            .zip(stopped)
            .map(|(pair, stopped)| (!stopped).then(|| (pair[0] as u32, f64::from(pair[1]))))
            .collect())
    }

    /// Runs the prompts (`[batch, width]` left-padded per `layout`) and returns their hidden
    /// states. With a cache, identical prompts (GRPO samples each one G times) run once and their
    /// keys, values and hidden states are copied to every row that repeats them.
    fn prefill(
        &self,
        prompts: &[Vec<u32>],
        layout: &Layout,
        cache: Option<&mut KvCache<B>>,
    ) -> Tensor<B, 3> {
        match (cache, distinct_rows(prompts)) {
            (Some(cache), Some((distinct, source))) => {
                self.prefill_distinct(None, prompts, layout, &distinct, &source, cache)
            }
            (cache, _) => {
                let tokens = self.token_tensor(prompts, layout.width(prompts), &layout.pad_left);
                self.decoder(None, tokens, layout, cache)
            }
        }
    }
}

/// Some of a generation's rows (`rows`), left-padded to the batch's `width`, with their own KV
/// cache and the hidden states of their latest columns.
struct Lane<B: Backend> {
    rows: Range<usize>,
    layout: Layout,
    cache: Option<KvCache<B>>,
    hidden: Tensor<B, 3>,
}

impl<B: Backend> Lane<B> {
    /// The lane of `rows` with its prompts run.
    fn prefilled(
        policy: &Policy<B>,
        prompts: &[Vec<u32>],
        rows: Range<usize>,
        width: usize,
        mut cache: Option<KvCache<B>>,
    ) -> Self {
        let prompts = &prompts[rows.clone()];
        let layout = Layout {
            pad_left: prompts.iter().map(|p| width - p.len()).collect(),
        };
        let hidden = policy.prefill(prompts, &layout, cache.as_mut());
        Lane {
            rows,
            layout,
            cache,
            hidden,
        }
    }

    /// The logits `[rows, 1, vocab]` of each row's next token.
    fn next_logits(&self, policy: &Policy<B>) -> Tensor<B, 3> {
        let [rows, t, d] = self.hidden.dims();
        let last = self.hidden.clone().slice([0..rows, t - 1..t, 0..d]);
        policy.head(last, None)
    }
}

/// Whether [`Sampler::Device`] draws for `sampling`: greedy or by temperature alone.
fn drawn_on_device(sampling: &SamplingConfig) -> bool {
    sampling.top_k == 0
        && sampling.top_p == 1.0
        && sampling.min_p == 0.0
        && sampling.repetition_penalty == 1.0
}
