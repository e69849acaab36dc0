//! `hessian-recipes model import-gguf FILE --output DIR`: a GGUF file (llama.cpp's format)
//! converted by `hr-gguf` into an HF model folder (`config.json`, f32 `model.safetensors`,
//! `tokenizer.json`, `tokenizer_config.json` when the file carries a chat template, and
//! `PROVENANCE.json`). The folder is written beside its destination and renamed into place
//! whole, so a failed conversion leaves nothing behind; `model fetch smollm2` converts through
//! the same [`convert_into`].

use std::path::Path;
use std::process::ExitCode;

use anyhow::Context;
use serde_json::json;

use crate::Refused;
use crate::cli::ImportGgufArgs;
use crate::output::ensure_fresh;

/// The largest GGUF converted: the folder holds every weight as f32 (4–8× a quantized file),
/// and the conversion holds it in memory twice. A small-model converter, not a 70B pipeline.
pub(crate) const MAX_GGUF_BYTES: u64 = 4 << 30;

/// The most parameters converted (8 GB of f32 weights).
const MAX_PARAMETERS: u64 = 2_000_000_000;

pub(crate) fn run(args: &ImportGgufArgs) -> anyhow::Result<ExitCode> {
    ensure_fresh(&args.output)?;
    let provenance = json!({
        "source": args.file.file_name().map(|n| n.to_string_lossy().into_owned()),
    });
    let converted = convert_into(&args.file, &args.output, provenance)?;
    println!("{}", args.output.display());
    eprintln!(
        "{}: {} {} tensors, {} parameters, as an HF folder: give --model {}",
        args.file.display(),
        converted.architecture,
        converted.tensors,
        converted.parameters,
        args.output.display()
    );
    Ok(ExitCode::SUCCESS)
}

/// Converts the GGUF at `file` into the folder `dest` (which must not exist or be empty), with
/// `provenance` (an object), the file's sha256 and what the conversion found written to
/// `PROVENANCE.json`. The
/// folder is assembled beside `dest` and renamed into place; on failure nothing stays.
pub(crate) fn convert_into(
    file: &Path,
    dest: &Path,
    mut provenance: serde_json::Value,
) -> anyhow::Result<hr_gguf::Converted> {
    let bytes = hr_files::read_bounded(file, MAX_GGUF_BYTES).map_err(|e| {
        Refused(format!(
            "GGUF {}: {e} (this converter takes files up to {} GiB)",
            file.display(),
            MAX_GGUF_BYTES >> 30
        ))
    })?;
    provenance["gguf_sha256"] = json!(hr_seal::sha256_hex(&bytes));
    let gguf = hr_gguf::Gguf::parse(bytes)
        .map_err(|e| Refused(format!("GGUF {}: {e}", file.display())))?;
    let parameters: u64 = gguf
        .tensors
        .values()
        .map(|t| t.dims.iter().product::<u64>())
        .sum();
    if parameters > MAX_PARAMETERS {
        return Err(Refused(format!(
            "GGUF {} holds {parameters} parameters, more than the {MAX_PARAMETERS} this \
             converter writes as f32; convert it with llama.cpp's tools or use the model's \
             safetensors",
            file.display()
        ))
        .into());
    }
    let parent = match dest.parent() {
        Some(p) if !p.as_os_str().is_empty() => p.to_owned(),
        _ => std::path::PathBuf::from("."),
    };
    std::fs::create_dir_all(&parent).with_context(|| format!("creating {}", parent.display()))?;
    let work = tempfile::Builder::new()
        .prefix(".import-gguf-")
        .tempdir_in(&parent)
        .with_context(|| format!("creating a work folder in {}", parent.display()))?;
    let model = work.path().join("model");
    let converted = hr_gguf::convert_to_hf(&gguf, &model)
        .map_err(|e| Refused(format!("GGUF {}: {e}", file.display())))?;
    drop(gguf);
    provenance["architecture"] = json!(converted.architecture);
    provenance["parameters"] = json!(converted.parameters);
    provenance["note"] =
        json!("weights dequantized to f32; llama Q/K rows un-permuted to HF order");
    std::fs::write(
        model.join("PROVENANCE.json"),
        serde_json::to_vec_pretty(&provenance)?,
    )?;
    // An empty folder the user made is replaced; one with content was refused before.
    if dest.is_dir() {
        std::fs::remove_dir(dest).with_context(|| format!("replacing {}", dest.display()))?;
    }
    std::fs::rename(&model, dest)
        .with_context(|| format!("moving the converted folder to {}", dest.display()))?;
    Ok(converted)
}
