//! Adapters as PEFT files: `adapter_model.safetensors` with PEFT's key names
//! (`base_model.model.model.layers.N.self_attn.q_proj.lora_A.weight`, `[r, in]`; `lora_B`,
//! `[out, r]`; DoRA's `lora_magnitude_vector`, `[out]`) and `adapter_config.json`. Saving is
//! deterministic, so save → load → save gives the same bytes.

use std::collections::{BTreeMap, HashMap};
use std::path::Path;

use burn::tensor::backend::Backend;
use safetensors::Dtype;
use safetensors::tensor::TensorView;
use serde_json::{Value, json};

use crate::lora::{Adapters, Filled, LoraConfig, Target};
use crate::weights::{TensorFile, transpose};
use crate::{ModelConfig, PolicyError};

/// File holding the adapter tensors.
pub const ADAPTER_WEIGHTS: &str = "adapter_model.safetensors";
/// File holding the adapter config.
pub const ADAPTER_CONFIG: &str = "adapter_config.json";

fn key(layer: usize, target: Target, matrix: &str) -> String {
    format!(
        "base_model.model.model.layers.{layer}.{}.{matrix}.weight",
        target.module_path()
    )
}

/// DoRA's magnitude key: PEFT saves it without `.weight`.
fn magnitude_key(layer: usize, target: Target) -> String {
    format!(
        "base_model.model.model.layers.{layer}.{}.lora_magnitude_vector",
        target.module_path()
    )
}

fn host<B: Backend>(tensor: burn::tensor::Tensor<B, 2>) -> Result<Vec<f32>, PolicyError> {
    tensor
        .into_data()
        .to_vec::<f32>()
        .map_err(|e| PolicyError::Request(format!("reading adapter values: {e:?}")))
}

/// The `adapter_config.json` PEFT writes for `config` (`base_model` names the base model).
pub fn adapter_config_json(config: &LoraConfig, base_model: &str) -> Value {
    json!({
        "base_model_name_or_path": base_model,
        "bias": "none",
        "fan_in_fan_out": false,
        "inference_mode": true,
        "init_lora_weights": true,
        "layers_to_transform": config.layers,
        "lora_alpha": config.alpha,
        "lora_dropout": config.dropout,
        "modules_to_save": null,
        "peft_type": "LORA",
        "r": config.rank,
        "target_modules": match &config.pattern {
            Some(pattern) => json!(pattern),
            None => json!(config.targets.iter().map(|t| t.name()).collect::<Vec<_>>()),
        },
        "task_type": "CAUSAL_LM",
        "use_dora": config.dora,
        "use_rslora": config.rslora,
    })
}

/// The bytes of `adapter_model.safetensors` and `adapter_config.json` for `adapters`
/// (deterministic: the same adapters always give the same bytes).
pub fn adapter_files<B: Backend>(
    adapters: &Adapters<B>,
    base_model: &str,
) -> Result<AdapterFiles, PolicyError> {
    let mut tensors: Vec<(String, Vec<usize>, Vec<u8>)> = Vec::new();
    for (layer, slots) in adapters.layers.iter().enumerate() {
        for (target, pair) in Target::ALL.iter().zip(&slots.slots) {
            let Some(pair) = pair else { continue };
            let [d_in, r] = pair.a.dims();
            let [_, d_out] = pair.b.dims();
            let a = transpose(&host(pair.a.val())?, d_in, r);
            let b = transpose(&host(pair.b.val())?, r, d_out);
            tensors.push((key(layer, *target, "lora_A"), vec![r, d_in], le_bytes(&a)));
            tensors.push((key(layer, *target, "lora_B"), vec![d_out, r], le_bytes(&b)));
            if let Some(m) = &pair.magnitude {
                let m = host(m.val())?;
                tensors.push((magnitude_key(layer, *target), vec![d_out], le_bytes(&m)));
            }
        }
    }
    let weights = f32_safetensors(&tensors)?;
    let config = serde_json::to_vec_pretty(&adapter_config_json(adapters.config(), base_model))
        .map_err(|e| PolicyError::Request(format!("serialising {ADAPTER_CONFIG}: {e}")))?;
    Ok(AdapterFiles { weights, config })
}

/// The two PEFT files, in memory.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct AdapterFiles {
    /// `adapter_model.safetensors`.
    pub weights: Vec<u8>,
    /// `adapter_config.json`.
    pub config: Vec<u8>,
}

/// A safetensors file of f32 tensors `(name, shape, little-endian bytes)` with PEFT's
/// `{"format": "pt"}` metadata.
pub fn f32_safetensors(tensors: &[(String, Vec<usize>, Vec<u8>)]) -> Result<Vec<u8>, PolicyError> {
    let views = tensors
        .iter()
        .map(|(name, shape, bytes)| {
            TensorView::new(Dtype::F32, shape.clone(), bytes).map(|v| (name.as_str(), v))
        })
        .collect::<Result<Vec<_>, _>>()
        .map_err(|e| PolicyError::Request(format!("building a safetensors file: {e}")))?;
    let metadata = HashMap::from([("format".to_owned(), "pt".to_owned())]);
    safetensors::serialize(views, Some(metadata))
        .map_err(|e| PolicyError::Request(format!("serialising a safetensors file: {e}")))
}

/// Tensors on the host: name → (shape, row-major f32 values).
pub type HostTensors = BTreeMap<String, (Vec<usize>, Vec<f32>)>;

/// Reads every tensor of an in-memory safetensors file as f32 (from f32, f16 or bf16), by name;
/// `origin` names the file in errors.
pub fn read_f32_safetensors(origin: &Path, bytes: &[u8]) -> Result<HostTensors, PolicyError> {
    let parsed =
        safetensors::SafeTensors::deserialize(bytes).map_err(|e| PolicyError::Safetensors {
            path: origin.to_owned(),
            message: e.to_string(),
        })?;
    let mut out = BTreeMap::new();
    for (name, view) in parsed.tensors() {
        let values = crate::weights::to_f32(view.dtype(), view.data()).ok_or_else(|| {
            PolicyError::tensor(
                origin,
                &name,
                format!("dtype {:?} is not supported", view.dtype()),
            )
        })?;
        out.insert(name, (view.shape().to_vec(), values));
    }
    Ok(out)
}

/// Writes `adapter_model.safetensors` and `adapter_config.json` into `dir` (created if absent).
/// Existing adapter files are never overwritten.
pub fn save_adapters<B: Backend>(
    adapters: &Adapters<B>,
    base_model: &str,
    dir: &Path,
) -> Result<(), PolicyError> {
    std::fs::create_dir_all(dir).map_err(|e| PolicyError::io(dir, e))?;
    let files = adapter_files(adapters, base_model)?;
    write_new(&dir.join(ADAPTER_WEIGHTS), &files.weights)?;
    write_new(&dir.join(ADAPTER_CONFIG), &files.config)
}

fn le_bytes(values: &[f32]) -> Vec<u8> {
    values.iter().flat_map(|v| v.to_le_bytes()).collect()
}

/// Writes a new file atomically and durably (`hr_files::write_new`); refuses to replace an
/// existing one.
fn write_new(path: &Path, bytes: &[u8]) -> Result<(), PolicyError> {
    hr_files::write_new(path, bytes).map_err(|e| {
        let source = if e.source.kind() == std::io::ErrorKind::AlreadyExists {
            std::io::Error::new(
                std::io::ErrorKind::AlreadyExists,
                "refusing to overwrite an existing adapter file",
            )
        } else {
            e.source
        };
        PolicyError::io(e.path, source)
    })
}

/// Parses and checks the text of an `adapter_config.json`; `path` only names it in errors.
pub fn parse_adapter_config(path: &Path, text: &str) -> Result<LoraConfig, PolicyError> {
    let err = |field: &str, message: &str| PolicyError::Config {
        path: path.to_owned(),
        field: field.to_owned(),
        message: message.to_owned(),
    };
    let v: Value =
        serde_json::from_str(text).map_err(|e| err("(file)", &format!("not JSON: {e}")))?;
    if v.get("peft_type").and_then(Value::as_str) != Some("LORA") {
        return Err(err("peft_type", "must be \"LORA\""));
    }
    for (field, ok) in [
        (
            "fan_in_fan_out",
            v.get("fan_in_fan_out")
                .is_none_or(|x| x == &json!(false) || x.is_null()),
        ),
        (
            "layers_pattern",
            v.get("layers_pattern")
                .is_none_or(|x| x.is_null() || x == "layers" || x == &json!(["layers"])),
        ),
        (
            "modules_to_save",
            v.get("modules_to_save").is_none_or(Value::is_null),
        ),
        ("bias", v.get("bias").is_none_or(|x| x == "none")),
    ] {
        if !ok {
            return Err(err(
                field,
                "is not supported: only LoRA, rsLoRA and DoRA (no biases, extra modules or other layer names)",
            ));
        }
    }
    let rank = v
        .get("r")
        .and_then(Value::as_u64)
        .ok_or_else(|| err("r", "must be a positive integer"))? as usize;
    let alpha = v
        .get("lora_alpha")
        .and_then(Value::as_f64)
        .ok_or_else(|| err("lora_alpha", "must be a number"))?;
    let layers = match v.get("layers_to_transform") {
        None | Some(Value::Null) => None,
        Some(Value::Number(n)) => Some(vec![n.as_u64().ok_or_else(|| {
            err(
                "layers_to_transform",
                "must be a layer index or a list of them",
            )
        })? as usize]),
        // PEFT reads an empty list as every layer.
        Some(Value::Array(list)) if list.is_empty() => None,
        Some(Value::Array(list)) => Some(
            list.iter()
                .map(|x| x.as_u64().map(|i| i as usize))
                .collect::<Option<Vec<usize>>>()
                .ok_or_else(|| err("layers_to_transform", "must be a list of layer indices"))?,
        ),
        Some(_) => {
            return Err(err(
                "layers_to_transform",
                "must be a layer index or a list of them",
            ));
        }
    };
    let flag = |name: &str| match v.get(name) {
        None | Some(Value::Null) => Ok(false),
        Some(Value::Bool(b)) => Ok(*b),
        Some(_) => Err(err(name, "must be true or false")),
    };
    let (rslora, dora) = (flag("use_rslora")?, flag("use_dora")?);
    let dropout = match v.get("lora_dropout") {
        None | Some(Value::Null) => 0.0,
        Some(p) => p
            .as_f64()
            .filter(|p| (0.0..1.0).contains(p))
            .ok_or_else(|| err("lora_dropout", "must be a number at least 0 and below 1"))?,
    };
    // A string is PEFT's regular expression over module names.
    if let Some(pattern) = v.get("target_modules").and_then(Value::as_str) {
        return LoraConfig::new(rank, alpha, Target::ALL.to_vec())
            .and_then(|c| c.with_pattern(pattern))
            .and_then(|c| c.with_dropout(dropout))
            .map(|c| c.with_rslora(rslora).with_dora(dora))
            .map_err(|e| err("target_modules", &e.to_string()));
    }
    let names = v
        .get("target_modules")
        .and_then(Value::as_array)
        .ok_or_else(|| {
            err(
                "target_modules",
                "must be a list of module names such as [\"q_proj\", \"v_proj\"] or a regular expression",
            )
        })?;
    let mut targets = Vec::new();
    for name in names {
        let name = name.as_str().unwrap_or_default();
        targets.push(Target::from_name(name).ok_or_else(|| {
            let known: Vec<&str> = Target::ALL.iter().map(|t| t.name()).collect();
            err(
                "target_modules",
                &format!("`{name}` is not one of {}", known.join(", ")),
            )
        })?);
    }
    LoraConfig::new(rank, alpha, targets)
        .and_then(|c| c.with_dropout(dropout))
        .map(|c| c.with_rslora(rslora).with_dora(dora).with_layers(layers))
        .map_err(|e| err("r", &e.to_string()))
}

/// Loads adapters written by PEFT or [`save_adapters`] for a model of shape `model`.
pub fn load_adapters<B: Backend>(
    model: &ModelConfig,
    dir: &Path,
    device: &B::Device,
) -> Result<Adapters<B>, PolicyError> {
    let config_path = dir.join(ADAPTER_CONFIG);
    let text = hr_files::read_to_string_bounded(&config_path, hr_files::MAX_CONFIG_BYTES)
        .map_err(|e| PolicyError::io(&config_path, e))?;
    let config = parse_adapter_config(&config_path, &text)?;
    build_adapters(
        model,
        config,
        TensorFile::open(&dir.join(ADAPTER_WEIGHTS))?,
        device,
    )
}

/// Loads adapters from in-memory PEFT files; `origin` names them in errors.
pub fn adapters_from_files<B: Backend>(
    model: &ModelConfig,
    files: &AdapterFiles,
    origin: &Path,
    device: &B::Device,
) -> Result<Adapters<B>, PolicyError> {
    let text = std::str::from_utf8(&files.config).map_err(|_| {
        PolicyError::Request(format!(
            "{}: {ADAPTER_CONFIG} is not UTF-8",
            origin.display()
        ))
    })?;
    let config = parse_adapter_config(&origin.join(ADAPTER_CONFIG), text)?;
    let file = TensorFile::from_bytes(&origin.join(ADAPTER_WEIGHTS), files.weights.clone())?;
    build_adapters(model, config, file, device)
}

fn build_adapters<B: Backend>(
    model: &ModelConfig,
    config: LoraConfig,
    mut file: TensorFile,
    device: &B::Device,
) -> Result<Adapters<B>, PolicyError> {
    let config = config.fit(model)?;
    let dora = config.dora;
    let adapters = Adapters::build(model, config, device, |layer, target, d_in, d_out, r| {
        let a = file.take_finite(&key(layer, target, "lora_A"), &[r, d_in])?;
        let b = file.take_finite(&key(layer, target, "lora_B"), &[d_out, r])?;
        let magnitude = dora
            .then(|| file.take_finite(&magnitude_key(layer, target), &[d_out]))
            .transpose()?;
        Ok(Filled {
            a: transpose(&a, r, d_in),
            b: transpose(&b, d_out, r),
            magnitude,
        })
    })?;
    file.finish(|_| false)?;
    Ok(adapters)
}
