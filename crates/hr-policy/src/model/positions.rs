//! Where each token sits: the batch's left-padded [`Layout`], the rotate-half RoPE tables of a
//! call's columns, and the attention mask (causal, padding, sliding window).

use burn::tensor::backend::Backend;
use burn::tensor::{Tensor, TensorData};

use crate::ModelConfig;

/// A batch laid out for the model: rows left-padded to a common length so that every row's last
/// prompt token sits in the same column; later columns are appended by generation or scoring.
#[derive(Debug, Clone)]
pub(crate) struct Layout {
    /// Padding columns at the start of each row.
    pub(crate) pad_left: Vec<usize>,
}

impl Layout {
    /// The columns `rows` laid out this way occupy (each row's padding and tokens).
    pub(crate) fn width(&self, rows: &[Vec<u32>]) -> usize {
        rows.first().map_or(0, |row| self.pad_left[0] + row.len())
    }

    /// Rotary position of column `col` in row `row` (pads get position 0).
    fn position(&self, row: usize, col: usize) -> usize {
        col.saturating_sub(self.pad_left[row])
    }
}

/// HF's rotate-half RoPE, `x·cos + rotate_half(x)·sin` with `rotate_half([x1, x2]) = [−x2, x1]`
/// within each head, for the columns of one call. The tables are laid out like the projections
/// they rotate (`[batch, new, heads·head_dim]`, one copy per head) and the sign is folded into
/// `sin`, so every product is between two contiguous tensors of one shape: a broadcast or a
/// strided operand would send Flex down its element-by-element path.
pub(crate) struct Rope<B: Backend> {
    /// Tables for the query heads.
    pub(super) q: RopeTables<B>,
    /// Tables for the key heads (the query tables when there are as many).
    pub(super) k: RopeTables<B>,
}

/// `cos` and `[−sin, sin]` (the sign of `rotate_half` folded in) for `heads` heads.
#[derive(Clone)]
pub(super) struct RopeTables<B: Backend> {
    cos: Tensor<B, 3>,
    sin: Tensor<B, 3>,
    head_dim: usize,
}

impl<B: Backend> Rope<B> {
    /// The tables of columns `past..past+new` for the inverse frequencies `inv_freq`, computed
    /// in f64 on the host from each row's positions.
    pub(super) fn new(
        config: &ModelConfig,
        inv_freq: &[f64],
        layout: &Layout,
        past: usize,
        new: usize,
        device: &B::Device,
    ) -> Self {
        let hd = config.head_dim;
        let half = hd / 2;
        let (mut cos, mut sin) = (Vec::new(), Vec::new());
        for row in 0..layout.pad_left.len() {
            for col in past..past + new {
                let pos = layout.position(row, col) as f64;
                for i in 0..hd {
                    let angle = pos * inv_freq[i % half];
                    cos.push(angle.cos() as f32);
                    let s = angle.sin() as f32;
                    sin.push(if i < half { -s } else { s });
                }
            }
        }
        let tables = |heads: usize| {
            let repeat = |per_column: &[f32]| -> Tensor<B, 3> {
                let mut data = Vec::with_capacity(per_column.len() * heads);
                for column in per_column.chunks(hd) {
                    for _ in 0..heads {
                        data.extend_from_slice(column);
                    }
                }
                let shape = [layout.pad_left.len(), new, heads * hd];
                Tensor::from_data(TensorData::new(data, shape), device)
            };
            RopeTables {
                cos: repeat(&cos),
                sin: repeat(&sin),
                head_dim: hd,
            }
        };
        let q = tables(config.num_heads);
        let k = if config.num_kv_heads == config.num_heads {
            q.clone()
        } else {
            tables(config.num_kv_heads)
        };
        Self { q, k }
    }
}

impl<B: Backend> RopeTables<B> {
    /// Rotates `x` `[batch, new, heads·head_dim]` (the tables' shape).
    pub(super) fn apply(&self, x: Tensor<B, 3>) -> Tensor<B, 3> {
        let [b, t, width] = x.dims();
        let (h, d) = (width / self.head_dim, self.head_dim);
        // Each head's halves swapped, `[x1, x2]` → `[x2, x1]`: one flip of the halves' axis
        // (one copy on a GPU, a view on Flex) where slicing and concatenating took four kernels;
        // the same values either way.
        let swapped = x
            .clone()
            .reshape([b, t, h, 2, d / 2])
            .flip([3])
            .reshape([b, t, width]);
        x * self.cos.clone() + swapped * self.sin.clone()
    }
}

/// Additive mask `[batch, kv_heads, groups·new, past+new]`, laid out like the grouped attention
/// scores it is added to (one copy per head, so the sum is between two contiguous tensors of one
/// shape): a query sees keys at or before its column that are not padding and, with a sliding
/// `window`, fewer than `window` columns back (padding sits before every real token, so column
/// distance is position distance).
pub(super) fn attention_mask<B: Backend>(
    config: &ModelConfig,
    layout: &Layout,
    past: usize,
    new: usize,
    window: Option<usize>,
    device: &B::Device,
) -> Tensor<B, 4> {
    const MASKED: f32 = -1e9;
    let (batch, heads) = (layout.pad_left.len(), config.num_heads);
    let total = past + new;
    let mut data = Vec::with_capacity(batch * heads * new * total);
    let mut row = Vec::with_capacity(new * total);
    for &pad in &layout.pad_left {
        row.clear();
        for q in past..total {
            let seen = |k: usize| k <= q && k >= pad && window.is_none_or(|w| q - k < w);
            row.extend((0..total).map(|k| if seen(k) { 0.0 } else { MASKED }));
        }
        for _ in 0..heads {
            data.extend_from_slice(&row);
        }
    }
    let shape = [batch, config.num_kv_heads, config.kv_groups() * new, total];
    Tensor::from_data(TensorData::new(data, shape), device)
}
