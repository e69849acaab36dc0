//! The arithmetic the model does, counted from its shapes and the work each call did: matrix
//! products only (projections, LoRA's two products, attention's two products over every column
//! it computes, padding and masked ones included, and the LM head), two operations per
//! multiply-add. Element-wise work (norms, RoPE, softmax, SwiGLU) is left out; it is a few per
//! cent of the products at these widths.
//!
//! A pass through the adapters on an autodiff backend also counts its backward: the base is
//! frozen, so its products need only the input's gradient (as many operations as the forward);
//! LoRA's and attention's products need both operands' (twice the forward); the LM head the
//! input's. These are the figures a step's FLOP rate is measured with.

use std::sync::Arc;
use std::sync::atomic::{AtomicU64, Ordering};

use crate::{LoraConfig, ModelConfig};

/// Operations counted so far (see the module's conventions).
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct FlopCount {
    /// Forward passes: sampling, scoring, logits.
    pub forward: u64,
    /// Backward passes of what was scored through the adapters on an autodiff backend.
    pub backward: u64,
}

impl FlopCount {
    /// Forward and backward together.
    pub fn total(&self) -> u64 {
        self.forward + self.backward
    }

    /// What was counted since `earlier`.
    #[must_use]
    pub fn since(&self, earlier: &FlopCount) -> FlopCount {
        FlopCount {
            forward: self.forward.saturating_sub(earlier.forward),
            backward: self.backward.saturating_sub(earlier.backward),
        }
    }
}

/// The running count a policy and its inference view share.
#[derive(Debug, Default)]
pub(crate) struct FlopCounter {
    forward: AtomicU64,
    backward: AtomicU64,
}

impl FlopCounter {
    pub(crate) fn shared() -> Arc<Self> {
        Arc::new(Self::default())
    }

    pub(crate) fn add(&self, work: FlopCount) {
        self.forward.fetch_add(work.forward, Ordering::Relaxed);
        self.backward.fetch_add(work.backward, Ordering::Relaxed);
    }

    pub(crate) fn get(&self) -> FlopCount {
        FlopCount {
            forward: self.forward.load(Ordering::Relaxed),
            backward: self.backward.load(Ordering::Relaxed),
        }
    }
}

/// The decoder's work on `batch` rows of `new` columns after `past` cached ones; `backward` when
/// the pass will be back-propagated.
pub(crate) fn decoder(
    config: &ModelConfig,
    lora: Option<&LoraConfig>,
    batch: usize,
    new: usize,
    past: usize,
    backward: bool,
) -> FlopCount {
    let (d, i) = (config.hidden_size as u64, config.intermediate_size as u64);
    let q = (config.num_heads * config.head_dim) as u64;
    let kv = (config.num_kv_heads * config.head_dim) as u64;
    let tokens = (batch * new) as u64;
    let projections = 2 * tokens * (d * q + 2 * d * kv + q * d + 3 * d * i);
    // Summed over every adapted (layer, projection): a config may adapt some layers only.
    let adapters: u64 = lora.map_or(0, |l| {
        l.adapted(config.num_layers)
            .iter()
            .map(|(_, t)| {
                let (d_in, d_out) = t.dims(config);
                2 * tokens * (l.rank * (d_in + d_out)) as u64
            })
            .sum()
    });
    // DoRA's `A·B` per adapted projection and pass, for the weight norm (held constant, so
    // nothing flows back through it).
    let dora: u64 = lora.filter(|l| l.dora).map_or(0, |l| {
        l.adapted(config.num_layers)
            .iter()
            .map(|(_, t)| {
                let (d_in, d_out) = t.dims(config);
                2 * (l.rank * d_in * d_out) as u64
            })
            .sum()
    });
    let attention = 4 * tokens * (config.num_heads * (past + new) * config.head_dim) as u64;
    let layers = config.num_layers as u64;
    FlopCount {
        forward: layers * (projections + attention) + adapters + dora,
        backward: if backward {
            layers * (projections + 2 * attention) + 2 * adapters
        } else {
            0
        },
    }
}

/// The LM head's work on `rows` positions.
pub(crate) fn lm_head(config: &ModelConfig, rows: usize, backward: bool) -> FlopCount {
    let work = 2 * (rows * config.hidden_size * config.vocab_size) as u64;
    FlopCount {
        forward: work,
        backward: if backward { work } else { 0 },
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::Target;

    fn config() -> ModelConfig {
        let json = serde_json::json!({
            "architectures": ["LlamaForCausalLM"], "model_type": "llama",
            "vocab_size": 100, "hidden_size": 8, "intermediate_size": 16,
            "num_hidden_layers": 2, "num_attention_heads": 2, "num_key_value_heads": 1,
            "rms_norm_eps": 1e-5, "rope_theta": 10000.0, "tie_word_embeddings": true,
            "max_position_embeddings": 64
        });
        ModelConfig::from_json(std::path::Path::new("config.json"), &json.to_string())
            .expect("a valid config")
    }

    #[test]
    fn counts_follow_the_shapes_by_hand() {
        let c = config();
        // head_dim 4: q 8, kv 4; per token per layer 2·(8·8 + 2·8·4 + 8·8 + 3·8·16) = 1152.
        // Attention: 4 · heads 2 · columns 3 · head_dim 4 = 96 per token per layer.
        let plain = decoder(&c, None, 1, 1, 2, false);
        assert_eq!(plain.forward, 2 * (1152 + 96));
        assert_eq!(plain.backward, 0);
        // LoRA r 2 on q (8 → 8): 2·2·(8 + 8) = 64 per token per layer.
        let lora = LoraConfig::new(2, 4.0, vec![Target::QProj]).expect("a LoRA config");
        let trained = decoder(&c, Some(&lora), 3, 1, 2, true);
        assert_eq!(trained.forward, 3 * 2 * (1152 + 64 + 96));
        assert_eq!(trained.backward, 3 * 2 * (1152 + 2 * 64 + 2 * 96));
        assert_eq!(lm_head(&c, 5, true).total(), 2 * 2 * 5 * 8 * 100);
        let counter = FlopCounter::shared();
        counter.add(plain);
        let before = counter.get();
        counter.add(trained);
        assert_eq!(counter.get().since(&before), trained);
    }
}
