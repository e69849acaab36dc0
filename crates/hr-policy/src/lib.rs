//! The policy model: a decoder-only causal LM of the Llama, Mistral, Qwen2, Qwen3, Gemma 2,
//! Gemma 3 (text) and Phi-3 families on Burn (RMSNorm, rotate-half RoPE with `linear` or `llama3`
//! scaling, grouped-query attention with full or sliding-window masks, SwiGLU or GeGLU, tied or
//! untied embeddings, Qwen2's q/k/v biases, per-head q/k norms, Gemma's extra norms and
//! soft-capping, Phi-3's fused q/k/v and gate/up matrices, cut apart at load),
//! generic over the Burn backend. It loads HF `config.json`,
//! `model.safetensors` (single or sharded, read tensor by tensor) and `tokenizer.json`; adds LoRA
//! (or DoRA) adapters that alone train, saved and loaded as PEFT files; samples completions with a KV
//! cache, temperature, top-k, top-p and min-p from an explicit, serialisable RNG (on the host, or
//! on the device where that reads back only the tokens), returning token ids and log-probs; and
//! scores given completions under the policy or the reference (the same base with no adapters: no
//! second copy of the weights); each policy counts the matrix arithmetic it did ([`FlopCount`]),
//! and [`gemm_rate`] measures the device's f32 matrix-product rate to hold it against.
//!
//! It is not the trainer (GRPO, optimiser, checkpoints live in `hr-grpo`) and it does not choose
//! the backend: the binary does.

mod chat;
mod config;
mod device_sampling;
mod error;
mod flops;
mod lora;
mod model;
mod peft;
mod policy;
mod probe;
mod rng;
mod sampling;
mod tokenizer;
mod weights;

pub use chat::{ChatTemplate, IM_END, IM_START, Message};
pub use config::{Activation, Family, ModelConfig, RopeScaling};
pub use error::PolicyError;
pub use flops::FlopCount;
pub use lora::{Adapters, LayerAdapters, LoraConfig, LoraPair, Target};
pub use model::{Attention, BaseModel, Block, KvCache, Mlp};
pub use peft::{
    ADAPTER_CONFIG, ADAPTER_WEIGHTS, AdapterFiles, HostTensors, adapter_config_json, adapter_files,
    adapters_from_files, f32_safetensors, load_adapters, parse_adapter_config,
    read_f32_safetensors, save_adapters,
};
pub use policy::{Entropy, Execution, Generation, Policy, Sampler, host_f32, host_reads};
pub use probe::{GemmRate, gemm_rate};
pub use rng::{PolicyRng, RngState};
pub use sampling::SamplingConfig;
pub use tokenizer::ChatTokenizer;
