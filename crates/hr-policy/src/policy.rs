//! A loaded model: forward passes, KV-cached sampling and the scoring pass the trainer uses.

use std::path::Path;
use std::sync::Arc;
use std::sync::atomic::{AtomicU64, Ordering};

use burn::module::AutodiffModule;
use burn::tensor::activation::log_softmax;
use burn::tensor::backend::{AutodiffBackend, Backend, DTypeUsage};
use burn::tensor::{FloatDType, Int, Tensor, TensorData};

use crate::flops::{self, FlopCounter};
use crate::model::{BaseModel, FEW_ROWS, KvCache, Layout, hidden_states, lm_logits};
use crate::{Adapters, FlopCount, LoraConfig, ModelConfig, PolicyError, PolicyRng};

mod generate;

/// Logit elements (rows × completion positions × vocabulary) the scoring pass materialises at
/// once on the CPU (8 Mi floats = 32 MiB): whole batches of small models, a few rows of large
/// vocabularies.
const SCORE_CHUNK_ELEMENTS: usize = 8 << 20;

/// Whether the entropies [`Policy::score_with_entropy`] returns carry gradients.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Entropy {
    /// Values only (metrics, the high-entropy mask).
    Detached,
    /// Through the graph, for a loss term (the entropy bonus).
    Differentiable,
}

/// The base model and its shape. Adapters are passed per call: `None` gives the reference policy.
#[derive(Debug, Clone)]
pub struct Policy<B: Backend> {
    config: ModelConfig,
    base: BaseModel<B>,
    device: B::Device,
    /// How work is laid out on the device ([`Policy::with_execution`]).
    execution: Execution,
    /// The matrix arithmetic done so far, shared with the inference view ([`Policy::valid`]).
    flops: Arc<FlopCounter>,
}

/// How a policy lays its work out on its device. Each choice may change a result's last bits, so
/// it is fixed per device kind by the caller (never by the machine's size) and a run keeps it.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Execution {
    /// How many lanes work runs in side by side on rayon's pool (at least 1): [`Policy::generate`]
    /// splits its rows into this many groups, each decoded with its own KV cache, the tokens
    /// still drawn row by row in order; a GRPO trainer back-propagates this many chunks at once
    /// (`hr_grpo::Trainer`). Worth it on a CPU backend whose element-wise work runs on one
    /// thread (Flex): each lane keeps a core busy. A row's log-probabilities may differ in their
    /// last bits with the number of lanes (kernels pick their blocking by the rows in a product).
    pub lanes: usize,
    /// Where tokens are drawn.
    pub sampler: Sampler,
    /// Up to how many rows a projection is computed as `(W·xᵀ)ᵀ`, the weight as the left
    /// operand, rather than `x·Wᵀ` (the same dot products): faster on the CPU for a decode
    /// step's few rows, a copy kernel per product on a GPU (0 there).
    pub weight_left_rows: usize,
    /// How many logit elements (rows × completion positions × vocabulary) the scoring pass
    /// materialises at once (at least one row's). Every row's score and gradient is the same
    /// whatever the chunk; smaller chunks lower peak memory, larger ones launch fewer kernels.
    pub score_chunk_elements: usize,
}

impl Default for Execution {
    /// The CPU's: one lane, tokens drawn on the host, the weight on the left up to 256 rows,
    /// 8 Mi logits (32 MiB) scored at once.
    fn default() -> Self {
        Self {
            lanes: 1,
            sampler: Sampler::Host,
            weight_left_rows: FEW_ROWS,
            score_chunk_elements: SCORE_CHUNK_ELEMENTS,
        }
    }
}

/// Where [`Policy::generate`] draws tokens.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Sampler {
    /// On the host in f64, from each row's logits read back every token (every option).
    Host,
    /// On the device in f32 when sampling is greedy or by temperature alone (the GRPO default),
    /// reading back each row's token and log-probability; on the host otherwise. The same
    /// numbers are drawn from the RNG as on the host, and almost always the same tokens.
    Device,
}

/// Completions sampled for a batch of prompts.
#[derive(Debug, Clone, PartialEq)]
pub struct Generation {
    /// Sampled token ids per prompt, the stop token included when one was sampled.
    pub tokens: Vec<Vec<u32>>,
    /// Log-probability of each sampled token under `softmax(logits / temperature)`.
    pub logprobs: Vec<Vec<f64>>,
    /// Whether each completion ended with a stop token (false: cut at `max_new_tokens`).
    pub stopped: Vec<bool>,
}

/// Token used in padding columns; any valid id works because padding is masked.
const PAD: u32 = 0;

impl<B: Backend> Adapters<B> {
    /// Fresh adapters for `policy`, on `device`, as PEFT initialises them: `A ~ U(−1/√in, 1/√in)`
    /// drawn from `rng` in layer and target order, `B = 0`, and with DoRA each magnitude the row
    /// norms of the weight it adapts (in f32), so training starts from the base model.
    pub fn init<P: Backend>(
        policy: &Policy<P>,
        config: LoraConfig,
        rng: &mut PolicyRng,
        device: &B::Device,
    ) -> Self {
        Self::init_with(policy.config(), config, rng, device, |layer, target| {
            policy.base().row_norms(layer, target)
        })
    }
}

impl<B: Backend> Policy<B> {
    /// Loads `config.json` and the safetensors weights of an HF model folder, in f32.
    pub fn load(dir: &Path, device: &B::Device) -> Result<Self, PolicyError> {
        Self::load_as(dir, FloatDType::F32, device)
    }

    /// Loads an HF model folder with the base's weight matrices held in `dtype` (f32, f16 or
    /// bf16); activations, adapters and gradients stay f32. A device that cannot hold `dtype`
    /// is refused before anything is read.
    pub fn load_as(dir: &Path, dtype: FloatDType, device: &B::Device) -> Result<Self, PolicyError> {
        let holds = |d: FloatDType| B::dtype_usage(device, d.into()).contains(DTypeUsage::Storage);
        let weights = [
            (FloatDType::F32, "f32"),
            (FloatDType::F16, "f16"),
            (FloatDType::BF16, "bf16"),
        ];
        if !weights.iter().any(|(d, _)| *d == dtype && holds(*d)) {
            return Err(PolicyError::Dtype {
                dtype: format!("{dtype:?}").to_lowercase(),
                holds: weights
                    .into_iter()
                    .filter_map(|(d, name)| holds(d).then_some(name))
                    .collect(),
            });
        }
        let started = std::time::Instant::now();
        let config = ModelConfig::from_file(&dir.join("config.json"))?;
        tracing::debug!(model = %dir.display(), layers = config.num_layers, vocab = config.vocab_size, ?dtype, "loading the base weights");
        let base = crate::weights::load_base(dir, &config, dtype, device)?;
        tracing::debug!(model = %dir.display(), seconds = started.elapsed().as_secs_f64(), "model loaded");
        Ok(Self {
            config,
            base,
            device: device.clone(),
            execution: Execution::default(),
            flops: FlopCounter::shared(),
        })
    }

    /// Sets how work is laid out on the device ([`Execution`]; default: one lane, host sampling).
    #[must_use]
    pub fn with_execution(mut self, execution: Execution) -> Self {
        self.execution = Execution {
            lanes: execution.lanes.max(1),
            ..execution
        };
        self
    }

    /// The layout set by [`Policy::with_execution`].
    pub fn execution(&self) -> Execution {
        self.execution
    }

    /// The model's shape.
    pub fn config(&self) -> &ModelConfig {
        &self.config
    }

    /// The base parameters.
    pub fn base(&self) -> &BaseModel<B> {
        &self.base
    }

    /// The device the weights live on.
    pub fn device(&self) -> &B::Device {
        &self.device
    }

    /// The matrix arithmetic this policy and its inference view have done since loading
    /// (`flops.rs` says what counts): a step's share is the difference of two readings.
    pub fn flops(&self) -> FlopCount {
        self.flops.get()
    }

    /// Runs the decoder ([`hidden_states`]) and counts its work; a pass through adapters on an
    /// autodiff backend counts its backward too.
    fn decoder(
        &self,
        adapters: Option<&Adapters<B>>,
        tokens: Tensor<B, 2, Int>,
        layout: &Layout,
        cache: Option<&mut KvCache<B>>,
    ) -> Tensor<B, 3> {
        let [batch, new] = tokens.dims();
        let past = cache.as_ref().map_or(0, |c| c.len());
        let backward = self.backpropagated(adapters);
        self.flops.add(flops::decoder(
            &self.config,
            adapters.map(Adapters::config),
            batch,
            new,
            past,
            backward,
        ));
        hidden_states(
            &self.config,
            &self.base,
            adapters,
            tokens,
            layout,
            cache,
            self.execution.weight_left_rows,
        )
    }

    /// The LM head on `hidden` `[rows, t, d]` (states computed through `adapters`), counted as
    /// [`Policy::decoder`] counts.
    fn head(&self, hidden: Tensor<B, 3>, adapters: Option<&Adapters<B>>) -> Tensor<B, 3> {
        let [rows, t, _] = hidden.dims();
        let backward = self.backpropagated(adapters);
        self.flops
            .add(flops::lm_head(&self.config, rows * t, backward));
        lm_logits(&self.config, &self.base, hidden)
    }

    /// Whether a pass through `adapters` builds a graph the trainer back-propagates.
    fn backpropagated(&self, adapters: Option<&Adapters<B>>) -> bool {
        adapters.is_some() && B::ad_enabled(&self.device)
    }

    fn check_tokens(&self, rows: &[Vec<u32>], what: &str) -> Result<(), PolicyError> {
        if rows.is_empty() {
            return Err(PolicyError::Request(format!("no {what} given")));
        }
        for (i, row) in rows.iter().enumerate() {
            if let Some(t) = row.iter().find(|t| **t as usize >= self.config.vocab_size) {
                return Err(PolicyError::Request(format!(
                    "{what} {i}: token id {t} is outside the vocabulary ({})",
                    self.config.vocab_size
                )));
            }
        }
        Ok(())
    }

    fn token_tensor(
        &self,
        rows: &[Vec<u32>],
        width: usize,
        pad_left: &[usize],
    ) -> Tensor<B, 2, Int> {
        let mut data = Vec::with_capacity(rows.len() * width);
        for (row, pad) in rows.iter().zip(pad_left) {
            data.extend(std::iter::repeat_n(PAD as i64, *pad));
            data.extend(row.iter().map(|t| i64::from(*t)));
            data.extend(std::iter::repeat_n(PAD as i64, width - pad - row.len()));
        }
        Tensor::from_data(TensorData::new(data, [rows.len(), width]), &self.device)
    }

    /// Logits `[batch, len, vocab]` of left-padded `rows` with no cache (pad columns are garbage).
    pub fn logits(
        &self,
        adapters: Option<&Adapters<B>>,
        rows: &[Vec<u32>],
    ) -> Result<Tensor<B, 3>, PolicyError> {
        self.check_tokens(rows, "row")?;
        let width = rows.iter().map(Vec::len).max().unwrap_or(0);
        let layout = Layout {
            pad_left: rows.iter().map(|r| width - r.len()).collect(),
        };
        let tokens = self.token_tensor(rows, width, &layout.pad_left);
        let hidden = self.decoder(adapters, tokens, &layout, None);
        Ok(self.head(hidden, adapters))
    }

    /// Runs the `distinct` prompts once and returns every row's hidden states `[batch, width, d]`
    /// (row `i` is distinct prompt `source[i]`); `cache` becomes the rows' keys and values.
    fn prefill_distinct(
        &self,
        adapters: Option<&Adapters<B>>,
        prompts: &[Vec<u32>],
        layout: &Layout,
        distinct: &[usize],
        source: &[i64],
        cache: &mut KvCache<B>,
    ) -> Tensor<B, 3> {
        let width = layout.width(prompts);
        let rows: Vec<Vec<u32>> = distinct.iter().map(|&i| prompts[i].clone()).collect();
        let distinct_layout = Layout {
            pad_left: distinct.iter().map(|&i| layout.pad_left[i]).collect(),
        };
        let tokens = self.token_tensor(&rows, width, &distinct_layout.pad_left);
        let mut distinct_cache = KvCache::new(self.config.num_layers);
        let hidden = self.decoder(
            adapters,
            tokens,
            &distinct_layout,
            Some(&mut distinct_cache),
        );
        let select: Tensor<B, 1, Int> = Tensor::from_data(
            TensorData::new(source.to_vec(), [prompts.len()]),
            &self.device,
        );
        *cache = distinct_cache.select_rows(&select, cache.capacity());
        hidden.select(0, select)
    }

    /// Log-probabilities `[batch, max_completion_len]` of each completion token given its prompt,
    /// under `softmax(logits / temperature)`, differentiable through `adapters`; positions past a
    /// completion's end are 0. `adapters = None` scores under the reference (base) policy.
    pub fn score(
        &self,
        adapters: Option<&Adapters<B>>,
        prompts: &[Vec<u32>],
        completions: &[Vec<u32>],
        temperature: f64,
    ) -> Result<Tensor<B, 2>, PolicyError> {
        Ok(self
            .score_inner(adapters, prompts, completions, temperature, None)?
            .0)
    }

    /// [`Policy::score`] plus each position's entropy `[batch, max_completion_len]` under
    /// `softmax(logits / temperature)` (0 past a completion's end), detached or differentiable
    /// as `entropy` says.
    pub fn score_with_entropy(
        &self,
        adapters: Option<&Adapters<B>>,
        prompts: &[Vec<u32>],
        completions: &[Vec<u32>],
        temperature: f64,
        entropy: Entropy,
    ) -> Result<(Tensor<B, 2>, Tensor<B, 2>), PolicyError> {
        let (logp, entropy) =
            self.score_inner(adapters, prompts, completions, temperature, Some(entropy))?;
        let entropy =
            entropy.ok_or_else(|| PolicyError::Request("entropy was not computed".to_owned()))?;
        Ok((logp, entropy))
    }

    fn score_inner(
        &self,
        adapters: Option<&Adapters<B>>,
        prompts: &[Vec<u32>],
        completions: &[Vec<u32>],
        temperature: f64,
        want_entropy: Option<Entropy>,
    ) -> Result<(Tensor<B, 2>, Option<Tensor<B, 2>>), PolicyError> {
        self.check_tokens(prompts, "prompt")?;
        self.check_tokens(completions, "completion")?;
        if prompts.len() != completions.len() {
            return Err(PolicyError::Request(format!(
                "{} prompts but {} completions",
                prompts.len(),
                completions.len()
            )));
        }
        if let Some(i) = prompts.iter().position(Vec::is_empty) {
            return Err(PolicyError::Request(format!("prompt {i} is empty")));
        }
        if !(temperature.is_finite() && temperature > 0.0) {
            return Err(PolicyError::Request(format!(
                "scoring temperature must be > 0, got {temperature}"
            )));
        }
        let batch = prompts.len();
        let p = prompts.iter().map(Vec::len).max().unwrap_or(0);
        let c = completions.iter().map(Vec::len).max().unwrap_or(0).max(1);
        let layout = Layout {
            pad_left: prompts.iter().map(|x| p - x.len()).collect(),
        };
        let hidden = self.completion_hidden(adapters, prompts, completions, &layout, c);
        // The vocabulary-wide part (LM head, log-softmax, gather) runs over a few rows at a time:
        // each row's result is the same, but only one chunk's `[rows, c, vocab]` logits and
        // their log-softmax temporaries exist at once (SmolLM2, 32 new tokens: 5 of 32 rows).
        let rows = (self.execution.score_chunk_elements / (c * self.config.vocab_size).max(1))
            .clamp(1, batch);
        let mut logps = Vec::new();
        let mut entropies = Vec::new();
        for start in (0..batch).step_by(rows) {
            let end = (start + rows).min(batch);
            let (logp, entropy) = self.score_rows(
                hidden.clone().narrow(0, start, end - start),
                &completions[start..end],
                c,
                temperature,
                want_entropy,
                adapters,
            );
            logps.push(logp);
            entropies.extend(entropy);
        }
        let entropy = want_entropy.map(|_| Tensor::cat(entropies, 0));
        Ok((Tensor::cat(logps, 0), entropy))
    }

    /// The scoring pass's vocabulary-wide part for some rows: `hidden` `[rows, c, d]`, computed
    /// through `adapters`.
    fn score_rows(
        &self,
        hidden: Tensor<B, 3>,
        completions: &[Vec<u32>],
        c: usize,
        temperature: f64,
        want_entropy: Option<Entropy>,
        adapters: Option<&Adapters<B>>,
    ) -> (Tensor<B, 2>, Option<Tensor<B, 2>>) {
        let batch = completions.len();
        let logits = self.head(hidden, adapters);
        // Dividing by 1 changes no value: at temperature 1 the pass (and its backward) is skipped.
        let logits = if temperature == 1.0 {
            logits
        } else {
            logits.div_scalar(temperature)
        };
        let logp = log_softmax(logits, 2);
        let mut targets = Vec::with_capacity(batch * c);
        let mut keep = Vec::with_capacity(batch * c);
        for completion in completions {
            for j in 0..c {
                targets.push(completion.get(j).map_or(0, |t| i64::from(*t)));
                keep.push(if j < completion.len() { 1.0f32 } else { 0.0 });
            }
        }
        let targets: Tensor<B, 3, Int> =
            Tensor::from_data(TensorData::new(targets, [batch, c, 1]), &self.device);
        let keep: Tensor<B, 2> = Tensor::from_data(TensorData::new(keep, [batch, c]), &self.device);
        let entropy = want_entropy.map(|kind| {
            let lsm = match kind {
                Entropy::Detached => logp.clone().detach(),
                Entropy::Differentiable => logp.clone(),
            };
            (lsm.clone().exp() * lsm)
                .sum_dim(2)
                .reshape([batch, c])
                .neg()
                * keep.clone()
        });
        (logp.gather(2, targets).reshape([batch, c]) * keep, entropy)
    }

    /// The final hidden states `[batch, c, d]` that predict each completion token: column
    /// `p - 1 + j` for token `j`, where `p` is the prompts' width.
    fn completion_hidden(
        &self,
        adapters: Option<&Adapters<B>>,
        prompts: &[Vec<u32>],
        completions: &[Vec<u32>],
        layout: &Layout,
        c: usize,
    ) -> Tensor<B, 3> {
        let batch = prompts.len();
        let p = prompts.iter().map(Vec::len).max().unwrap_or(0);
        let d = self.config.hidden_size;
        let Some((distinct, source)) = distinct_rows(prompts) else {
            let rows: Vec<Vec<u32>> = prompts
                .iter()
                .zip(completions)
                .map(|(a, b)| a.iter().chain(b).copied().collect())
                .collect();
            let tokens = self.token_tensor(&rows, p + c, &layout.pad_left);
            return self.decoder(adapters, tokens, layout, None).slice([
                0..batch,
                p - 1..p - 1 + c,
                0..d,
            ]);
        };
        // Each distinct prompt runs once (with gradients through the adapters); its keys and
        // values are shared by every completion of it, which then run on their own: the prompt's
        // last column predicts token 0, the completion's first c - 1 tokens the rest.
        let mut cache = KvCache::new(self.config.num_layers);
        let prompt_hidden =
            self.prefill_distinct(adapters, prompts, layout, &distinct, &source, &mut cache);
        let last = prompt_hidden.slice([0..batch, p - 1..p, 0..d]);
        if c == 1 {
            return last;
        }
        let heads: Vec<Vec<u32>> = completions
            .iter()
            .map(|x| x[..x.len().min(c - 1)].to_vec())
            .collect();
        let tokens = self.token_tensor(&heads, c - 1, &vec![0; batch]);
        let rest = self.decoder(adapters, tokens, layout, Some(&mut cache));
        Tensor::cat(vec![last, rest], 1)
    }
}

impl<B: AutodiffBackend> Policy<B> {
    /// The same weights on the inner backend, without gradient tracking (for sampling).
    pub fn valid(&self) -> Policy<B::InnerBackend> {
        Policy {
            config: self.config.clone(),
            base: self.base.valid(),
            device: self.device.clone(),
            execution: self.execution,
            flops: Arc::clone(&self.flops),
        }
    }
}

/// When some prompts repeat (GRPO samples each one G times): the index of each distinct prompt's
/// first row, and for every row the position of its prompt among them.
fn distinct_rows(prompts: &[Vec<u32>]) -> Option<(Vec<usize>, Vec<i64>)> {
    let mut distinct: Vec<usize> = Vec::new();
    let mut source = Vec::with_capacity(prompts.len());
    for (i, p) in prompts.iter().enumerate() {
        match distinct.iter().position(|&u| &prompts[u] == p) {
            Some(k) => source.push(k as i64),
            None => {
                source.push(distinct.len() as i64);
                distinct.push(i);
            }
        }
    }
    (distinct.len() < prompts.len()).then_some((distinct, source))
}

/// The device-to-host reads [`host_f32`] has made in this process, and the values they carried.
static HOST_READS: [AtomicU64; 2] = [AtomicU64::new(0), AtomicU64::new(0)];

/// `(reads, values)` made by [`host_f32`] so far in this process: a decode token's read-backs,
/// counted (deterministically) for `generate`'s summary and `bench decode`.
pub fn host_reads() -> (u64, u64) {
    (
        HOST_READS[0].load(Ordering::Relaxed),
        HOST_READS[1].load(Ordering::Relaxed),
    )
}

/// Copies a float tensor to the host as f32.
pub fn host_f32<B: Backend, const D: usize>(tensor: Tensor<B, D>) -> Result<Vec<f32>, PolicyError> {
    HOST_READS[0].fetch_add(1, Ordering::Relaxed);
    HOST_READS[1].fetch_add(tensor.shape().num_elements() as u64, Ordering::Relaxed);
    tensor
        .into_data()
        .convert::<f32>()
        .to_vec::<f32>()
        .map_err(|e| PolicyError::Request(format!("reading tensor values: {e:?}")))
}
