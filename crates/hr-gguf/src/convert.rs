//! GGUF (llama / qwen2 architectures) → an HF model folder.

use std::collections::BTreeMap;
use std::path::Path;

use safetensors::Dtype;
use safetensors::tensor::TensorView;
use serde_json::json;

use crate::tokenizer::{tokenizer_config_json, tokenizer_json};
use crate::{Gguf, GgufError, dequantize};

/// What a conversion wrote.
#[derive(Debug, Clone, PartialEq)]
pub struct Converted {
    /// `general.architecture`.
    pub architecture: String,
    /// Number of tensors written.
    pub tensors: usize,
    /// Number of parameters written.
    pub parameters: u64,
}

/// The HF name of a GGUF tensor, if it is one we convert.
fn hf_name(gguf_name: &str) -> Option<String> {
    let fixed = match gguf_name {
        "token_embd.weight" => Some("model.embed_tokens.weight"),
        "output_norm.weight" => Some("model.norm.weight"),
        "output.weight" => Some("lm_head.weight"),
        _ => None,
    };
    if let Some(name) = fixed {
        return Some(name.to_owned());
    }
    let rest = gguf_name.strip_prefix("blk.")?;
    let (layer, leaf) = rest.split_once('.')?;
    layer.parse::<usize>().ok()?;
    let (module, kind) = leaf.rsplit_once('.')?;
    let hf = match module {
        "attn_norm" => "input_layernorm",
        "ffn_norm" => "post_attention_layernorm",
        "attn_q" => "self_attn.q_proj",
        "attn_k" => "self_attn.k_proj",
        "attn_v" => "self_attn.v_proj",
        "attn_output" => "self_attn.o_proj",
        "ffn_gate" => "mlp.gate_proj",
        "ffn_up" => "mlp.up_proj",
        "ffn_down" => "mlp.down_proj",
        _ => return None,
    };
    Some(format!("model.layers.{layer}.{hf}.{kind}"))
}

/// Undoes llama.cpp's conversion-time permutation of Q/K rows (it interleaves each head's two
/// RoPE halves): HF row `h·d + j·d/2 + i` is GGUF row `h·d + 2i + j`.
fn unpermute_rows(values: &[f32], heads: usize, cols: usize) -> Vec<f32> {
    let rows = values.len() / cols;
    let d = rows / heads;
    let mut out = vec![0.0; values.len()];
    for h in 0..heads {
        for i in 0..d / 2 {
            for j in 0..2 {
                let src = h * d + 2 * i + j;
                let dst = h * d + j * (d / 2) + i;
                out[dst * cols..(dst + 1) * cols]
                    .copy_from_slice(&values[src * cols..(src + 1) * cols]);
            }
        }
    }
    out
}

/// Converts `gguf` into `config.json`, `model.safetensors` (f32), `tokenizer.json` and, when the
/// GGUF carries a chat template, `tokenizer_config.json` in `out`.
pub fn convert_to_hf(gguf: &Gguf, out: &Path) -> Result<Converted, GgufError> {
    let arch = gguf.meta_str("general.architecture")?.to_owned();
    let permuted = match arch.as_str() {
        "llama" => true,
        "qwen2" => false,
        other => {
            return Err(GgufError::Metadata {
                key: "general.architecture".to_owned(),
                message: format!("`{other}` is not supported; llama and qwen2 are"),
            });
        }
    };
    let key = |k: &str| format!("{arch}.{k}");
    let heads = gguf.meta_u64(&key("attention.head_count"))? as usize;
    let kv_heads = match gguf.metadata.get(&key("attention.head_count_kv")) {
        Some(v) => v.as_u64().ok_or_else(|| GgufError::Metadata {
            key: key("attention.head_count_kv"),
            message: "must be an integer".to_owned(),
        })? as usize,
        None => heads,
    };
    let hidden = gguf.meta_u64(&key("embedding_length"))? as usize;
    let tokenizer = tokenizer_json(gguf)?;
    let tokenizer_config = tokenizer_config_json(gguf)?;
    let vocab = tokenizer["model"]["vocab"]
        .as_object()
        .map_or(0, serde_json::Map::len);
    let tied = !gguf.tensors.contains_key("output.weight");
    let mut tensors: BTreeMap<String, (Vec<usize>, Vec<u8>)> = BTreeMap::new();
    let mut parameters = 0u64;
    for (name, info) in &gguf.tensors {
        let hf = hf_name(name).ok_or_else(|| GgufError::Tensor {
            tensor: name.clone(),
            message: "has no HF counterpart in a llama/qwen2 model".to_owned(),
        })?;
        let mut values = dequantize(info.ggml_type, gguf.tensor_bytes(name, info)?);
        let shape: Vec<usize> = info.dims.iter().rev().map(|d| *d as usize).collect();
        if permuted && hf.ends_with("weight") && (hf.contains("q_proj") || hf.contains("k_proj")) {
            let n = if hf.contains("q_proj") {
                heads
            } else {
                kv_heads
            };
            values = unpermute_rows(&values, n, shape[1]);
        }
        if permuted && hf.ends_with("bias") && (hf.contains("q_proj") || hf.contains("k_proj")) {
            let n = if hf.contains("q_proj") {
                heads
            } else {
                kv_heads
            };
            values = unpermute_rows(&values, n, 1);
        }
        parameters += values.len() as u64;
        tensors.insert(
            hf,
            (shape, values.iter().flat_map(|v| v.to_le_bytes()).collect()),
        );
    }
    let views = tensors
        .iter()
        .map(|(n, (s, b))| TensorView::new(Dtype::F32, s.clone(), b).map(|v| (n.clone(), v)))
        .collect::<Result<Vec<_>, _>>()
        .map_err(|e| GgufError::Tensor {
            tensor: "(all)".to_owned(),
            message: e.to_string(),
        })?;
    let metadata = std::collections::HashMap::from([("format".to_owned(), "pt".to_owned())]);
    let weights = safetensors::serialize(views, Some(metadata)).map_err(|e| GgufError::Tensor {
        tensor: "(all)".to_owned(),
        message: e.to_string(),
    })?;
    let token_id = |k: &str| gguf.metadata.get(k).and_then(crate::Value::as_u64);
    let mut config = json!({
        "architectures": [if arch == "qwen2" { "Qwen2ForCausalLM" } else { "LlamaForCausalLM" }],
        "model_type": arch,
        "hidden_act": "silu",
        "vocab_size": vocab,
        "hidden_size": hidden,
        "intermediate_size": gguf.meta_u64(&key("feed_forward_length"))?,
        "num_hidden_layers": gguf.meta_u64(&key("block_count"))?,
        "num_attention_heads": heads,
        "num_key_value_heads": kv_heads,
        "head_dim": hidden / heads,
        "rms_norm_eps": gguf.meta_f64(&key("attention.layer_norm_rms_epsilon"))?,
        "rope_theta": gguf.metadata.get(&key("rope.freq_base")).and_then(crate::Value::as_f64).unwrap_or(10_000.0),
        "rope_scaling": null,
        "max_position_embeddings": gguf.metadata.get(&key("context_length")).and_then(crate::Value::as_u64).unwrap_or(2048),
        "tie_word_embeddings": tied,
        "torch_dtype": "float32",
    });
    if let Some(bos) = token_id("tokenizer.ggml.bos_token_id") {
        config["bos_token_id"] = json!(bos);
    }
    if let Some(eos) = token_id("tokenizer.ggml.eos_token_id") {
        config["eos_token_id"] = json!(eos);
    }
    std::fs::create_dir_all(out).map_err(|source| GgufError::Io {
        path: out.to_owned(),
        source,
    })?;
    let write = |file: &str, bytes: &[u8]| {
        std::fs::write(out.join(file), bytes).map_err(|source| GgufError::Io {
            path: out.join(file),
            source,
        })
    };
    write("model.safetensors", &weights)?;
    write(
        "config.json",
        &serde_json::to_vec_pretty(&config).unwrap_or_default(),
    )?;
    write(
        "tokenizer.json",
        &serde_json::to_vec(&tokenizer).unwrap_or_default(),
    )?;
    if let Some(config) = tokenizer_config {
        write(
            "tokenizer_config.json",
            &serde_json::to_vec_pretty(&config).unwrap_or_default(),
        )?;
    }
    Ok(Converted {
        architecture: arch,
        tensors: tensors.len(),
        parameters,
    })
}

#[cfg(test)]
mod tests {
    use super::unpermute_rows;

    /// llama.cpp's `permute` (convert_hf_to_gguf.py), written out for 1 column.
    fn permute(values: &[f32], heads: usize) -> Vec<f32> {
        let d = values.len() / heads;
        let mut out = vec![0.0; values.len()];
        for h in 0..heads {
            for j in 0..2 {
                for i in 0..d / 2 {
                    out[h * d + 2 * i + j] = values[h * d + j * (d / 2) + i];
                }
            }
        }
        out
    }

    #[test]
    fn unpermute_inverts_llama_cpp_permute() {
        let hf: Vec<f32> = (0..24).map(|x| x as f32).collect();
        assert_eq!(unpermute_rows(&permute(&hf, 3), 3, 1), hf);
        assert_ne!(permute(&hf, 3), hf);
    }
}
