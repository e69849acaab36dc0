//! A tiny random Qwen2/Llama model and a byte-level BPE `tokenizer.json`, written in the real HF
//! formats (`config.json`, `model.safetensors`) so tests exercise the real loading path. The
//! weights are returned too, for independent reference implementations.

use std::collections::BTreeMap;
use std::path::Path;

use safetensors::Dtype;
use safetensors::tensor::TensorView;
use serde_json::{Value, json};

/// What to build.
#[derive(Debug, Clone)]
pub struct TinySpec {
    /// `llama`, `qwen2` or `qwen3` (per-head q/k norms).
    pub model_type: &'static str,
    /// Decoder blocks.
    pub layers: usize,
    /// Residual width.
    pub hidden: usize,
    /// MLP width.
    pub intermediate: usize,
    /// Query heads.
    pub heads: usize,
    /// Key/value heads.
    pub kv_heads: usize,
    /// Tie the LM head to the embedding.
    pub tie: bool,
    /// Store weights as `F32`, `BF16` or `F16` (the returned values are the stored ones).
    pub dtype: Dtype,
    /// Seed of the weights.
    pub seed: u64,
}

impl Default for TinySpec {
    fn default() -> Self {
        Self {
            model_type: "llama",
            layers: 2,
            hidden: 32,
            intermediate: 64,
            heads: 4,
            kv_heads: 2,
            tie: false,
            dtype: Dtype::F32,
            seed: 7,
        }
    }
}

/// The special tokens, ids 0, 1, 2.
pub const SPECIALS: [&str; 3] = ["<|endoftext|>", "<|im_start|>", "<|im_end|>"];
/// Merges of the tiny tokenizer (each merged token gets the next id after the 256 bytes).
pub const MERGES: [(&str, &str); 5] =
    [("Ġ", "t"), ("h", "e"), ("Ġt", "he"), ("i", "n"), ("a", "n")];
/// Vocabulary size of the tiny tokenizer.
pub const VOCAB: usize = SPECIALS.len() + 256 + MERGES.len();
/// `<|im_end|>`, the stop token.
pub const EOS: u32 = 2;

/// A written tiny model: its `config.json` and every tensor (HF name → shape, values).
#[derive(Debug, Clone)]
pub struct TinyModel {
    /// The `config.json` written.
    pub config: Value,
    /// HF tensor name → (shape, row-major values as stored).
    pub tensors: BTreeMap<String, (Vec<usize>, Vec<f32>)>,
}

/// SplitMix64: enough for test weights, no dependency.
struct Mix(u64);

impl Mix {
    fn next(&mut self) -> f64 {
        self.0 = self.0.wrapping_add(0x9E37_79B9_7F4A_7C15);
        let mut z = self.0;
        z = (z ^ (z >> 30)).wrapping_mul(0xBF58_476D_1CE4_E5B9);
        z = (z ^ (z >> 27)).wrapping_mul(0x94D0_49BB_1331_11EB);
        z ^= z >> 31;
        (z >> 11) as f64 / (1u64 << 53) as f64
    }
}

fn round_to(dtype: Dtype, x: f32) -> (f32, Vec<u8>) {
    match dtype {
        Dtype::BF16 => {
            let bits = x.to_bits();
            let rounded = ((bits + 0x7FFF + ((bits >> 16) & 1)) >> 16) as u16;
            (
                f32::from_bits(u32::from(rounded) << 16),
                rounded.to_le_bytes().to_vec(),
            )
        }
        Dtype::F16 => {
            let h = half_from_f32(x);
            (half_to_f32(h), h.to_le_bytes().to_vec())
        }
        _ => (x, x.to_le_bytes().to_vec()),
    }
}

/// f32 → IEEE half, round to nearest even (normal range only: test weights are small).
fn half_from_f32(x: f32) -> u16 {
    let bits = x.to_bits();
    let sign = ((bits >> 16) & 0x8000) as u16;
    let exp = ((bits >> 23) & 0xFF) as i32 - 127 + 15;
    let mant = bits & 0x7F_FFFF;
    if exp <= 0 {
        return sign; // flush tiny values to zero
    }
    let mut h = (u32::from(sign) | ((exp as u32) << 10) | (mant >> 13)) as u16;
    let rest = mant & 0x1FFF;
    if rest > 0x1000 || (rest == 0x1000 && h & 1 == 1) {
        h += 1;
    }
    h
}

fn half_to_f32(h: u16) -> f32 {
    let sign = u32::from(h & 0x8000) << 16;
    let exp = u32::from((h >> 10) & 0x1F);
    let mant = u32::from(h & 0x3FF);
    if exp == 0 {
        return f32::from_bits(sign);
    }
    f32::from_bits(sign | ((exp + 127 - 15) << 23) | (mant << 13))
}

/// Writes `config.json`, `model.safetensors` and `tokenizer.json` into `dir`.
pub fn write_tiny_model(dir: &Path, spec: &TinySpec) -> TinyModel {
    std::fs::create_dir_all(dir).expect("create model dir");
    let head_dim = spec.hidden / spec.heads;
    let (h, i, v) = (spec.hidden, spec.intermediate, VOCAB);
    let (q, kv) = (spec.heads * head_dim, spec.kv_heads * head_dim);
    let mut shapes: Vec<(String, Vec<usize>)> =
        vec![("model.embed_tokens.weight".into(), vec![v, h])];
    for l in 0..spec.layers {
        let p = format!("model.layers.{l}");
        shapes.push((format!("{p}.input_layernorm.weight"), vec![h]));
        shapes.push((format!("{p}.self_attn.q_proj.weight"), vec![q, h]));
        shapes.push((format!("{p}.self_attn.k_proj.weight"), vec![kv, h]));
        shapes.push((format!("{p}.self_attn.v_proj.weight"), vec![kv, h]));
        shapes.push((format!("{p}.self_attn.o_proj.weight"), vec![h, q]));
        if spec.model_type == "qwen2" {
            shapes.push((format!("{p}.self_attn.q_proj.bias"), vec![q]));
            shapes.push((format!("{p}.self_attn.k_proj.bias"), vec![kv]));
            shapes.push((format!("{p}.self_attn.v_proj.bias"), vec![kv]));
        }
        if spec.model_type == "qwen3" {
            shapes.push((format!("{p}.self_attn.q_norm.weight"), vec![head_dim]));
            shapes.push((format!("{p}.self_attn.k_norm.weight"), vec![head_dim]));
        }
        shapes.push((format!("{p}.post_attention_layernorm.weight"), vec![h]));
        shapes.push((format!("{p}.mlp.gate_proj.weight"), vec![i, h]));
        shapes.push((format!("{p}.mlp.up_proj.weight"), vec![i, h]));
        shapes.push((format!("{p}.mlp.down_proj.weight"), vec![h, i]));
    }
    shapes.push(("model.norm.weight".into(), vec![h]));
    if !spec.tie {
        shapes.push(("lm_head.weight".into(), vec![v, h]));
    }
    let mut rng = Mix(spec.seed);
    let mut tensors = BTreeMap::new();
    let mut bytes: BTreeMap<String, Vec<u8>> = BTreeMap::new();
    for (name, shape) in shapes {
        let n: usize = shape.iter().product();
        let fan_in = *shape.last().expect("shape");
        let is_norm = name.ends_with("norm.weight");
        let scale = if name.ends_with(".bias") {
            0.1
        } else {
            1.5 / (fan_in as f64).sqrt()
        };
        let mut values = Vec::with_capacity(n);
        let mut raw = Vec::new();
        for _ in 0..n {
            let u = rng.next() * 2.0 - 1.0;
            let x = if is_norm { 1.0 + 0.2 * u } else { scale * u } as f32;
            let (stored, b) = round_to(spec.dtype, x);
            values.push(stored);
            raw.extend(b);
        }
        bytes.insert(name.clone(), raw);
        tensors.insert(name, (shape, values));
    }
    let views: Vec<(String, TensorView<'_>)> = tensors
        .iter()
        .map(|(name, (shape, _))| {
            let view =
                TensorView::new(spec.dtype, shape.clone(), &bytes[name]).expect("tensor view");
            (name.clone(), view)
        })
        .collect();
    let file = safetensors::serialize(views, None).expect("serialize");
    std::fs::write(dir.join("model.safetensors"), file).expect("write weights");
    let config = json!({
        "architectures": [match spec.model_type {
            "qwen2" => "Qwen2ForCausalLM",
            "qwen3" => "Qwen3ForCausalLM",
            _ => "LlamaForCausalLM",
        }],
        "model_type": spec.model_type,
        "hidden_act": "silu",
        "vocab_size": v,
        "hidden_size": h,
        "intermediate_size": i,
        "num_hidden_layers": spec.layers,
        "num_attention_heads": spec.heads,
        "num_key_value_heads": spec.kv_heads,
        "rms_norm_eps": 1e-5,
        "rope_theta": 10000.0,
        "rope_scaling": null,
        "tie_word_embeddings": spec.tie,
        "max_position_embeddings": 512,
        "bos_token_id": 1,
        "eos_token_id": EOS,
        "torch_dtype": "float32",
    });
    std::fs::write(
        dir.join("config.json"),
        serde_json::to_vec_pretty(&config).expect("json"),
    )
    .expect("write config");
    std::fs::write(
        dir.join("tokenizer.json"),
        serde_json::to_vec_pretty(&tokenizer_json()).expect("json"),
    )
    .expect("write tokenizer");
    TinyModel { config, tensors }
}

/// GPT-2's byte → printable character table used by byte-level BPE.
fn byte_chars() -> Vec<char> {
    let mut printable: Vec<u32> = (u32::from('!')..=u32::from('~')).collect();
    printable.extend(u32::from('¡')..=u32::from('¬'));
    printable.extend(u32::from('®')..=u32::from('ÿ'));
    let mut table = vec!['\0'; 256];
    let mut extra = 0;
    for b in 0..256u32 {
        let c = if printable.contains(&b) {
            b
        } else {
            extra += 1;
            255 + extra
        };
        table[b as usize] = char::from_u32(c).expect("char");
    }
    table
}

/// A byte-level BPE tokenizer: 3 special tokens, the 256 bytes, and a few merges.
pub fn tokenizer_json() -> Value {
    let mut vocab = serde_json::Map::new();
    for (id, s) in SPECIALS.iter().enumerate() {
        vocab.insert((*s).to_owned(), json!(id));
    }
    for (b, c) in byte_chars().into_iter().enumerate() {
        vocab.insert(c.to_string(), json!(SPECIALS.len() + b));
    }
    for (n, (a, b)) in MERGES.iter().enumerate() {
        vocab.insert(format!("{a}{b}"), json!(SPECIALS.len() + 256 + n));
    }
    let added: Vec<Value> = SPECIALS
        .iter()
        .enumerate()
        .map(|(id, s)| {
            json!({"id": id, "content": s, "single_word": false, "lstrip": false, "rstrip": false,
                   "normalized": false, "special": true})
        })
        .collect();
    json!({
        "version": "1.0",
        "truncation": null,
        "padding": null,
        "added_tokens": added,
        "normalizer": null,
        "pre_tokenizer": {"type": "ByteLevel", "add_prefix_space": false, "trim_offsets": true, "use_regex": true},
        "post_processor": null,
        "decoder": {"type": "ByteLevel", "add_prefix_space": true, "trim_offsets": true, "use_regex": true},
        "model": {
            "type": "BPE", "dropout": null, "unk_token": null, "continuing_subword_prefix": null,
            "end_of_word_suffix": null, "fuse_unk": false, "byte_fallback": false, "ignore_merges": false,
            "vocab": vocab,
            "merges": MERGES.iter().map(|(a, b)| format!("{a} {b}")).collect::<Vec<_>>(),
        }
    })
}
