//! The key/value cache of decoding and scoring: per block, written in place in one buffer when
//! the width is known, else grown by concatenation.

use burn::tensor::backend::Backend;
use burn::tensor::{Int, Tensor};

/// Keys and values of the positions seen so far, per block, before the GQA repeat.
///
/// With a capacity (generation, which knows its prompt width plus new tokens), each block's keys
/// and values live in one buffer of that many columns, written in place column by column, and
/// attention reads the live prefix: no buffer grows, so decoding copies O(n) values, not O(n²).
/// Without one (scoring, whose backward then needs no buffer), each append concatenates.
#[derive(Debug, Clone)]
pub struct KvCache<B: Backend> {
    layers: Vec<Option<LayerKv<B>>>,
    capacity: Option<usize>,
}

/// One block's keys and values `[batch, kv_heads, columns, head_dim]`, of which the first `len`
/// columns are live.
#[derive(Debug, Clone)]
struct LayerKv<B: Backend> {
    k: Tensor<B, 4>,
    v: Tensor<B, 4>,
    len: usize,
}

impl<B: Backend> KvCache<B> {
    /// An empty cache for `num_layers` blocks whose appends concatenate.
    pub fn new(num_layers: usize) -> Self {
        Self {
            layers: vec![None; num_layers],
            capacity: None,
        }
    }

    /// An empty cache for `num_layers` blocks and at most `capacity` columns, written in place.
    pub fn with_capacity(num_layers: usize, capacity: usize) -> Self {
        Self {
            capacity: Some(capacity),
            ..Self::new(num_layers)
        }
    }

    /// The columns a block's buffer holds, when appends write in place.
    pub(crate) fn capacity(&self) -> Option<usize> {
        self.capacity
    }

    /// How many positions are cached.
    pub fn len(&self) -> usize {
        self.layers
            .first()
            .and_then(Option::as_ref)
            .map_or(0, |layer| layer.len)
    }

    /// Whether nothing is cached yet.
    pub fn is_empty(&self) -> bool {
        self.len() == 0
    }

    /// The same rows, selected: row `i` is row `rows[i]` of `self`, written into a cache of
    /// `capacity` (the selected rows' own columns only, so the copy is the live prefix).
    pub(crate) fn select_rows(self, rows: &Tensor<B, 1, Int>, capacity: Option<usize>) -> Self {
        let layers = self
            .layers
            .into_iter()
            .map(|layer| {
                layer.map(|LayerKv { k, v, len }| {
                    let live = |t: Tensor<B, 4>| {
                        let [b, h, _, d] = t.dims();
                        t.slice([0..b, 0..h, 0..len, 0..d]).select(0, rows.clone())
                    };
                    LayerKv::stored(live(k), live(v), capacity)
                })
            })
            .collect();
        Self { layers, capacity }
    }

    /// Appends block `layer`'s new keys and values `[batch, kv_heads, new, head_dim]`; returns
    /// all live ones.
    pub(super) fn append(
        &mut self,
        layer: usize,
        k: Tensor<B, 4>,
        v: Tensor<B, 4>,
    ) -> (Tensor<B, 4>, Tensor<B, 4>) {
        let [b, h, new, d] = k.dims();
        let slot = &mut self.layers[layer];
        let stored = match slot.take() {
            None => LayerKv::stored(k, v, self.capacity),
            Some(LayerKv { k: pk, v: pv, len }) if pk.dims()[2] >= len + new => {
                let at = [0..b, 0..h, len..len + new, 0..d];
                LayerKv {
                    k: pk.slice_assign(at.clone(), k),
                    v: pv.slice_assign(at, v),
                    len: len + new,
                }
            }
            Some(LayerKv { k: pk, v: pv, len }) => LayerKv {
                k: Tensor::cat(vec![pk, k], 2),
                v: Tensor::cat(vec![pv, v], 2),
                len: len + new,
            },
        };
        let live = |t: &Tensor<B, 4>| {
            if t.dims()[2] == stored.len {
                t.clone()
            } else {
                t.clone().slice([0..b, 0..h, 0..stored.len, 0..d])
            }
        };
        let out = (live(&stored.k), live(&stored.v));
        *slot = Some(stored);
        out
    }
}

impl<B: Backend> LayerKv<B> {
    /// Keys and values `[batch, kv_heads, len, head_dim]` as a block keeps them: at the start of
    /// buffers of `capacity` columns when that is more than they hold, else as they are.
    fn stored(k: Tensor<B, 4>, v: Tensor<B, 4>, capacity: Option<usize>) -> Self {
        let len = k.dims()[2];
        match capacity {
            Some(cap) if cap > len => Self {
                k: in_buffer(k, cap),
                v: in_buffer(v, cap),
                len,
            },
            _ => Self { k, v, len },
        }
    }
}

/// `t` `[batch, heads, len, head_dim]` (f32, as every activation) at the start of a fresh
/// buffer of `capacity` columns, whose columns past `len` are never read before written.
fn in_buffer<B: Backend>(t: Tensor<B, 4>, capacity: usize) -> Tensor<B, 4> {
    let [b, h, len, d] = t.dims();
    Tensor::<B, 4>::empty([b, h, capacity, d], &t.device())
        .slice_assign([0..b, 0..h, 0..len, 0..d], t)
}
