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
//!
//! # In detail
//!
//! The policy model. `config.rs` reads HF `config.json` of the `llama`, `mistral`, `qwen2`,
//! `qwen3`, `gemma2`, `gemma3_text` and `phi3` families (GQA, `head_dim` apart from hidden/heads,
//! tied or untied head, Qwen2's q/k/v biases, `attention_bias`, per-head q/k RMSNorm, sliding
//! windows per layer from `layer_types` or each family's own rule; Gemma's √hidden embedding scale,
//! `(1 + w)` norms (the loader adds the 1 once, in f32), its four norms a block, GeGLU,
//! `query_pre_attn_scalar`, Gemma 2's soft-capping of scores and logits, transformers' defaults for
//! what a config omits; Phi-3's fused `qkv_proj` and `gate_up_proj`, which `weights.rs` cuts by
//! rows at load so every family runs one forward, while LoRA adapts the fused matrices as PEFT
//! does, its update cut the same way in `model.rs`), with RoPE `default`, `linear` or `llama3`
//! scaling (`config/rope.rs`) in the Hub's spelling (`rope_theta`, `rope_scaling`, Gemma 3's
//! `rope_local_base_freq`) or transformers 5's (`rope_parameters`, keyed by layer type for Gemma
//! 3); `ModelConfig::rope_inv_freq(layer)` applies the scaling as transformers'
//! `ROPE_INIT_FUNCTIONS` do, with Gemma 3's window layers on their own unscaled base. Anything else
//! (`yarn`, `longrope`, partial rotary, another `model_type`) is refused naming the field and the
//! supported values, and so is a size beyond several times the largest published model's; the
//! weights loader confirms the layer count against the tensors before anything is sized by it, and
//! refuses an adapter tensor holding a NaN or an infinity.
//!
//! `weights.rs` loads `model.safetensors` or an index of shards (f32/f16/bf16 on file, every name,
//! shape and dtype checked, unknown tensors refused) into the dtype `Policy::load_as` asks for (the
//! plan's `model.dtype`: f32, f16 or bf16) for the weight matrices (embedding, projections, LM
//! head); norm weights and biases stay f32. `model.rs` widens each matrix to f32 where it is used
//! (`f32_of` before every product and after the embedding gather), so activations, LoRA, gradients
//! and AdamW state are f32 and a half base differs from the f32 model only by its weights'
//! rounding: a test checks it against the f64 reference of the rounded weights (1e-4) and states
//! the log-probability tolerance against f32 on the tiny model (f16 5e-3, bf16 3e-2; measured
//! 1.9e-3 and 1.4e-2). Why not compute in half, as transformers does for a bf16 model: every
//! product would round its activations too, and Flex and lavapipe have no fast half arithmetic; the
//! cost is a transient f32 copy of one matrix per product (on a GPU, extra memory traffic, not yet
//! measured). A device whose backend cannot store the dtype (`Backend::dtype_usage`; lavapipe has
//! no bf16) is refused before anything is read, and hr-train names `model.dtype`. Files are read
//! tensor by tensor: only the headers are read up front (validated against the file's length as
//! `safetensors` validates a buffer), each tensor's bytes when it is taken, so no whole file is
//! held beside the converted weights (`cargo xtask bench load`). Every linear weight and the LM
//! head stay as HF stores them, `[out, in]` (no transpose at load); a tied head is the embedding
//! itself.
//!
//! `model.rs` is the decoder (RMSNorm, per-head q/k norms, rotate-half RoPE from host f64 tables
//! per row position and distinct base, left-padded batches with an additive mask per distinct
//! window, GQA with the query heads of one KV head stacked into one product so keys and values are
//! never copied per head, SwiGLU or GeGLU, Gemma's output norms and soft caps) with a KV cache:
//! while generating, one buffer per block sized for the prompt and the new tokens, written in place
//! column by column (attention reads its live prefix); while scoring, appended by concatenation, so
//! the backward needs no buffer. RoPE swaps each head's halves with one `flip`. Every projection is
//! one product over all `batch·t` rows (`linear`; Burn's `linear` on a 3-d input runs `batch`
//! separate products, which while decoding reads every weight once per row): `x·Wᵀ`, or on the CPU
//! `(W·xᵀ)ᵀ` up to 256 rows (`Execution::weight_left_rows`), where gemm streams the weight as its
//! left operand instead of repacking it (a decode step's products 1.1–3× as fast on Flex; the same
//! dot products); never on a GPU, where the transposed result costs a copy kernel. The LM head is
//! always `x·Wᵀ` (the other form leaves every logit to transpose back). Element-wise operands are
//! laid out so that Flex takes its contiguous SIMD paths, never its element-by-element walk of a
//! broadcast or strided view: RoPE's tables and the attention mask are built per call in the full
//! shape of what they meet (RoPE's sign folded into its sine table), and Qwen3's head norms and
//! RoPE run before the heads are split, so their backward receives contiguous gradients.
//!
//! `lora.rs` holds `Adapters` (PEFT initialisation from our RNG: A uniform ±1/√in, B = 0, DoRA's
//! magnitudes the base rows' norms; scale `alpha/r`, or `alpha/√r` with rsLoRA; DoRA's `m/‖W + ΔW‖`
//! row factor, the norm detached as PEFT does, in `model.rs`'s `project`, folded into the weights
//! for sampling; LoRA dropout in training passes only, `Adapters::for_training(seed)` drawing each
//! pass's masks from its own seed, which the trainer derives per step from a fork of its sampling
//! stream and per chunk of each update; on every layer, PEFT's `layers_to_transform` subset, or the
//! projections a regular-expression `target_modules` full-matches, `LoraConfig::adapted`; of the
//! projections the family has, `LoraConfig::fit`: Phi-3's `Target::QkvProj` and `GateUpProj`), the
//! only module that trains; `peft.rs` saves and loads them as PEFT files, deterministically (`cargo
//! xtask conformance families` has PEFT load a layer-subset, a regex and two DoRA adapters and
//! adapt exactly the same projections). Every checkpoint's PEFT files and the final `adapter/` name
//! the plan's `model.hub_id`, else the model folder's absolute path, as `base_model_name_or_path`
//! (proofs compare the adapter tensors' digest, not that file, so runs reached by other paths still
//! compare).
//!
//! `policy.rs`: `Policy::{logits, generate, score}`; adapters are passed per call, so the reference
//! is the same base with `None`. `generate` through adapters first folds them into the weights they
//! adapt (`BaseModel::merged`: `W + s·(A·B)ᵀ` in f32, the other weights shared), so a decode step
//! makes one product per projection; scoring, which trains, keeps them. The cost is an f32 copy of
//! each adapted matrix while sampling (in bf16 the rounding would swallow a young adapter's
//! update). How work is laid out is an `Execution` (`with_execution`), fixed per device kind by the
//! binary (`backend::execution`) and passed alike to training and `evaluate`
//! (`hr_train::load_policy`), since a row's last bits depend on it: lanes, where `generate` splits
//! its rows into groups, each with its own KV cache, that run the decoder side by side on rayon's
//! pool, the tokens drawn row by row in order (two on the CPU, where Flex's element-wise work runs
//! on one thread; one on a GPU); the `Sampler`, host or device (below); which operand a
//! projection's weight is; and how many logits the scoring pass materialises at once (8 Mi on the
//! CPU, 64 Mi on a GPU, where a chunk is a launch of the head, log-softmax and gather). Repeated
//! prompts (GRPO samples each one G times) run once: the cached generation prefills each distinct
//! prompt and copies its keys and values to the rows that repeat it, and the scoring pass does the
//! same with gradients (`select` sums them back), then runs each completion against its prompt's
//! cache; a test checks samples, scores and gradients against running every row alone.
//!
//! `sampling.rs` samples on the host in f64 (repetition penalty, temperature, top-k, top-p
//! renormalised after it, min-p, inverse CDF; the log-probability returned is the unpenalised,
//! uncut one scoring recomputes; each row's distribution is prepared on rayon's pool, then the
//! draws take the RNG's numbers row by row) from `rng.rs`'s ChaCha8 whose state (key, stream, word
//! position) serialises.
//!
//! `device_sampling.rs` is the GPU's sampler (`Sampler::Device`) for greedy and temperature-only
//! sampling, the GRPO default: the same inverse CDF on the same uniform numbers, taken from the RNG
//! first (one per live row, in row order, as the host takes them), computed in f32 on the device
//! over two levels of about √vocab (block sums, then within the chosen block: Burn's cumulative sum
//! is O(n²) per row on cubecl), so a step reads back a token and its log-probability per row
//! instead of the row's logits. A token differs from the host's only where `u` falls within f32
//! rounding of a boundary (tests: 1,000 random rows, the tiny model's generations). Top-k, top-p,
//! min-p and the repetition penalty stay on the host. Why not Gumbel-max with a counter hash, as
//! first planned: the hash needs bitwise integer ops, which Burn's fusion does not fuse (a kernel
//! each), and it would consume the RNG differently from the host sampler.
//!
//! `tokenizer.rs` wraps the pure-Rust `tokenizers` build with the model's chat template; `chat.rs`
//! renders `tokenizer_config.json`'s `chat_template` with minijinja (Python string methods through
//! minijinja-contrib's pycompat, `raise_exception`, `bos_token`/`eos_token`), or ChatML when the
//! model has none, and derives a multi-turn continuation (close the assistant turn, the
//! environment's reply, open the next) by rendering around a placeholder (every render under
//! minijinja's fuel, 10 M instructions, and a 64 MiB output limit); the template's EOS and
//! `generation_config.json`'s `eos_token_id`s end completions. `benches/policy.rs` measures
//! generation and LoRA train steps (`cargo xtask bench policy [--backend ndarray]`).
//!
//! The CPU backend (Flex) was chosen by measurement; why, and how the binary sets up the allocator
//! and the thread pool for it: the `hessian-recipes` crate's docs. How the benchmarks against TRL
//! use this crate's counters (`timing/*`, `flops/*`, `probe gemm`): `docs/evaluation.md`.

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
