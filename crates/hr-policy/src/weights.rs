//! Reading HF `model.safetensors` (single file, or shards listed by
//! `model.safetensors.index.json`) into a [`BaseModel`], checking every tensor's name, shape and
//! dtype (f32, f16 or bf16 on file). The weight matrices (embedding, projections, LM head) are
//! held in the dtype asked for; norm weights and biases, a few thousand numbers, stay f32. Files
//! are read tensor by tensor, so loading needs little more memory than the loaded weights.

use std::collections::{BTreeMap, BTreeSet};
use std::io::{Read, Seek, SeekFrom};
use std::path::{Path, PathBuf};

use burn::module::Param;
use burn::tensor::backend::Backend;
use burn::tensor::{FloatDType, Tensor, TensorData};
use safetensors::tensor::{Metadata, TensorInfo};
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

/// Where a safetensors file's bytes are: an open file (read one tensor at a time) or memory.
enum Source {
    File(std::fs::File),
    Bytes(Vec<u8>),
}

/// One safetensors file: its validated header and where its tensor data starts.
struct Shard {
    path: PathBuf,
    source: Source,
    /// Offset of the data section (after the 8-byte length and the JSON header).
    data_start: u64,
    metadata: Metadata,
}

impl Shard {
    /// The raw bytes of tensor `info`, read from the file at its offset (nothing else is read).
    fn bytes(&self, info: &TensorInfo) -> Result<Vec<u8>, PolicyError> {
        let (start, end) = info.data_offsets;
        match &self.source {
            Source::Bytes(bytes) => {
                let at = self.data_start as usize;
                Ok(bytes[at + start..at + end].to_vec())
            }
            Source::File(file) => {
                let mut buffer = vec![0; end - start];
                let mut reader = file;
                reader
                    .seek(SeekFrom::Start(self.data_start + start as u64))
                    .and_then(|_| reader.read_exact(&mut buffer))
                    .map_err(|e| PolicyError::io(&self.path, e))?;
                Ok(buffer)
            }
        }
    }
}

/// Tensors of one or more safetensors files, taken by name; what is never taken is an error.
/// Only the headers are read up front; each tensor's bytes are read when it is taken, so loading
/// holds one tensor's raw bytes at a time beside the converted weights.
pub(crate) struct TensorFile {
    origin: PathBuf,
    shards: Vec<Shard>,
    /// name → shard index
    names: BTreeMap<String, usize>,
    taken: BTreeSet<String>,
}

impl TensorFile {
    fn empty(origin: &Path) -> Self {
        Self {
            origin: origin.to_owned(),
            shards: Vec::new(),
            names: BTreeMap::new(),
            taken: BTreeSet::new(),
        }
    }

    /// Opens one safetensors file.
    pub(crate) fn open(path: &Path) -> Result<Self, PolicyError> {
        let mut this = Self::empty(path);
        this.add_file(path)?;
        Ok(this)
    }

    /// Opens the weights of a model folder: `model.safetensors`, or the shards named by
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
        let text = hr_files::read_to_string_bounded(&index_path, hr_files::MAX_CONFIG_BYTES)
            .map_err(|e| PolicyError::io(&index_path, e))?;
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
        let mut this = Self::empty(dir);
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
        let mut this = Self::empty(path);
        let (n, metadata) =
            SafeTensors::read_metadata(&bytes).map_err(|e| PolicyError::Safetensors {
                path: path.to_owned(),
                message: e.to_string(),
            })?;
        this.add_shard(Shard {
            path: path.to_owned(),
            data_start: (HEADER_LENGTH + n) as u64,
            metadata,
            source: Source::Bytes(bytes),
        })?;
        Ok(this)
    }

    /// Reads and validates a file's header as `safetensors` does for a whole buffer: offsets
    /// contiguous, sizes matching shapes and dtypes, data ending where the file ends.
    fn add_file(&mut self, path: &Path) -> Result<(), PolicyError> {
        let invalid = |message: String| PolicyError::Safetensors {
            path: path.to_owned(),
            message,
        };
        let mut file = hr_files::open_regular(path).map_err(|e| PolicyError::io(path, e))?;
        let file_len = file.metadata().map_err(|e| PolicyError::io(path, e))?.len();
        let mut length = [0u8; HEADER_LENGTH];
        file.read_exact(&mut length)
            .map_err(|_| invalid("the header is too small".to_owned()))?;
        let n = u64::from_le_bytes(length);
        if n > MAX_HEADER || HEADER_LENGTH as u64 + n > file_len {
            return Err(invalid(format!(
                "the header length {n} does not fit the file"
            )));
        }
        let mut header = vec![0u8; n as usize];
        file.read_exact(&mut header)
            .map_err(|e| PolicyError::io(path, e))?;
        let metadata: Metadata =
            serde_json::from_slice(&header).map_err(|e| invalid(format!("invalid header: {e}")))?;
        let data_start = HEADER_LENGTH as u64 + n;
        if data_start + metadata.data_len() as u64 != file_len {
            return Err(invalid(format!(
                "the header describes {} bytes of data but the file holds {}",
                metadata.data_len(),
                file_len - data_start
            )));
        }
        self.add_shard(Shard {
            path: path.to_owned(),
            source: Source::File(file),
            data_start,
            metadata,
        })
    }

    fn add_shard(&mut self, shard: Shard) -> Result<(), PolicyError> {
        let index = self.shards.len();
        for name in shard.metadata.tensors().keys() {
            if self.names.insert(name.clone(), index).is_some() {
                return Err(PolicyError::tensor(
                    &shard.path,
                    name,
                    "appears in more than one shard",
                ));
            }
        }
        self.shards.push(shard);
        Ok(())
    }

    /// How many decoder layers the file holds: one more than the largest `N` of a
    /// `model.layers.N.` tensor (0 without any).
    pub(crate) fn layer_count(&self) -> usize {
        self.names
            .keys()
            .filter_map(|n| {
                n.strip_prefix("model.layers.")?
                    .split('.')
                    .next()?
                    .parse()
                    .ok()
            })
            .max()
            .map_or(0, |last: usize| last.saturating_add(1))
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
        let shard = &self.shards[index];
        let info = shard
            .metadata
            .info(name)
            .ok_or_else(|| PolicyError::tensor(&shard.path, name, "absent from the header"))?;
        if info.shape != shape {
            return Err(PolicyError::tensor(
                &shard.path,
                name,
                format!(
                    "shape {:?} does not match the config's {shape:?}",
                    info.shape
                ),
            ));
        }
        let unsupported = || {
            PolicyError::tensor(
                &shard.path,
                name,
                format!(
                    "dtype {:?} is not supported; use f32, f16 or bf16",
                    info.dtype
                ),
            )
        };
        if !matches!(info.dtype, Dtype::F32 | Dtype::F16 | Dtype::BF16) {
            return Err(unsupported());
        }
        let bytes = shard.bytes(info)?;
        let data = to_f32(info.dtype, &bytes).ok_or_else(unsupported)?;
        self.taken.insert(name.to_owned());
        Ok(data)
    }

    /// [`TensorFile::take`], refusing a tensor that holds a NaN or an infinity (an adapter
    /// trained into divergence elsewhere would silently poison every output).
    pub(crate) fn take_finite(
        &mut self,
        name: &str,
        shape: &[usize],
    ) -> Result<Vec<f32>, PolicyError> {
        let data = self.take(name, shape)?;
        match data.iter().position(|x| !x.is_finite()) {
            Some(i) => Err(PolicyError::tensor(
                &self.origin,
                name,
                format!(
                    "holds {} at index {i}: it diverged; use a checkpoint from before",
                    data[i]
                ),
            )),
            None => Ok(data),
        }
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

/// The little-endian u64 before a safetensors header.
const HEADER_LENGTH: usize = 8;
/// The largest header `safetensors` accepts (100 MB).
const MAX_HEADER: u64 = 100_000_000;

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

/// A parameter that never trains, held on `device` in `dtype`.
fn frozen<B: Backend, const D: usize>(
    data: Vec<f32>,
    shape: [usize; D],
    dtype: FloatDType,
    device: &B::Device,
) -> Param<Tensor<B, D>> {
    let data = TensorData::new(data, shape);
    Param::from_tensor(Tensor::from_data(data, (device, dtype.into()))).set_require_grad(false)
}

struct Loader<'a, B: Backend> {
    file: TensorFile,
    /// The dtype of the weight matrices.
    dtype: FloatDType,
    /// Whether norm weights are stored as offsets from 1 ([`ModelConfig::norm_offset`]).
    norm_offset: bool,
    device: &'a B::Device,
}

impl<B: Backend> Loader<'_, B> {
    /// An HF linear weight, kept as HF stores it: `[out, in]`.
    fn linear(
        &mut self,
        name: &str,
        d_in: usize,
        d_out: usize,
    ) -> Result<Param<Tensor<B, 2>>, PolicyError> {
        let data = self.file.take(name, &[d_out, d_in])?;
        Ok(frozen(data, [d_out, d_in], self.dtype, self.device))
    }

    /// An HF linear weight stored as `N` matrices stacked by rows (Phi-3's `qkv_proj`,
    /// `gate_up_proj`): the stack `[Σ out, in]` is read whole and cut into `[out_i, in]` pieces.
    fn linear_rows<const N: usize>(
        &mut self,
        name: &str,
        d_in: usize,
        d_outs: [usize; N],
    ) -> Result<[Param<Tensor<B, 2>>; N], PolicyError> {
        let data = self.file.take(name, &[d_outs.iter().sum(), d_in])?;
        let mut rows = data.chunks_exact(d_in);
        Ok(d_outs.map(|d_out| {
            let piece: Vec<f32> = rows.by_ref().take(d_out).flatten().copied().collect();
            frozen(piece, [d_out, d_in], self.dtype, self.device)
        }))
    }

    /// A bias, in f32.
    fn vector(&mut self, name: &str, len: usize) -> Result<Param<Tensor<B, 1>>, PolicyError> {
        Ok(frozen(
            self.file.take(name, &[len])?,
            [len],
            FloatDType::F32,
            self.device,
        ))
    }

    /// An RMSNorm weight, in f32, plus 1 where the config stores it as an offset from 1 (Gemma's
    /// `x̂·(1 + w)`: the sum is made once here, in f32, as Gemma's norm makes it at every use).
    fn norm(&mut self, name: &str, len: usize) -> Result<Param<Tensor<B, 1>>, PolicyError> {
        let mut data = self.file.take(name, &[len])?;
        if self.norm_offset {
            data.iter_mut().for_each(|w| *w += 1.0);
        }
        Ok(frozen(data, [len], FloatDType::F32, self.device))
    }

    /// An optional norm weight, read only when the config has it.
    fn optional_norm(
        &mut self,
        present: bool,
        name: &str,
        len: usize,
    ) -> Result<Option<Param<Tensor<B, 1>>>, PolicyError> {
        present.then(|| self.norm(name, len)).transpose()
    }

    /// An optional bias, read only when the config has it.
    fn optional(
        &mut self,
        present: bool,
        name: &str,
        len: usize,
    ) -> Result<Option<Param<Tensor<B, 1>>>, PolicyError> {
        present.then(|| self.vector(name, len)).transpose()
    }
}

/// Loads the base model's weights from `dir` onto `device`, its weight matrices in `dtype`; base
/// parameters never require grad.
pub(crate) fn load_base<B: Backend>(
    dir: &Path,
    config: &ModelConfig,
    dtype: FloatDType,
    device: &B::Device,
) -> Result<BaseModel<B>, PolicyError> {
    let mut l = Loader::<B> {
        file: TensorFile::open_model_dir(dir)?,
        dtype,
        norm_offset: config.norm_offset,
        device,
    };
    let (h, inter) = (config.hidden_size, config.intermediate_size);
    let hd = config.head_dim;
    let (q, kv) = (config.num_heads * hd, config.num_kv_heads * hd);
    let embed_data = l
        .file
        .take("model.embed_tokens.weight", &[config.vocab_size, h])?;
    let embed = frozen(embed_data, [config.vocab_size, h], dtype, device);
    // The config's layer count is confirmed by the weights before anything is sized by it.
    let held = l.file.layer_count();
    if held != config.num_layers {
        return Err(PolicyError::Config {
            path: dir.join("config.json"),
            field: "num_hidden_layers".to_owned(),
            message: format!(
                "{} but the weights hold {held} decoder layers (model.layers.N); the config \
                 and the weights must come from the same model",
                config.num_layers
            ),
        });
    }
    // Gemma's four norms a block: `post_attention_layernorm` norms the attention's output and
    // `pre_feedforward_layernorm` is the norm before the MLP.
    let sandwich = config.sandwich_norms;
    let pre_mlp_norm = if sandwich {
        "pre_feedforward_layernorm"
    } else {
        "post_attention_layernorm"
    };
    let mut blocks = Vec::with_capacity(config.num_layers);
    for i in 0..config.num_layers {
        let p = format!("model.layers.{i}");
        // Phi-3 stores q/k/v as one matrix and gate/up as another: split by rows here, so the
        // forward is every family's (a LoRA on the fused matrix is split the same way).
        let (qkv, gate_up) = if config.family.fused_projections() {
            (
                l.linear_rows(&format!("{p}.self_attn.qkv_proj.weight"), h, [q, kv, kv])?,
                l.linear_rows(&format!("{p}.mlp.gate_up_proj.weight"), h, [inter; 2])?,
            )
        } else {
            (
                [
                    l.linear(&format!("{p}.self_attn.q_proj.weight"), h, q)?,
                    l.linear(&format!("{p}.self_attn.k_proj.weight"), h, kv)?,
                    l.linear(&format!("{p}.self_attn.v_proj.weight"), h, kv)?,
                ],
                [
                    l.linear(&format!("{p}.mlp.gate_proj.weight"), h, inter)?,
                    l.linear(&format!("{p}.mlp.up_proj.weight"), h, inter)?,
                ],
            )
        };
        let ([wq, wk, wv], [gate, up]) = (qkv, gate_up);
        blocks.push(Block {
            input_norm: l.norm(&format!("{p}.input_layernorm.weight"), h)?,
            attn: Attention {
                q: wq,
                k: wk,
                v: wv,
                o: l.linear(&format!("{p}.self_attn.o_proj.weight"), q, h)?,
                q_bias: l.optional(config.qkv_bias, &format!("{p}.self_attn.q_proj.bias"), q)?,
                k_bias: l.optional(config.qkv_bias, &format!("{p}.self_attn.k_proj.bias"), kv)?,
                v_bias: l.optional(config.qkv_bias, &format!("{p}.self_attn.v_proj.bias"), kv)?,
                o_bias: l.optional(config.o_bias, &format!("{p}.self_attn.o_proj.bias"), h)?,
                q_norm: l.optional_norm(
                    config.qk_norm,
                    &format!("{p}.self_attn.q_norm.weight"),
                    hd,
                )?,
                k_norm: l.optional_norm(
                    config.qk_norm,
                    &format!("{p}.self_attn.k_norm.weight"),
                    hd,
                )?,
            },
            pre_mlp_norm: l.norm(&format!("{p}.{pre_mlp_norm}.weight"), h)?,
            mlp: Mlp {
                gate,
                up,
                down: l.linear(&format!("{p}.mlp.down_proj.weight"), inter, h)?,
            },
            attn_out_norm: l.optional_norm(
                sandwich,
                &format!("{p}.post_attention_layernorm.weight"),
                h,
            )?,
            mlp_out_norm: l.optional_norm(
                sandwich,
                &format!("{p}.post_feedforward_layernorm.weight"),
                h,
            )?,
        });
    }
    let norm = l.norm("model.norm.weight", h)?;
    let tied = config.tie_word_embeddings;
    // Kept as HF stores it, `[vocab, hidden]`, like every linear weight; a tied head is the
    // embedding itself, no copy.
    let lm_head = (!tied)
        .then(|| {
            let data = l.file.take("lm_head.weight", &[config.vocab_size, h])?;
            Ok::<_, PolicyError>(frozen(data, [config.vocab_size, h], dtype, device))
        })
        .transpose()?;
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
