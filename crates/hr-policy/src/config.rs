//! The model's shape, read from a Hugging Face `config.json` (Llama and Qwen2 families).

use std::path::{Path, PathBuf};

use serde_json::{Map, Value};

use crate::PolicyError;

/// Which HF architecture the checkpoint follows; it decides the attention biases.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Family {
    /// `model_type: llama` (SmolLM2, TinyLlama, Llama 2/3): biases only with `attention_bias`.
    Llama,
    /// `model_type: qwen2`: q/k/v projections carry a bias, the output projection does not.
    Qwen2,
}

/// The shape and constants of a decoder-only Qwen2/Llama causal LM.
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
        let text = std::fs::read_to_string(path).map_err(|e| PolicyError::io(path, e))?;
        let mut config = Self::from_json(path, &text)?;
        let generation = path.with_file_name("generation_config.json");
        match std::fs::read_to_string(&generation) {
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
        let family = match reader.str("model_type")?.as_str() {
            "llama" => Family::Llama,
            "qwen2" => Family::Qwen2,
            other => {
                return Err(err(
                    "model_type",
                    format!("`{other}` is not supported; use a `llama` or `qwen2` checkpoint"),
                ));
            }
        };
        if let Some(act) = map.get("hidden_act")
            && act != "silu"
        {
            return Err(err(
                "hidden_act",
                format!("{act} is not supported; only `silu` (SwiGLU)"),
            ));
        }
        if map.get("rope_scaling").is_some_and(|v| !v.is_null()) {
            return Err(err(
                "rope_scaling",
                "RoPE scaling is not supported; it must be null".to_owned(),
            ));
        }
        // transformers 5 writes RoPE settings as `rope_parameters: {rope_type, rope_theta}`.
        let rope_parameters = map.get("rope_parameters").filter(|v| !v.is_null());
        let rope_theta_v5 = match rope_parameters {
            None => None,
            Some(Value::Object(p)) => {
                match p.get("rope_type").and_then(Value::as_str) {
                    None | Some("default") => {}
                    Some(other) => {
                        return Err(err(
                            "rope_parameters.rope_type",
                            format!("`{other}` is not supported; only `default` RoPE"),
                        ));
                    }
                }
                match p.get("rope_theta") {
                    None => None,
                    Some(v) => Some(v.as_f64().filter(|t| *t > 0.0).ok_or_else(|| {
                        err(
                            "rope_parameters.rope_theta",
                            "must be a positive number".to_owned(),
                        )
                    })?),
                }
            }
            Some(_) => {
                return Err(err(
                    "rope_parameters",
                    "must be an object like {\"rope_type\": \"default\", \"rope_theta\": 10000.0}"
                        .to_owned(),
                ));
            }
        };
        if map.get("mlp_bias").is_some_and(|v| v == &Value::Bool(true)) {
            return Err(err(
                "mlp_bias",
                "MLP biases are not supported; it must be false".to_owned(),
            ));
        }
        let hidden_size = reader.usize("hidden_size")?;
        let num_heads = reader.usize("num_attention_heads")?;
        let num_kv_heads = reader
            .opt_usize("num_key_value_heads")?
            .unwrap_or(num_heads);
        let head_dim = match reader.opt_usize("head_dim")? {
            Some(d) => d,
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
            Family::Llama => (attention_bias, attention_bias),
            Family::Qwen2 => (true, false),
        };
        let eos_token_ids = Self::eos_ids(path, map.get("eos_token_id"))?;
        let config = Self {
            family,
            vocab_size: reader.usize("vocab_size")?,
            hidden_size,
            intermediate_size: reader.usize("intermediate_size")?,
            num_layers: reader.usize("num_hidden_layers")?,
            num_heads,
            num_kv_heads,
            head_dim,
            rms_norm_eps: reader.opt_f64("rms_norm_eps")?.unwrap_or(1e-6),
            rope_theta: match rope_theta_v5 {
                Some(t) => t,
                None => reader.opt_f64("rope_theta")?.unwrap_or(10_000.0),
            },
            tie_word_embeddings: reader.opt_bool("tie_word_embeddings")?.unwrap_or(false),
            qkv_bias,
            o_bias,
            max_position_embeddings: reader.opt_usize("max_position_embeddings")?.unwrap_or(4096),
            bos_token_id: reader
                .opt_usize("bos_token_id")?
                .map(|n| u32::try_from(n).map_err(|_| err("bos_token_id", "too large".to_owned())))
                .transpose()?,
            eos_token_ids,
        };
        config.check_eos(path)?;
        Ok(config)
    }

    /// How many query heads share one key/value head.
    pub fn kv_groups(&self) -> usize {
        self.num_heads / self.num_kv_heads
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
