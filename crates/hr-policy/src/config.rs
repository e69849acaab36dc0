//! The model's shape, read from a Hugging Face `config.json` (the Llama, Mistral, Qwen2, Qwen3,
//! Gemma 2, Gemma 3 and Phi-3 families), in the Hub's spelling (`rope_theta`, `rope_scaling`) or the one
//! `transformers` 5 writes (`rope_parameters`).

use std::path::{Path, PathBuf};

use serde_json::{Map, Value};

use crate::PolicyError;

mod rope;

pub use rope::RopeScaling;

/// Which HF architecture the checkpoint follows; it decides the attention biases, the per-head
/// q/k norms and where a sliding window may apply.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Family {
    /// `model_type: llama` (SmolLM2, TinyLlama, Llama 2/3.x): biases only with `attention_bias`.
    Llama,
    /// `model_type: mistral`: no biases; every layer attends within `sliding_window` when set.
    Mistral,
    /// `model_type: qwen2`: q/k/v projections carry a bias, the output projection does not.
    Qwen2,
    /// `model_type: qwen3`: RMSNorm of each query and key head before RoPE; biases only with
    /// `attention_bias`.
    Qwen3,
    /// `model_type: gemma2`: embeddings scaled by √hidden, RMSNorms of `(1 + w)`, the attention's
    /// and the MLP's outputs normed too, GeGLU (tanh GELU), attention scaled by
    /// `query_pre_attn_scalar`, attention and final logits soft-capped, sliding windows on every
    /// other layer; tied embeddings unless the config says otherwise.
    Gemma2,
    /// `model_type: gemma3_text` (the text-only Gemma 3, e.g. gemma-3-1b): Gemma 2's layout with
    /// Qwen3's per-head q/k norms and no soft-capping by default; five sliding layers in six, which
    /// rotate with their own unscaled RoPE base (`rope_local_base_freq`).
    Gemma3,
    /// `model_type: phi3` (Phi-3-mini, Phi-3-medium): Llama's layout with q/k/v stored as one
    /// `qkv_proj` and gate/up as one `gate_up_proj` (so LoRA adapts those); every layer attends
    /// within `sliding_window` when set; no biases.
    Phi3,
}

impl Family {
    /// The `model_type` values the loader accepts.
    pub const SUPPORTED: &'static str =
        "`llama`, `mistral`, `qwen2`, `qwen3`, `gemma2`, `gemma3_text` or `phi3`";

    /// The `model_type` a checkpoint of this family names.
    pub fn model_type(self) -> &'static str {
        match self {
            Self::Llama => "llama",
            Self::Mistral => "mistral",
            Self::Qwen2 => "qwen2",
            Self::Qwen3 => "qwen3",
            Self::Gemma2 => "gemma2",
            Self::Gemma3 => "gemma3_text",
            Self::Phi3 => "phi3",
        }
    }

    fn from_model_type(name: &str) -> Option<Self> {
        [
            Self::Llama,
            Self::Mistral,
            Self::Qwen2,
            Self::Qwen3,
            Self::Gemma2,
            Self::Gemma3,
            Self::Phi3,
        ]
        .into_iter()
        .find(|f| f.model_type() == name)
    }

    /// Whether this is a Gemma family (the layout and constants the two share).
    pub fn is_gemma(self) -> bool {
        matches!(self, Self::Gemma2 | Self::Gemma3)
    }

    /// Whether the checkpoint stores q/k/v as one `qkv_proj` and gate/up as one `gate_up_proj`
    /// (Phi-3), which are then what LoRA adapts.
    pub fn fused_projections(self) -> bool {
        self == Self::Phi3
    }
}

/// The MLP's gate activation.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Activation {
    /// `silu` (SwiGLU).
    Silu,
    /// `gelu_pytorch_tanh`, GELU's tanh approximation (GeGLU, Gemma).
    GeluTanh,
}

/// The shape and constants of a decoder-only causal LM of a supported family.
#[derive(Debug, Clone, PartialEq)]
pub struct ModelConfig {
    /// The architecture family.
    pub family: Family,
    /// Vocabulary size (rows of the embedding).
    pub vocab_size: usize,
    /// Width of the residual stream.
    pub hidden_size: usize,
    /// Width of the SwiGLU MLP.
    pub intermediate_size: usize,
    /// Number of decoder blocks.
    pub num_layers: usize,
    /// Number of query heads.
    pub num_heads: usize,
    /// Number of key/value heads (grouped-query attention when fewer than `num_heads`).
    pub num_kv_heads: usize,
    /// Width of one head.
    pub head_dim: usize,
    /// RMSNorm epsilon.
    pub rms_norm_eps: f64,
    /// RoPE base frequency.
    pub rope_theta: f64,
    /// RoPE frequency scaling.
    pub rope_scaling: RopeScaling,
    /// The RoPE base of the sliding-window layers, unscaled, where it is not `rope_theta` (Gemma
    /// 3's `rope_local_base_freq`); the full-attention layers use `rope_theta` and `rope_scaling`.
    pub sliding_rope_theta: Option<f64>,
    /// The MLP's gate activation.
    pub activation: Activation,
    /// What the attention scores `q·k` are multiplied by: `1/√head_dim`, or Gemma's
    /// `query_pre_attn_scalar^-½`.
    pub attn_scale: f64,
    /// Gemma 2's `attn_logit_softcapping`: scores become `c·tanh(s/c)` before the mask.
    pub attn_softcap: Option<f64>,
    /// Gemma 2's `final_logit_softcapping`: logits become `c·tanh(l/c)`.
    pub final_softcap: Option<f64>,
    /// Gemma's embedding scale, `√hidden_size`.
    pub embed_scale: Option<f64>,
    /// Whether RMSNorm weights are stored as offsets from 1 (Gemma's `x̂·(1 + w)`); the loader
    /// adds the 1 once, in f32, as Gemma's norm does at every use.
    pub norm_offset: bool,
    /// Whether the attention's and the MLP's outputs are RMS-normed before the residual sum
    /// (Gemma's `post_attention_layernorm` and `post_feedforward_layernorm`; its
    /// `pre_feedforward_layernorm` is the norm before the MLP).
    pub sandwich_norms: bool,
    /// Whether each query and key head is RMS-normalised before RoPE (Qwen3's `q_norm`/`k_norm`).
    pub qk_norm: bool,
    /// Per decoder block: the sliding attention window (a query sees the `w` latest positions,
    /// itself included), or `None` for full causal attention.
    pub sliding_windows: Vec<Option<usize>>,
    /// Whether the LM head reuses the embedding matrix.
    pub tie_word_embeddings: bool,
    /// Whether the q/k/v projections carry a bias.
    pub qkv_bias: bool,
    /// Whether the output projection carries a bias (Llama `attention_bias`).
    pub o_bias: bool,
    /// Longest sequence the model was trained for.
    pub max_position_embeddings: usize,
    /// Beginning-of-sequence token, if any.
    pub bos_token_id: Option<u32>,
    /// Tokens that end a completion.
    pub eos_token_ids: Vec<u32>,
}

impl ModelConfig {
    /// Reads and checks `config.json`; the `eos_token_id`s of a `generation_config.json` beside
    /// it (where chat models name their end-of-turn token) end completions too.
    pub fn from_file(path: &Path) -> Result<Self, PolicyError> {
        let text = hr_files::read_to_string_bounded(path, hr_files::MAX_CONFIG_BYTES)
            .map_err(|e| PolicyError::io(path, e))?;
        let mut config = Self::from_json(path, &text)?;
        let generation = path.with_file_name("generation_config.json");
        match hr_files::read_to_string_bounded(&generation, hr_files::MAX_CONFIG_BYTES) {
            Ok(text) => {
                let value: Value =
                    serde_json::from_str(&text).map_err(|e| PolicyError::Config {
                        path: generation.clone(),
                        field: "(file)".to_owned(),
                        message: format!("not JSON: {e}"),
                    })?;
                let mut more = Self::eos_ids(&generation, value.get("eos_token_id"))?;
                more.retain(|id| !config.eos_token_ids.contains(id));
                config.eos_token_ids.extend(more);
                config.check_eos(&generation)?;
            }
            Err(e) if e.kind() == std::io::ErrorKind::NotFound => {}
            Err(e) => return Err(PolicyError::io(&generation, e)),
        }
        Ok(config)
    }

    /// A config file's `eos_token_id` (one id or a list); `path` names the file in errors.
    fn eos_ids(path: &Path, field: Option<&Value>) -> Result<Vec<u32>, PolicyError> {
        let err = |message: String| PolicyError::Config {
            path: PathBuf::from(path),
            field: "eos_token_id".to_owned(),
            message,
        };
        let id = |v: &Value| v.as_u64().and_then(|n| u32::try_from(n).ok());
        match field {
            None | Some(Value::Null) => Some(Vec::new()),
            Some(Value::Array(items)) => items.iter().map(id).collect::<Option<Vec<_>>>(),
            Some(v) => id(v).map(|n| vec![n]),
        }
        .ok_or_else(|| err("must be a token id or a list of ids".to_owned()))
    }

    fn check_eos(&self, path: &Path) -> Result<(), PolicyError> {
        match self
            .eos_token_ids
            .iter()
            .find(|id| **id as usize >= self.vocab_size)
        {
            Some(id) => Err(PolicyError::Config {
                path: PathBuf::from(path),
                field: "eos_token_id".to_owned(),
                message: format!("{id} is outside the vocabulary ({})", self.vocab_size),
            }),
            None => Ok(()),
        }
    }

    /// Parses and checks the text of a `config.json`; `path` only names the file in errors.
    pub fn from_json(path: &Path, text: &str) -> Result<Self, PolicyError> {
        let err = |field: &str, message: String| PolicyError::Config {
            path: PathBuf::from(path),
            field: field.to_owned(),
            message,
        };
        let value: Value =
            serde_json::from_str(text).map_err(|e| err("(file)", format!("not JSON: {e}")))?;
        let Value::Object(map) = value else {
            return Err(err("(file)", "must be a JSON object".to_owned()));
        };
        let reader = Reader {
            map: &map,
            err: &err,
        };
        let model_type = reader.str("model_type")?;
        let family = Family::from_model_type(&model_type).ok_or_else(|| {
            err(
                "model_type",
                format!(
                    "`{model_type}` is not supported; use a {} checkpoint",
                    Family::SUPPORTED
                ),
            )
        })?;
        let activation = activation(family, &map, &err)?;
        if map.get("mlp_bias").is_some_and(|v| v == &Value::Bool(true)) {
            return Err(err(
                "mlp_bias",
                "MLP biases are not supported; it must be false".to_owned(),
            ));
        }
        if family.is_gemma() && reader.opt_bool("use_bidirectional_attention")? == Some(true) {
            return Err(err(
                "use_bidirectional_attention",
                "bidirectional attention (EmbeddingGemma) is not a causal LM; it must be false"
                    .to_owned(),
            ));
        }
        let rope = rope::read(family, &map, &err)?;
        let hidden_size = reader.usize("hidden_size")?;
        let num_heads = reader.usize("num_attention_heads")?;
        // Gemma's configuration classes default to 4 key/value heads of width 256, the others to
        // one per query head of width hidden / heads.
        let gemma = family.is_gemma();
        let num_kv_heads = reader
            .opt_usize("num_key_value_heads")?
            .unwrap_or(if gemma { 4 } else { num_heads });
        let head_dim = match reader.opt_usize("head_dim")? {
            Some(d) => d,
            None if gemma => 256,
            None if hidden_size % num_heads == 0 => hidden_size / num_heads,
            None => {
                return Err(err(
                    "hidden_size",
                    format!(
                        "{hidden_size} is not a multiple of num_attention_heads {num_heads}; set head_dim"
                    ),
                ));
            }
        };
        if num_heads % num_kv_heads != 0 {
            return Err(err(
                "num_key_value_heads",
                format!("{num_kv_heads} must divide num_attention_heads {num_heads}"),
            ));
        }
        if head_dim % 2 != 0 {
            return Err(err("head_dim", format!("{head_dim} must be even for RoPE")));
        }
        let attention_bias = reader.opt_bool("attention_bias")?.unwrap_or(false);
        let (qkv_bias, o_bias) = match family {
            Family::Mistral | Family::Phi3 => (false, false),
            Family::Qwen2 => (true, false),
            _ => (attention_bias, attention_bias),
        };
        let num_layers = reader.usize("num_hidden_layers")?;
        let eos_token_ids = Self::eos_ids(path, map.get("eos_token_id"))?;
        let config = Self {
            family,
            vocab_size: reader.usize("vocab_size")?,
            hidden_size,
            intermediate_size: reader.usize("intermediate_size")?,
            num_layers,
            num_heads,
            num_kv_heads,
            head_dim,
            // transformers' defaults where a config omits it.
            rms_norm_eps: reader.opt_f64("rms_norm_eps")?.unwrap_or(match family {
                Family::Phi3 => 1e-5,
                _ => 1e-6,
            }),
            rope_theta: rope.theta,
            rope_scaling: rope.scaling,
            sliding_rope_theta: rope.sliding_theta,
            activation,
            attn_scale: if gemma {
                // transformers' default `query_pre_attn_scalar` for both.
                reader
                    .opt_f64("query_pre_attn_scalar")?
                    .unwrap_or(256.0)
                    .powf(-0.5)
            } else {
                1.0 / (head_dim as f64).sqrt()
            },
            // Gemma 3's attention reads no `attn_logit_softcapping` in transformers, whatever
            // its config says.
            attn_softcap: match family {
                Family::Gemma3 => None,
                _ => reader.softcap("attn_logit_softcapping", family, 50.0)?,
            },
            final_softcap: reader.softcap("final_logit_softcapping", family, 30.0)?,
            embed_scale: gemma.then(|| (hidden_size as f64).sqrt()),
            norm_offset: gemma,
            sandwich_norms: gemma,
            qk_norm: matches!(family, Family::Qwen3 | Family::Gemma3),
            sliding_windows: sliding_windows(family, num_layers, &reader)?,
            tie_word_embeddings: reader.opt_bool("tie_word_embeddings")?.unwrap_or(gemma),
            qkv_bias,
            o_bias,
            // transformers' defaults where a config omits it.
            max_position_embeddings: reader.opt_usize("max_position_embeddings")?.unwrap_or(
                match family {
                    Family::Gemma2 => 8192,
                    Family::Gemma3 => 131_072,
                    _ => 4096,
                },
            ),
            bos_token_id: match map.get("bos_token_id") {
                None | Some(Value::Null) => None,
                Some(v) => Some(v.as_u64().and_then(|n| u32::try_from(n).ok()).ok_or_else(
                    || err("bos_token_id", format!("must be a token id, found {v}")),
                )?),
            },
            eos_token_ids,
        };
        config.check_eos(path)?;
        Ok(config)
    }

    /// Block `layer`'s RoPE inverse frequencies, one per pair of head dimensions, with the
    /// scaling applied (as `transformers`' `ROPE_INIT_FUNCTIONS` compute them, in f64).
    pub fn rope_inv_freq(&self, layer: usize) -> Vec<f64> {
        let hd = self.head_dim;
        let sliding = self.sliding_windows.get(layer).copied().flatten().is_some();
        let (theta, scaling) = match self.sliding_rope_theta {
            Some(theta) if sliding => (theta, RopeScaling::None),
            _ => (self.rope_theta, self.rope_scaling),
        };
        let base = (0..hd / 2).map(|i| theta.powf(-((2 * i) as f64) / hd as f64));
        match scaling {
            RopeScaling::None => base.collect(),
            RopeScaling::Linear { factor } => base.map(|f| f / factor).collect(),
            RopeScaling::Llama3 {
                factor,
                low_freq_factor,
                high_freq_factor,
                original_max_position_embeddings: old,
            } => {
                let low_freq_wavelen = old / low_freq_factor;
                let high_freq_wavelen = old / high_freq_factor;
                base.map(|f| {
                    let wavelen = 2.0 * std::f64::consts::PI / f;
                    if wavelen < high_freq_wavelen {
                        f
                    } else if wavelen > low_freq_wavelen {
                        f / factor
                    } else {
                        let smooth = (old / wavelen - low_freq_factor)
                            / (high_freq_factor - low_freq_factor);
                        (1.0 - smooth) * f / factor + smooth * f
                    }
                })
                .collect()
            }
        }
    }

    /// How many query heads share one key/value head.
    pub fn kv_groups(&self) -> usize {
        self.num_heads / self.num_kv_heads
    }
}

/// The MLP's activation: `hidden_act` must be `silu`, except in Gemma, which reads only
/// `hidden_activation` and must be `gelu_pytorch_tanh` (its default).
fn activation<F: Fn(&str, String) -> PolicyError>(
    family: Family,
    map: &Map<String, Value>,
    err: &F,
) -> Result<Activation, PolicyError> {
    // transformers' Gemma classes read `hidden_activation` only (a `hidden_act` beside it is
    // ignored).
    let (field, wanted, activation) = if family.is_gemma() {
        (
            "hidden_activation",
            "gelu_pytorch_tanh",
            Activation::GeluTanh,
        )
    } else {
        ("hidden_act", "silu", Activation::Silu)
    };
    match map.get(field) {
        None | Some(Value::Null) => Ok(activation),
        Some(Value::String(s)) if s == wanted => Ok(activation),
        Some(other) => Err(err(
            field,
            format!("{other} is not supported for this family; only `{wanted}`"),
        )),
    }
}

/// Each block's sliding window, as `transformers` decides it: `layer_types` where the config
/// lists them, else every Mistral layer, the Qwen layers from `max_window_layers` on, every
/// other Gemma 2 layer (the first included) and all but every `sliding_window_pattern`-th Gemma 3
/// layer; every Phi-3 layer. Qwen applies `sliding_window` only with `use_sliding_window`; Llama
/// never.
fn sliding_windows<F: Fn(&str, String) -> PolicyError>(
    family: Family,
    num_layers: usize,
    reader: &Reader<'_, F>,
) -> Result<Vec<Option<usize>>, PolicyError> {
    let window = match family {
        Family::Llama => None,
        Family::Mistral | Family::Phi3 => reader.opt_usize("sliding_window")?,
        Family::Qwen2 | Family::Qwen3 => match reader.opt_bool("use_sliding_window")? {
            Some(true) => Some(reader.usize("sliding_window")?),
            _ => None,
        },
        // transformers' default window for both; null it refuses.
        Family::Gemma2 | Family::Gemma3 => match reader.map.get("sliding_window") {
            Some(Value::Null) => {
                return Err((reader.err)(
                    "sliding_window",
                    "must be a window size: Gemma's window layers need one (transformers' \
                     default is 4096)"
                        .to_owned(),
                ));
            }
            _ => Some(reader.opt_usize("sliding_window")?.unwrap_or(4096)),
        },
    };
    match reader.map.get("layer_types").filter(|v| !v.is_null()) {
        Some(Value::Array(types)) if types.len() == num_layers => types
            .iter()
            .map(|t| match t.as_str() {
                Some("full_attention") => Ok(None),
                Some("sliding_attention") => Ok(window),
                _ => Err((reader.err)(
                    "layer_types",
                    format!("{t} is not `full_attention` or `sliding_attention`"),
                )),
            })
            .collect(),
        Some(_) => Err((reader.err)(
            "layer_types",
            format!(
                "must list `full_attention` or `sliding_attention` for each of the {num_layers} layers"
            ),
        )),
        None => {
            // Windowed from layer `from` on, except every `full_every`-th layer.
            let (from, full_every) = match family {
                Family::Qwen2 | Family::Qwen3 => (
                    reader.opt_usize("max_window_layers")?.unwrap_or(num_layers),
                    None,
                ),
                Family::Llama | Family::Mistral | Family::Phi3 => (0, None),
                Family::Gemma2 => (0, Some(2)),
                Family::Gemma3 => (
                    0,
                    Some(reader.opt_usize("sliding_window_pattern")?.unwrap_or(6)),
                ),
            };
            Ok((0..num_layers)
                .map(|i| {
                    window.filter(|_| i >= from && full_every.is_none_or(|n| (i + 1) % n != 0))
                })
                .collect())
        }
    }
}

/// The largest value a size in `config.json` may take: several times the largest published
/// model's (Llama 3.1 405B: 126 layers, width 16384, MLP 53248; Gemma 3: a 262144-token
/// vocabulary), so that no size is trusted to allocate before the weights confirm it.
fn largest(field: &str) -> usize {
    match field {
        "num_hidden_layers" | "num_attention_heads" | "num_key_value_heads" | "head_dim" => 1024,
        "hidden_size" => 1 << 16,
        "intermediate_size" => 1 << 20,
        "vocab_size" => 1 << 22,
        // Longest context in positions (RoPE tables and masks are sized by what is used).
        "max_position_embeddings" | "sliding_window" => 1 << 24,
        "sliding_window_pattern" => 1 << 16,
        // A layer index from which windows apply; configs may name one past the last layer.
        "max_window_layers" => 1 << 16,
        _ => usize::MAX,
    }
}

struct Reader<'a, F> {
    map: &'a Map<String, Value>,
    err: &'a F,
}

impl<F: Fn(&str, String) -> PolicyError> Reader<'_, F> {
    fn str(&self, field: &str) -> Result<String, PolicyError> {
        match self.map.get(field) {
            Some(Value::String(s)) => Ok(s.clone()),
            Some(other) => Err((self.err)(
                field,
                format!("must be a string, found {other}"),
            )),
            None => Err((self.err)(field, "is missing".to_owned())),
        }
    }

    fn usize(&self, field: &str) -> Result<usize, PolicyError> {
        self.opt_usize(field)?
            .ok_or_else(|| (self.err)(field, "is missing".to_owned()))
    }

    fn opt_usize(&self, field: &str) -> Result<Option<usize>, PolicyError> {
        match self.map.get(field) {
            None | Some(Value::Null) => Ok(None),
            Some(v) => match v.as_u64().and_then(|n| usize::try_from(n).ok()) {
                Some(0) => Err((self.err)(field, "must be at least 1".to_owned())),
                Some(n) if n > largest(field) => Err((self.err)(
                    field,
                    format!(
                        "{n} is above the largest supported value, {}; is this config.json \
                         the model's own?",
                        largest(field)
                    ),
                )),
                Some(n) => Ok(Some(n)),
                None => Err((self.err)(
                    field,
                    format!("must be a positive integer, found {v}"),
                )),
            },
        }
    }

    fn opt_f64(&self, field: &str) -> Result<Option<f64>, PolicyError> {
        match self.map.get(field) {
            None | Some(Value::Null) => Ok(None),
            Some(v) => match v.as_f64() {
                Some(x) if x.is_finite() && x > 0.0 => Ok(Some(x)),
                _ => Err((self.err)(
                    field,
                    format!("must be a positive number, found {v}"),
                )),
            },
        }
    }

    /// A soft-capping constant: the family's default (Gemma 2's) when absent, none when null.
    fn softcap(
        &self,
        field: &str,
        family: Family,
        gemma2_default: f64,
    ) -> Result<Option<f64>, PolicyError> {
        match self.map.get(field) {
            None if family == Family::Gemma2 => Ok(Some(gemma2_default)),
            _ if !family.is_gemma() => Ok(None),
            _ => self.opt_f64(field),
        }
    }

    fn opt_bool(&self, field: &str) -> Result<Option<bool>, PolicyError> {
        match self.map.get(field) {
            None | Some(Value::Null) => Ok(None),
            Some(Value::Bool(b)) => Ok(Some(*b)),
            Some(v) => Err((self.err)(
                field,
                format!("must be true or false, found {v}"),
            )),
        }
    }
}
