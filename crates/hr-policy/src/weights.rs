//! Reading HF `model.safetensors` (single file, or shards listed by
//! `model.safetensors.index.json`) into a [`BaseModel`], checking every tensor's name, shape and
//! dtype (f32, f16 or bf16, converted to f32).

use std::collections::{BTreeMap, BTreeSet};
use std::path::{Path, PathBuf};

use burn::module::Param;
use burn::tensor::backend::Backend;
use burn::tensor::{Tensor, TensorData};
use safetensors::{Dtype, SafeTensors};

use crate::model::{Attention, BaseModel, Block, Mlp};
use crate::{ModelConfig, PolicyError};

/// Converts little-endian f32/f16/bf16 bytes to f32; `None` for other dtypes.
pub(crate) fn to_f32(dtype: Dtype, bytes: &[u8]) -> Option<Vec<f32>> {
    Some(match dtype {
        Dtype::F32 => bytes
            .chunks_exact(4)
            .map(|c| f32::from_le_bytes([c[0], c[1], c[2], c[3]]))
            .collect(),
        Dtype::F16 => bytes
            .chunks_exact(2)
            .map(|c| half::f16::from_le_bytes([c[0], c[1]]).to_f32())
            .collect(),
        Dtype::BF16 => bytes
            .chunks_exact(2)
            .map(|c| half::bf16::from_le_bytes([c[0], c[1]]).to_f32())
            .collect(),
        _ => return None,
    })
}

/// Tensors of one or more safetensors files, taken by name; what is never taken is an error.
pub(crate) struct TensorFile {
    origin: PathBuf,
    files: Vec<(PathBuf, Vec<u8>)>,
    /// name → file index
    names: BTreeMap<String, usize>,
    taken: BTreeSet<String>,
}

impl TensorFile {
    /// Reads one safetensors file.
    pub(crate) fn open(path: &Path) -> Result<Self, PolicyError> {
        let mut this = Self {
            origin: path.to_owned(),
            files: Vec::new(),
            names: BTreeMap::new(),
            taken: BTreeSet::new(),
        };
        this.add_file(path)?;
        Ok(this)
    }

    /// Reads the weights of a model folder: `model.safetensors`, or the shards named by
    /// `model.safetensors.index.json`.
    pub(crate) fn open_model_dir(dir: &Path) -> Result<Self, PolicyError> {
        let single = dir.join("model.safetensors");
        if single.is_file() {
            return Self::open(&single);
        }
        let index_path = dir.join("model.safetensors.index.json");
        if !index_path.is_file() {
            return Err(PolicyError::Config {
                path: dir.to_owned(),
                field: "model.safetensors".to_owned(),
                message: "neither model.safetensors nor model.safetensors.index.json is in the model folder"
                    .to_owned(),
            });
        }
        let text =
            std::fs::read_to_string(&index_path).map_err(|e| PolicyError::io(&index_path, e))?;
        let bad = |message: String| PolicyError::Config {
            path: index_path.clone(),
            field: "weight_map".to_owned(),
            message,
        };
        let index: serde_json::Value =
            serde_json::from_str(&text).map_err(|e| bad(format!("not JSON: {e}")))?;
        let map = index
            .get("weight_map")
            .and_then(serde_json::Value::as_object)
            .ok_or_else(|| bad("must be an object of tensor name → shard file".to_owned()))?;
        let mut this = Self {
            origin: dir.to_owned(),
            files: Vec::new(),
            names: BTreeMap::new(),
            taken: BTreeSet::new(),
        };
        if map.values().any(|v| !v.is_string()) {
            return Err(bad("every value must be a shard file name".to_owned()));
        }
        let shards: BTreeSet<&str> = map.values().filter_map(serde_json::Value::as_str).collect();
        for shard in shards {
            if shard.contains('/') || shard.contains('\\') || shard.starts_with('.') {
                return Err(bad(format!(
                    "shard `{shard}` must be a plain file name in the model folder"
                )));
            }
            this.add_file(&dir.join(shard))?;
        }
        for name in map.keys() {
            if !this.names.contains_key(name) {
                return Err(PolicyError::tensor(
                    dir,
                    name,
                    "listed in the index but absent from its shard",
                ));
            }
        }
        Ok(this)
    }

    /// Tensors of one in-memory safetensors file; `path` names it in errors.
    pub(crate) fn from_bytes(path: &Path, bytes: Vec<u8>) -> Result<Self, PolicyError> {
        let mut this = Self {
            origin: path.to_owned(),
            files: Vec::new(),
            names: BTreeMap::new(),
            taken: BTreeSet::new(),
        };
        this.add_bytes(path, bytes)?;
        Ok(this)
    }

    fn add_file(&mut self, path: &Path) -> Result<(), PolicyError> {
        let bytes = std::fs::read(path).map_err(|e| PolicyError::io(path, e))?;
        self.add_bytes(path, bytes)
    }

    fn add_bytes(&mut self, path: &Path, bytes: Vec<u8>) -> Result<(), PolicyError> {
        let parsed = SafeTensors::deserialize(&bytes).map_err(|e| PolicyError::Safetensors {
            path: path.to_owned(),
            message: e.to_string(),
        })?;
        let index = self.files.len();
        for name in parsed.names() {
            if self.names.insert(name.to_owned(), index).is_some() {
                return Err(PolicyError::tensor(
                    path,
                    name,
                    "appears in more than one shard",
                ));
            }
        }
        drop(parsed);
        self.files.push((path.to_owned(), bytes));
        Ok(())
    }

    /// Takes tensor `name` as f32 data, checking its shape.
    pub(crate) fn take(&mut self, name: &str, shape: &[usize]) -> Result<Vec<f32>, PolicyError> {
        let Some(&index) = self.names.get(name) else {
            return Err(PolicyError::tensor(
                &self.origin,
                name,
                format!("missing (expected shape {shape:?})"),
            ));
        };
        let (path, bytes) = &self.files[index];
        let parsed = SafeTensors::deserialize(bytes).map_err(|e| PolicyError::Safetensors {
            path: path.clone(),
            message: e.to_string(),
        })?;
        let view = parsed
            .tensor(name)
            .map_err(|e| PolicyError::tensor(path, name, e.to_string()))?;
        if view.shape() != shape {
            return Err(PolicyError::tensor(
                path,
                name,
                format!(
                    "shape {:?} does not match the config's {shape:?}",
                    view.shape()
                ),
            ));
        }
        let data = to_f32(view.dtype(), view.data()).ok_or_else(|| {
            PolicyError::tensor(
                path,
                name,
                format!(
                    "dtype {:?} is not supported; use f32, f16 or bf16",
                    view.dtype()
                ),
            )
        })?;
        self.taken.insert(name.to_owned());
        Ok(data)
    }

    /// Fails on the first tensor nobody took, unless `ignore` accepts it.
    pub(crate) fn finish(self, ignore: impl Fn(&str) -> bool) -> Result<(), PolicyError> {
        match self
            .names
            .keys()
            .find(|n| !self.taken.contains(*n) && !ignore(n))
        {
            Some(name) => Err(PolicyError::tensor(
                &self.origin,
                name,
                "is not a tensor of this model",
            )),
            None => Ok(()),
        }
    }
}

/// `[rows, cols]` row-major → `[cols, rows]` row-major.
pub(crate) fn transpose(data: &[f32], rows: usize, cols: usize) -> Vec<f32> {
    let mut out = vec![0.0; data.len()];
    for r in 0..rows {
        for c in 0..cols {
            out[c * rows + r] = data[r * cols + c];
        }
    }
    out
}

fn frozen<B: Backend, const D: usize>(
    data: Vec<f32>,
    shape: [usize; D],
    device: &B::Device,
) -> Param<Tensor<B, D>> {
    Param::from_tensor(Tensor::from_data(TensorData::new(data, shape), device))
        .set_require_grad(false)
}

struct Loader<'a, B: Backend> {
    file: TensorFile,
    device: &'a B::Device,
}

impl<B: Backend> Loader<'_, B> {
    /// An HF linear weight `[out, in]`, stored `[in, out]`.
    fn linear(
        &mut self,
        name: &str,
        d_in: usize,
        d_out: usize,
    ) -> Result<Param<Tensor<B, 2>>, PolicyError> {
        let data = self.file.take(name, &[d_out, d_in])?;
        Ok(frozen(
            transpose(&data, d_out, d_in),
            [d_in, d_out],
            self.device,
        ))
    }

    fn vector(&mut self, name: &str, len: usize) -> Result<Param<Tensor<B, 1>>, PolicyError> {
        Ok(frozen(self.file.take(name, &[len])?, [len], self.device))
    }

    /// An optional vector (a bias or a norm weight), read only when the config has it.
    fn optional(
        &mut self,
        present: bool,
        name: &str,
        len: usize,
    ) -> Result<Option<Param<Tensor<B, 1>>>, PolicyError> {
        present.then(|| self.vector(name, len)).transpose()
    }
}

/// Loads the base model's weights from `dir` onto `device`; base parameters never require grad.
pub(crate) fn load_base<B: Backend>(
    dir: &Path,
    config: &ModelConfig,
    device: &B::Device,
) -> Result<BaseModel<B>, PolicyError> {
    let mut l = Loader::<B> {
        file: TensorFile::open_model_dir(dir)?,
        device,
    };
    let (h, inter) = (config.hidden_size, config.intermediate_size);
    let hd = config.head_dim;
    let (q, kv) = (config.num_heads * hd, config.num_kv_heads * hd);
    let embed_data = l
        .file
        .take("model.embed_tokens.weight", &[config.vocab_size, h])?;
    // A tied head gets its own `[hidden, vocab]` copy: multiplying by a transposed view of the
    // embedding costs a full copy of it at every step on the CPU backend.
    let tied_head = config.tie_word_embeddings.then(|| {
        frozen(
            transpose(&embed_data, config.vocab_size, h),
            [h, config.vocab_size],
            device,
        )
    });
    let embed = frozen(embed_data, [config.vocab_size, h], device);
    let mut blocks = Vec::with_capacity(config.num_layers);
    for i in 0..config.num_layers {
        let p = format!("model.layers.{i}");
        blocks.push(Block {
            input_norm: l.vector(&format!("{p}.input_layernorm.weight"), h)?,
            attn: Attention {
                q: l.linear(&format!("{p}.self_attn.q_proj.weight"), h, q)?,
                k: l.linear(&format!("{p}.self_attn.k_proj.weight"), h, kv)?,
                v: l.linear(&format!("{p}.self_attn.v_proj.weight"), h, kv)?,
                o: l.linear(&format!("{p}.self_attn.o_proj.weight"), q, h)?,
                q_bias: l.optional(config.qkv_bias, &format!("{p}.self_attn.q_proj.bias"), q)?,
                k_bias: l.optional(config.qkv_bias, &format!("{p}.self_attn.k_proj.bias"), kv)?,
                v_bias: l.optional(config.qkv_bias, &format!("{p}.self_attn.v_proj.bias"), kv)?,
                o_bias: l.optional(config.o_bias, &format!("{p}.self_attn.o_proj.bias"), h)?,
                q_norm: l.optional(config.qk_norm, &format!("{p}.self_attn.q_norm.weight"), hd)?,
                k_norm: l.optional(config.qk_norm, &format!("{p}.self_attn.k_norm.weight"), hd)?,
            },
            post_norm: l.vector(&format!("{p}.post_attention_layernorm.weight"), h)?,
            mlp: Mlp {
                gate: l.linear(&format!("{p}.mlp.gate_proj.weight"), h, inter)?,
                up: l.linear(&format!("{p}.mlp.up_proj.weight"), h, inter)?,
                down: l.linear(&format!("{p}.mlp.down_proj.weight"), inter, h)?,
            },
        });
    }
    let norm = l.vector("model.norm.weight", h)?;
    let lm_head = match tied_head {
        Some(head) => head,
        None => l.linear("lm_head.weight", h, config.vocab_size)?,
    };
    let tied = config.tie_word_embeddings;
    // Some tied checkpoints still carry `lm_head.weight` (HF ignores it), and old ones carry
    // RoPE's `inv_freq` buffers.
    l.file.finish(|name| {
        (tied && name == "lm_head.weight") || name.ends_with("rotary_emb.inv_freq")
    })?;
    Ok(BaseModel {
        embed,
        blocks,
        norm,
        lm_head,
    })
}
