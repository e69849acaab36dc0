//! GGUF v3 files written by tests: a minimal [`Writer`] (metadata of the kinds llama.cpp writes,
//! tensors at 32-byte alignment) and [`tiny_model_gguf`], the tiny model as llama.cpp's
//! converter would write it (F32 tensors under GGUF names, llama's Q/K rows permuted per head,
//! the byte-level BPE vocabulary and merges), so a conversion back can be compared with the
//! folder it came from.

use crate::tiny_model::{EOS, MERGES, SPECIALS, TinyModel, tokenizer_json};

/// A GGUF v3 file under construction.
#[derive(Default)]
pub struct Writer {
    kv: Vec<u8>,
    n_kv: u64,
    infos: Vec<u8>,
    data: Vec<u8>,
    n_tensors: u64,
}

fn string(out: &mut Vec<u8>, s: &str) {
    out.extend((s.len() as u64).to_le_bytes());
    out.extend(s.as_bytes());
}

impl Writer {
    /// A `u32` metadata value.
    pub fn u32(&mut self, key: &str, v: u32) {
        string(&mut self.kv, key);
        self.kv.extend(4u32.to_le_bytes());
        self.kv.extend(v.to_le_bytes());
        self.n_kv += 1;
    }

    /// An `f32` metadata value.
    pub fn f32(&mut self, key: &str, v: f32) {
        string(&mut self.kv, key);
        self.kv.extend(6u32.to_le_bytes());
        self.kv.extend(v.to_le_bytes());
        self.n_kv += 1;
    }

    /// A string metadata value.
    pub fn str(&mut self, key: &str, v: &str) {
        string(&mut self.kv, key);
        self.kv.extend(8u32.to_le_bytes());
        string(&mut self.kv, v);
        self.n_kv += 1;
    }

    /// An array of strings.
    pub fn strs(&mut self, key: &str, items: &[&str]) {
        string(&mut self.kv, key);
        self.kv.extend(9u32.to_le_bytes());
        self.kv.extend(8u32.to_le_bytes());
        self.kv.extend((items.len() as u64).to_le_bytes());
        for s in items {
            string(&mut self.kv, s);
        }
        self.n_kv += 1;
    }

    /// An array of `i32`s.
    pub fn i32s(&mut self, key: &str, items: &[i32]) {
        string(&mut self.kv, key);
        self.kv.extend(9u32.to_le_bytes());
        self.kv.extend(5u32.to_le_bytes());
        self.kv.extend((items.len() as u64).to_le_bytes());
        for v in items {
            self.kv.extend(v.to_le_bytes());
        }
        self.n_kv += 1;
    }

    /// A tensor of `ggml_type` with GGUF's dims (innermost first) and its stored bytes.
    pub fn tensor(&mut self, name: &str, dims: &[u64], ggml_type: u32, bytes: &[u8]) {
        while !self.data.len().is_multiple_of(32) {
            self.data.push(0);
        }
        string(&mut self.infos, name);
        self.infos.extend((dims.len() as u32).to_le_bytes());
        for d in dims {
            self.infos.extend(d.to_le_bytes());
        }
        self.infos.extend(ggml_type.to_le_bytes());
        self.infos.extend((self.data.len() as u64).to_le_bytes());
        self.data.extend(bytes);
        self.n_tensors += 1;
    }

    /// The file's bytes.
    pub fn finish(self) -> Vec<u8> {
        let mut out = b"GGUF".to_vec();
        out.extend(3u32.to_le_bytes());
        out.extend(self.n_tensors.to_le_bytes());
        out.extend(self.n_kv.to_le_bytes());
        out.extend(self.kv);
        out.extend(self.infos);
        while !out.len().is_multiple_of(32) {
            out.push(0);
        }
        out.extend(self.data);
        out
    }
}

/// Little-endian bytes of `values`.
pub fn f32_bytes(values: &[f32]) -> Vec<u8> {
    values.iter().flat_map(|v| v.to_le_bytes()).collect()
}

/// llama.cpp's conversion-time permutation of a Q or K weight (`rows` × `cols`, `heads` heads):
/// GGUF row `h·d + 2i + j` holds HF row `h·d + j·d/2 + i`.
pub fn permute_rows(values: &[f32], heads: usize, cols: usize) -> Vec<f32> {
    let d = values.len() / cols / heads;
    let mut out = vec![0.0; values.len()];
    for h in 0..heads {
        for i in 0..d / 2 {
            for j in 0..2 {
                let (src, dst) = (h * d + j * d / 2 + i, h * d + 2 * i + j);
                out[dst * cols..(dst + 1) * cols]
                    .copy_from_slice(&values[src * cols..(src + 1) * cols]);
            }
        }
    }
    out
}

/// The GGUF name of an HF tensor of a llama or qwen2 model.
fn gguf_name(hf: &str) -> String {
    match hf {
        "model.embed_tokens.weight" => return "token_embd.weight".to_owned(),
        "model.norm.weight" => return "output_norm.weight".to_owned(),
        "lm_head.weight" => return "output.weight".to_owned(),
        _ => {}
    }
    let rest = hf.strip_prefix("model.layers.").expect("a layer tensor");
    let (layer, leaf) = rest.split_once('.').expect("layer.leaf");
    let (module, kind) = leaf.rsplit_once('.').expect("module.kind");
    let gguf = match module {
        "input_layernorm" => "attn_norm",
        "post_attention_layernorm" => "ffn_norm",
        "self_attn.q_proj" => "attn_q",
        "self_attn.k_proj" => "attn_k",
        "self_attn.v_proj" => "attn_v",
        "self_attn.o_proj" => "attn_output",
        "mlp.gate_proj" => "ffn_gate",
        "mlp.up_proj" => "ffn_up",
        "mlp.down_proj" => "ffn_down",
        other => panic!("{other} has no GGUF name here"),
    };
    format!("blk.{layer}.{gguf}.{kind}")
}

/// `model` (a llama or qwen2 [`TinyModel`], f32) as the GGUF llama.cpp's converter writes.
pub fn tiny_model_gguf(model: &TinyModel) -> Vec<u8> {
    let config = &model.config;
    let arch = config["model_type"].as_str().expect("model_type");
    assert!(arch == "llama" || arch == "qwen2", "{arch}: llama or qwen2");
    let int = |k: &str| u32::try_from(config[k].as_u64().expect(k)).expect(k);
    let (heads, kv_heads) = (int("num_attention_heads"), int("num_key_value_heads"));
    let mut w = Writer::default();
    w.str("general.architecture", arch);
    w.u32(&format!("{arch}.block_count"), int("num_hidden_layers"));
    w.u32(&format!("{arch}.embedding_length"), int("hidden_size"));
    w.u32(
        &format!("{arch}.feed_forward_length"),
        int("intermediate_size"),
    );
    w.u32(&format!("{arch}.attention.head_count"), heads);
    w.u32(&format!("{arch}.attention.head_count_kv"), kv_heads);
    w.u32(
        &format!("{arch}.context_length"),
        int("max_position_embeddings"),
    );
    let float = |k: &str| config[k].as_f64().expect(k) as f32;
    w.f32(&format!("{arch}.rope.freq_base"), float("rope_theta"));
    w.f32(
        &format!("{arch}.attention.layer_norm_rms_epsilon"),
        float("rms_norm_eps"),
    );
    let tokenizer = tokenizer_json();
    let vocab = tokenizer["model"]["vocab"].as_object().expect("vocab");
    let mut tokens: Vec<(u64, &str)> = vocab
        .iter()
        .map(|(t, id)| (id.as_u64().expect("id"), t.as_str()))
        .collect();
    tokens.sort_unstable();
    let names: Vec<&str> = tokens.iter().map(|(_, t)| *t).collect();
    let types: Vec<i32> = names
        .iter()
        .map(|t| if SPECIALS.contains(t) { 3 } else { 1 })
        .collect();
    let merges: Vec<String> = MERGES.iter().map(|(a, b)| format!("{a} {b}")).collect();
    let merges: Vec<&str> = merges.iter().map(String::as_str).collect();
    w.str("tokenizer.ggml.model", "gpt2");
    w.strs("tokenizer.ggml.tokens", &names);
    w.strs("tokenizer.ggml.merges", &merges);
    w.i32s("tokenizer.ggml.token_type", &types);
    w.u32("tokenizer.ggml.bos_token_id", int("bos_token_id"));
    w.u32("tokenizer.ggml.eos_token_id", EOS);
    for (name, (shape, values)) in &model.tensors {
        let cols = *shape.last().expect("shape");
        let values = match (arch, name.as_str()) {
            ("llama", n) if n.ends_with("q_proj.weight") => {
                permute_rows(values, heads as usize, cols)
            }
            ("llama", n) if n.ends_with("k_proj.weight") => {
                permute_rows(values, kv_heads as usize, cols)
            }
            _ => values.clone(),
        };
        let dims: Vec<u64> = shape.iter().rev().map(|d| *d as u64).collect();
        w.tensor(&gguf_name(name), &dims, 0, &f32_bytes(&values));
    }
    w.finish()
}
