//! The decoder: embedding (scaled by √hidden in Gemma), blocks of RMSNorm → grouped-query
//! attention (Qwen3's and Gemma 3's per-head q/k RMSNorm, rotate-half RoPE with the config's
//! scaling and, in Gemma 3, a base of its own for the sliding layers, full or sliding-window
//! causal mask, Gemma 2's soft-capped scores) → RMSNorm → SwiGLU or GeGLU MLP (Gemma norms the
//! attention's and the MLP's outputs too), a final RMSNorm and the LM head (tied or not, its
//! logits soft-capped in Gemma 2). Linear weights are kept
//! as HF stores them, `[out, in]` (see [`linear`] for how they multiply). The weight matrices may be
//! held in f16 or bf16: each is widened to f32 where it is used, so every activation, LoRA
//! product and gradient is f32 and the only error a half dtype brings is its weights' rounding.

use burn::module::{Module, Param};
use burn::tensor::activation::{silu, softmax};
use burn::tensor::backend::Backend;
use burn::tensor::module::embedding;
use burn::tensor::{DType, FloatDType, Int, Tensor, TensorData};

use crate::ModelConfig;
use crate::config::Activation;
use crate::lora::{Adapters, Dropout, LoraPair, Target};

mod kv_cache;
mod positions;

pub use kv_cache::KvCache;
pub(crate) use positions::Layout;
use positions::{Rope, attention_mask};

/// The attention projections of one block.
#[derive(Module, Debug)]
pub struct Attention<B: Backend> {
    /// Query projection `[heads·head_dim, hidden]`.
    pub q: Param<Tensor<B, 2>>,
    /// Key projection `[kv_heads·head_dim, hidden]`.
    pub k: Param<Tensor<B, 2>>,
    /// Value projection `[kv_heads·head_dim, hidden]`.
    pub v: Param<Tensor<B, 2>>,
    /// Output projection `[hidden, heads·head_dim]`.
    pub o: Param<Tensor<B, 2>>,
    /// Query bias (Qwen2).
    pub q_bias: Option<Param<Tensor<B, 1>>>,
    /// Key bias (Qwen2).
    pub k_bias: Option<Param<Tensor<B, 1>>>,
    /// Value bias (Qwen2).
    pub v_bias: Option<Param<Tensor<B, 1>>>,
    /// Output bias (Llama with `attention_bias`).
    pub o_bias: Option<Param<Tensor<B, 1>>>,
    /// RMSNorm weight of each query head `[head_dim]` (Qwen3).
    pub q_norm: Option<Param<Tensor<B, 1>>>,
    /// RMSNorm weight of each key head `[head_dim]` (Qwen3).
    pub k_norm: Option<Param<Tensor<B, 1>>>,
}

/// The SwiGLU MLP of one block.
#[derive(Module, Debug)]
pub struct Mlp<B: Backend> {
    /// Gate projection `[intermediate, hidden]`.
    pub gate: Param<Tensor<B, 2>>,
    /// Up projection `[intermediate, hidden]`.
    pub up: Param<Tensor<B, 2>>,
    /// Down projection `[hidden, intermediate]`.
    pub down: Param<Tensor<B, 2>>,
}

/// One decoder block.
#[derive(Module, Debug)]
pub struct Block<B: Backend> {
    /// RMSNorm weight before attention.
    pub input_norm: Param<Tensor<B, 1>>,
    /// Attention projections.
    pub attn: Attention<B>,
    /// RMSNorm weight before the MLP (`post_attention_layernorm`, Gemma's
    /// `pre_feedforward_layernorm`).
    pub pre_mlp_norm: Param<Tensor<B, 1>>,
    /// The MLP.
    pub mlp: Mlp<B>,
    /// RMSNorm weight of the attention's output, before the residual sum (Gemma).
    pub attn_out_norm: Option<Param<Tensor<B, 1>>>,
    /// RMSNorm weight of the MLP's output, before the residual sum (Gemma).
    pub mlp_out_norm: Option<Param<Tensor<B, 1>>>,
}

/// The base model's parameters. They never train: the reference policy is this model without
/// adapters, so there is no second copy of the weights.
#[derive(Module, Debug)]
pub struct BaseModel<B: Backend> {
    /// Token embedding `[vocab, hidden]`.
    pub embed: Param<Tensor<B, 2>>,
    /// The decoder blocks.
    pub blocks: Vec<Block<B>>,
    /// Final RMSNorm weight.
    pub norm: Param<Tensor<B, 1>>,
    /// LM head `[vocab, hidden]` as HF stores it; `None` when the embeddings are tied (the
    /// head is then `embed`).
    pub lm_head: Option<Param<Tensor<B, 2>>>,
}

impl<B: Backend> BaseModel<B> {
    /// The L2 norm of each row of the weight `target` names in block `layer` (a fused target's
    /// parts in order), in f32, on the host: DoRA's initial magnitude, `‖W‖` row by row.
    pub(crate) fn row_norms(&self, layer: usize, target: Target) -> Vec<f32> {
        let (attn, mlp) = (&self.blocks[layer].attn, &self.blocks[layer].mlp);
        let weights = match target {
            Target::QProj => vec![&attn.q],
            Target::KProj => vec![&attn.k],
            Target::VProj => vec![&attn.v],
            Target::OProj => vec![&attn.o],
            Target::GateProj => vec![&mlp.gate],
            Target::UpProj => vec![&mlp.up],
            Target::DownProj => vec![&mlp.down],
            Target::QkvProj => vec![&attn.q, &attn.k, &attn.v],
            Target::GateUpProj => vec![&mlp.gate, &mlp.up],
        };
        weights
            .into_iter()
            .flat_map(|w| {
                let rows = f32_of(w.val()).square().sum_dim(1).sqrt();
                rows.into_data().iter::<f32>().collect::<Vec<_>>()
            })
            .collect()
    }

    /// This base with `adapters` folded into the weights they adapt, `W + s·(A·B)ᵀ` in f32 (a
    /// half-dtype weight is widened once here instead of at every use), for sampling: the
    /// decode step then makes one product per projection instead of three. The other weights
    /// are shared, not copied; the adapted ones cost an f32 copy each while sampling (f32, not
    /// the base's half dtype, whose rounding would swallow a young adapter's small update). A
    /// token's log-probability differs from the adapters' own pass in its last bits (the sums
    /// are grouped differently); scoring, which trains, keeps the adapters.
    pub(crate) fn merged(&self, adapters: &Adapters<B>) -> Self {
        // The shares of the adapter on `target` in `layer` (`None` each when not adapted).
        let cut_rows = |layer: usize, target: Target, rows: &[usize]| -> Vec<Option<Share<B>>> {
            match adapters.pair(layer, target) {
                Some(pair) => shares(pair, adapters.scale(), None, None, rows)
                    .into_iter()
                    .map(Some)
                    .collect(),
                None => rows.iter().map(|_| None).collect(),
            }
        };
        // `W + ΔW`, and with DoRA rescaled row by row to `m · (W + ΔW) / ‖W + ΔW‖`.
        let fold = |weight: &Param<Tensor<B, 2>>, share: Option<Share<B>>| {
            let Some(Share {
                delta: Some(delta),
                magnitude,
                ..
            }) = share
            else {
                return weight.clone();
            };
            let w = f32_of(weight.val()) + delta;
            let w = match magnitude {
                Some(m) => {
                    let out = m.dims()[1];
                    let norm = w.clone().square().sum_dim(1).sqrt();
                    w * (m.reshape([out, 1]) / norm)
                }
                None => w,
            };
            Param::from_tensor(w.detach()).set_require_grad(false)
        };
        let blocks = self
            .blocks
            .iter()
            .enumerate()
            .map(|(i, block)| {
                let (attn, mlp) = (&block.attn, &block.mlp);
                let own = |target: Target, weight: &Param<Tensor<B, 2>>| {
                    cut_rows(i, target, &[rows(weight)]).pop().flatten()
                };
                // A fused adapter's shares, cut by rows as its matrix was at load.
                let mut qkv = cut_rows(i, Target::QkvProj, &[&attn.q, &attn.k, &attn.v].map(rows))
                    .into_iter();
                let mut gate_up =
                    cut_rows(i, Target::GateUpProj, &[&mlp.gate, &mlp.up].map(rows)).into_iter();
                let mut alone = Vec::new().into_iter();
                // A projection's own adapter, else its share of the fused one.
                let fold_in = |weight, target, fused: &mut std::vec::IntoIter<_>| {
                    fold(weight, own(target, weight).or(fused.next().flatten()))
                };
                Block {
                    attn: Attention {
                        q: fold_in(&attn.q, Target::QProj, &mut qkv),
                        k: fold_in(&attn.k, Target::KProj, &mut qkv),
                        v: fold_in(&attn.v, Target::VProj, &mut qkv),
                        o: fold_in(&attn.o, Target::OProj, &mut alone),
                        ..attn.clone()
                    },
                    mlp: Mlp {
                        gate: fold_in(&mlp.gate, Target::GateProj, &mut gate_up),
                        up: fold_in(&mlp.up, Target::UpProj, &mut gate_up),
                        down: fold_in(&mlp.down, Target::DownProj, &mut alone),
                    },
                    ..block.clone()
                }
            })
            .collect();
        Self {
            blocks,
            ..self.clone()
        }
    }
}

/// One projection's share of the adapter on it, or on the fused matrix that stacks it (Phi-3's
/// `qkv_proj`): the same quantities as for the whole, cut to this projection's rows.
struct Share<B: Backend> {
    /// The LoRA update `s·(x·A)·B`, this projection's output columns (the forward only).
    update: Option<Tensor<B, 3>>,
    /// `ΔW = s·(A·B)ᵀ`, this projection's rows `[out, in]` (merging, and DoRA's norm).
    delta: Option<Tensor<B, 2>>,
    /// DoRA's magnitudes of this projection's rows, `[1, out]`.
    magnitude: Option<Tensor<B, 2>>,
    /// The input after LoRA dropout, in a training pass with dropout (DoRA scales its product
    /// with `W` too, as PEFT does).
    dropped: Option<Tensor<B, 3>>,
}

/// `pair`'s shares for the projections of `rows` output rows each that its matrix stacks (one
/// when it is not fused): the update of `x` when given (the forward, with `ΔW` only for DoRA's
/// norm, held constant for gradients as PEFT holds it; `x` dropped first in a training pass with
/// `dropout`), else `ΔW` (merging).
fn shares<B: Backend>(
    pair: &LoraPair<B>,
    scale: f64,
    x: Option<&Tensor<B, 3>>,
    dropout: Option<&Dropout>,
    rows: &[usize],
) -> Vec<Share<B>> {
    let LoraPair { a, b, magnitude } = pair;
    // One mask per adapter, as PEFT has one dropout module per adapted layer.
    let dropped = x.zip(dropout).map(|(x, d)| {
        let shape = x.dims();
        let mask = d.mask(shape.iter().product());
        x.clone() * Tensor::<B, 3>::from_data(TensorData::new(mask, shape), &x.device())
    });
    let mut update = x
        .map(|x| {
            let x = dropped.clone().unwrap_or_else(|| x.clone());
            cut(
                &dense(dense(x, a.val()), b.val()).mul_scalar(scale),
                2,
                rows,
            )
        })
        .map(Vec::into_iter);
    let mut delta = (x.is_none() || magnitude.is_some())
        .then(|| {
            // The forward's norm is constant for gradients: no graph is built for it.
            let (a, b) = match x {
                Some(_) => (a.val().detach(), b.val().detach()),
                None => (a.val(), b.val()),
            };
            cut(&a.matmul(b).transpose().mul_scalar(scale), 0, rows)
        })
        .map(Vec::into_iter);
    let mut magnitude = magnitude
        .as_ref()
        .map(|m| cut(&m.val(), 1, rows).into_iter());
    rows.iter()
        .map(|_| Share {
            update: update.as_mut().and_then(Iterator::next),
            delta: delta.as_mut().and_then(Iterator::next),
            magnitude: magnitude.as_mut().and_then(Iterator::next),
            dropped: dropped.clone(),
        })
        .collect()
}

/// `t` cut along `dim` into consecutive pieces of `widths` (a fused matrix's adapter values into
/// the projections it stacks); with one width, `t` itself, uncut.
fn cut<B: Backend, const D: usize>(
    t: &Tensor<B, D>,
    dim: usize,
    widths: &[usize],
) -> Vec<Tensor<B, D>> {
    if let [_] = widths {
        return vec![t.clone()];
    }
    let mut start = 0;
    widths
        .iter()
        .map(|&w| {
            let piece = t.clone().narrow(dim, start, w);
            start += w;
            piece
        })
        .collect()
}

/// Runs the decoder on `tokens` (`[batch, new]`, occupying columns `past..past+new` of `layout`)
/// and returns the final hidden states `[batch, new, hidden]`. With a cache, keys and values of
/// earlier columns come from it and the new ones are appended.
pub(crate) fn hidden_states<B: Backend>(
    config: &ModelConfig,
    base: &BaseModel<B>,
    adapters: Option<&Adapters<B>>,
    tokens: Tensor<B, 2, Int>,
    layout: &Layout,
    mut cache: Option<&mut KvCache<B>>,
    weight_left_rows: usize,
) -> Tensor<B, 3> {
    let device = tokens.device();
    let new = tokens.dims()[1];
    let past = cache.as_ref().map_or(0, |c| c.len());
    // One mask per distinct window (full attention is `None`) and one set of RoPE tables per
    // distinct base, each built once for all blocks.
    let mut masks: Vec<(Option<usize>, Tensor<B, 4>)> = Vec::new();
    let mut ropes: Vec<(Vec<f64>, Rope<B>)> = Vec::new();
    // Each block's RoPE tables, as an index into `ropes`.
    let mut rope_of = Vec::with_capacity(config.num_layers);
    for (i, window) in config.sliding_windows.iter().enumerate() {
        if !masks.iter().any(|(w, _)| w == window) {
            masks.push((
                *window,
                attention_mask::<B>(config, layout, past, new, *window, &device),
            ));
        }
        let inv_freq = config.rope_inv_freq(i);
        rope_of.push(match ropes.iter().position(|(f, _)| *f == inv_freq) {
            Some(at) => at,
            None => {
                let rope = Rope::new(config, &inv_freq, layout, past, new, &device);
                ropes.push((inv_freq, rope));
                ropes.len() - 1
            }
        });
    }
    let mut x = f32_of(embedding(base.embed.val(), tokens));
    if let Some(scale) = config.embed_scale {
        x = x.mul_scalar(scale);
    }
    let norm = |x: Tensor<B, 3>, weight: &Param<Tensor<B, 1>>| {
        rms_norm(x, weight.val(), config.rms_norm_eps)
    };
    let out_norm = |x: Tensor<B, 3>, weight: &Option<Param<Tensor<B, 1>>>| match weight {
        Some(w) => norm(x, w),
        None => x,
    };
    for (i, block) in base.blocks.iter().enumerate() {
        let products = Products {
            lora: adapters.map(|a| (a, i)),
            weight_left_rows,
        };
        let h = norm(x.clone(), &block.input_norm);
        let layer_cache = cache.as_mut().map(|c| (&mut **c, i));
        let window = config.sliding_windows.get(i).copied().flatten();
        let mask = masks
            .iter()
            .find_map(|(w, m)| (*w == window).then_some(m))
            .expect("a mask for every block's window");
        let rope = &ropes[rope_of[i]].1;
        let attn = attention(config, &block.attn, products, h, rope, mask, layer_cache);
        x = x + out_norm(attn, &block.attn_out_norm);
        let h = norm(x.clone(), &block.pre_mlp_norm);
        let mlp = &block.mlp;
        let mut fused = products.shares(&h, Target::GateUpProj, &[&mlp.gate, &mlp.up].map(rows));
        let (fused_up, fused_gate) = (fused.pop().flatten(), fused.pop().flatten());
        let gate = project(
            h.clone(),
            &mlp.gate,
            None,
            products,
            Target::GateProj,
            fused_gate,
        );
        let up = project(h, &mlp.up, None, products, Target::UpProj, fused_up);
        let gate = match config.activation {
            Activation::Silu => silu(gate),
            Activation::GeluTanh => gelu_tanh(gate),
        };
        let mlp = project(gate * up, &mlp.down, None, products, Target::DownProj, None);
        x = x + out_norm(mlp, &block.mlp_out_norm);
    }
    norm(x, &base.norm)
}

/// GELU's tanh approximation, `x/2·(1 + tanh(√(2/π)·(x + 0.044715·x³)))`, as PyTorch's
/// `gelu(approximate="tanh")` (Burn's `gelu_approximate` takes `x³` through `powf`, which a GPU
/// may compute as `exp(3·ln x)`, NaN for x < 0).
fn gelu_tanh<B: Backend, const D: usize>(x: Tensor<B, D>) -> Tensor<B, D> {
    const SQRT_2_OVER_PI: f64 = std::f64::consts::FRAC_2_SQRT_PI * std::f64::consts::FRAC_1_SQRT_2;
    let cube = x.clone() * x.clone() * x.clone();
    let inner = (x.clone() + cube.mul_scalar(0.044715)).mul_scalar(SQRT_2_OVER_PI);
    (x * inner.tanh().add_scalar(1.0)).mul_scalar(0.5)
}

/// `c·tanh(x/c)`: Gemma 2's soft cap of attention scores and logits.
fn soft_cap<B: Backend, const D: usize>(x: Tensor<B, D>, cap: Option<f64>) -> Tensor<B, D> {
    match cap {
        Some(c) => x.div_scalar(c).tanh().mul_scalar(c),
        None => x,
    }
}

/// Projects hidden states `[batch, t, hidden]` to vocabulary logits `[batch, t, vocab]` (soft-
/// capped where the config says).
pub(crate) fn lm_logits<B: Backend>(
    config: &ModelConfig,
    base: &BaseModel<B>,
    hidden: Tensor<B, 3>,
) -> Tensor<B, 3> {
    let head = base.lm_head.as_ref().unwrap_or(&base.embed).val();
    let [batch, t, d] = hidden.dims();
    let vocab = head.dims()[0];
    // Always `x·Wᵀ`: `(W·xᵀ)ᵀ` would leave `[vocab, rows]` to be transposed back, a strided copy
    // of every logit that costs more than the product saves.
    let logits = hidden
        .reshape([batch * t, d])
        .matmul(f32_of(head).transpose())
        .reshape([batch, t, vocab]);
    soft_cap(logits, config.final_softcap)
}

/// Rows up to which [`linear`] multiplies the weight by the transposed input on the CPU (the
/// default of `Execution::weight_left_rows`): measured on Flex (gemm, 2 cores, SmolLM2's shapes,
/// weights cold in memory), `W·xᵀ` ran 1.1–3× as fast as `x·Wᵀ` from 32 to 128 rows (a decoding
/// step has one row per sequence), about as fast from 256 to 512.
pub(crate) const FEW_ROWS: usize = 256;

/// `x·Wᵀ + b` for `x` `[batch, t, in]` and `W` `[out, in]` (HF's layout), as one matrix product
/// over all `batch·t` rows. (Burn's `linear` on a 3-d input runs `batch` separate products of
/// `t` rows each, which reads the whole weight matrix once per row when decoding.) With at most
/// `weight_left_rows` rows the product is computed as `(W·xᵀ)ᵀ`: the same dot products, with the
/// weight as the left operand, which gemm streams without repacking it (SmolLM2's samples and
/// losses came out bit for bit the same on Flex). On a GPU the transposed result would cost a
/// copy kernel per product, so GPU backends pass 0.
fn linear<B: Backend>(
    x: Tensor<B, 3>,
    weight: Tensor<B, 2>,
    bias: Option<Tensor<B, 1>>,
    weight_left_rows: usize,
) -> Tensor<B, 3> {
    let [batch, t, d_in] = x.dims();
    let d_out = weight.dims()[0];
    let rows = x.reshape([batch * t, d_in]);
    let weight = f32_of(weight);
    let y = if batch * t <= weight_left_rows {
        weight.matmul(rows.transpose()).transpose()
    } else {
        rows.matmul(weight.transpose())
    };
    let y = match bias {
        Some(b) => y + b.unsqueeze::<2>(),
        None => y,
    };
    y.reshape([batch, t, d_out])
}

/// `x·W` for `x` `[batch, t, in]` and a LoRA factor `W` `[in, out]`, as one matrix product.
fn dense<B: Backend>(x: Tensor<B, 3>, weight: Tensor<B, 2>) -> Tensor<B, 3> {
    let [batch, t, d_in] = x.dims();
    let d_out = weight.dims()[1];
    x.reshape([batch * t, d_in])
        .matmul(weight)
        .reshape([batch, t, d_out])
}

/// `t` in f32: a weight held in a half dtype, widened for one product (f32 is returned as is).
fn f32_of<B: Backend, const D: usize>(t: Tensor<B, D>) -> Tensor<B, D> {
    match t.dtype() {
        DType::F32 => t,
        _ => t.cast(FloatDType::F32),
    }
}

/// RMSNorm over the last dimension.
fn rms_norm<B: Backend, const D: usize>(
    x: Tensor<B, D>,
    weight: Tensor<B, 1>,
    eps: f64,
) -> Tensor<B, D> {
    let inv = x
        .clone()
        .square()
        .mean_dim(D - 1)
        .add_scalar(eps)
        .sqrt()
        .recip();
    x * inv * weight.unsqueeze::<D>()
}

/// How a block's projections are computed: through which adapters (with the block's index), and
/// up to how many rows the weight is the left operand ([`linear`]).
struct Products<'a, B: Backend> {
    lora: Option<(&'a Adapters<B>, usize)>,
    weight_left_rows: usize,
}

// By hand: a derive would ask `B: Copy`.
impl<B: Backend> Clone for Products<'_, B> {
    fn clone(&self) -> Self {
        *self
    }
}

impl<B: Backend> Copy for Products<'_, B> {}

impl<B: Backend> Products<'_, B> {
    /// The shares of the adapter on `target` in this block applied to `x`, one per projection
    /// of `rows` output rows that it stacks (`None` each when it is not adapted).
    fn shares(&self, x: &Tensor<B, 3>, target: Target, rows: &[usize]) -> Vec<Option<Share<B>>> {
        let adapters_dropout = self.lora.and_then(|(a, _)| a.dropout());
        match self
            .lora
            .and_then(|(a, layer)| a.pair(layer, target).map(|p| (p, a.scale())))
        {
            Some((pair, scale)) => shares(pair, scale, Some(x), adapters_dropout, rows)
                .into_iter()
                .map(Some)
                .collect(),
            None => rows.iter().map(|_| None).collect(),
        }
    }
}

/// `x·Wᵀ + b` with the adapter on `target`, or with `fused`, this projection's share of the
/// adapter on the fused matrix that stacks it (Phi-3's `qkv_proj`): LoRA adds the update; DoRA
/// gives `g ⊙ (x·Wᵀ + update) + b` with `g = m / ‖W + ΔW‖`, in PEFT's form
/// `(x·Wᵀ + b) + (g − 1)·x·Wᵀ + g·update` (with LoRA dropout, `x` dropped in the last two terms,
/// as PEFT computes it).
fn project<B: Backend>(
    x: Tensor<B, 3>,
    weight: &Param<Tensor<B, 2>>,
    bias: Option<&Param<Tensor<B, 1>>>,
    products: Products<'_, B>,
    target: Target,
    fused: Option<Share<B>>,
) -> Tensor<B, 3> {
    let own = products.shares(&x, target, &[rows(weight)]).pop().flatten();
    let left = products.weight_left_rows;
    let bias = bias.map(Param::val);
    let Some(Share {
        update: Some(update),
        delta,
        magnitude,
        dropped,
    }) = own.or(fused)
    else {
        return linear(x, weight.val(), bias, left);
    };
    let (Some(m), Some(delta)) = (magnitude, delta) else {
        return linear(x, weight.val(), bias, left) + update;
    };
    let out = m.dims()[1];
    let norm = (f32_of(weight.val()) + delta).square().sum_dim(1).sqrt();
    let g = (m / norm.reshape([1, out])).reshape([1, 1, out]);
    let base = linear(x, weight.val(), None, left);
    let with_bias = match bias {
        Some(b) => base.clone() + b.unsqueeze::<3>(),
        None => base.clone(),
    };
    let scaled = match dropped {
        Some(x) => linear(x, weight.val(), None, left),
        None => base,
    };
    with_bias + scaled * g.clone().sub_scalar(1.0) + update * g
}

/// The rows of a linear weight `[out, in]` (its output width).
fn rows<B: Backend>(weight: &Param<Tensor<B, 2>>) -> usize {
    weight.dims()[0]
}

#[allow(clippy::too_many_arguments)]
fn attention<B: Backend>(
    config: &ModelConfig,
    attn: &Attention<B>,
    products: Products<'_, B>,
    h: Tensor<B, 3>,
    rope: &Rope<B>,
    mask: &Tensor<B, 4>,
    cache: Option<(&mut KvCache<B>, usize)>,
) -> Tensor<B, 3> {
    let [batch, new, _] = h.dims();
    let (heads, kv_heads, hd) = (config.num_heads, config.num_kv_heads, config.head_dim);
    let mut fused = products
        .shares(&h, Target::QkvProj, &[&attn.q, &attn.k, &attn.v].map(rows))
        .into_iter()
        .flatten();
    let (fused_q, fused_k, fused_v) = (fused.next(), fused.next(), fused.next());
    let q = project(
        h.clone(),
        &attn.q,
        attn.q_bias.as_ref(),
        products,
        Target::QProj,
        fused_q,
    );
    let k = project(
        h.clone(),
        &attn.k,
        attn.k_bias.as_ref(),
        products,
        Target::KProj,
        fused_k,
    );
    let v = project(
        h,
        &attn.v,
        attn.v_bias.as_ref(),
        products,
        Target::VProj,
        fused_v,
    );
    // Qwen3's per-head RMSNorm, then RoPE, on `[batch, new, heads·head_dim]`: the heads are split
    // for attention only after them, so their backward gets its gradient contiguous (the split's
    // reshape copies it out of the head swap's strided view) instead of walking that view.
    let head_norm = |x: Tensor<B, 3>, n: usize, norm: Option<&Param<Tensor<B, 1>>>| match norm {
        Some(w) => rms_norm(x.reshape([batch, new, n, hd]), w.val(), config.rms_norm_eps)
            .reshape([batch, new, n * hd]),
        None => x,
    };
    let q = rope.q.apply(head_norm(q, heads, attn.q_norm.as_ref()));
    let k = rope.k.apply(head_norm(k, kv_heads, attn.k_norm.as_ref()));
    let q = q.reshape([batch, new, heads, hd]).swap_dims(1, 2);
    let k = k.reshape([batch, new, kv_heads, hd]).swap_dims(1, 2);
    let v = v.reshape([batch, new, kv_heads, hd]).swap_dims(1, 2);
    let (k, v) = match cache {
        Some((cache, layer)) => cache.append(layer, k, v),
        None => (k, v),
    };
    // Grouped-query attention without copying keys and values per query head: the `groups`
    // query heads sharing a key/value head are stacked along the rows of one product.
    let groups = config.kv_groups();
    let q = q.reshape([batch, kv_heads, groups * new, hd]);
    let scores = q.matmul(k.swap_dims(2, 3)).mul_scalar(config.attn_scale);
    let scores = soft_cap(scores, config.attn_softcap) + mask.clone();
    let out = softmax(scores, 3)
        .matmul(v)
        .reshape([batch, heads, new, hd])
        .swap_dims(1, 2)
        .reshape([batch, new, heads * hd]);
    project(
        out,
        &attn.o,
        attn.o_bias.as_ref(),
        products,
        Target::OProj,
        None,
    )
}
