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
/// folder is assembled beside `dest` (`.NAME.partial`, cleared first if an interrupted run left
/// it) and renamed into place; on failure nothing stays.
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
    let gguf = hr_gguf::Gguf::parse(bytes).map_err(|e| refused_or_io(file, e))?;
    let parameters = gguf
        .tensors
        .values()
        .try_fold(0u64, |sum, t| {
            t.dims
                .iter()
                .try_fold(1u64, |n, d| n.checked_mul(*d))
                .and_then(|n| sum.checked_add(n))
        })
        .filter(|n| *n <= MAX_PARAMETERS);
    if parameters.is_none() {
        return Err(Refused(format!(
            "GGUF {} holds more than the {MAX_PARAMETERS} parameters this converter writes as \
             f32; convert it with llama.cpp's tools or use the model's safetensors",
            file.display()
        ))
        .into());
    }
    let name = dest.file_name().ok_or_else(|| {
        Refused(format!(
            "{} names no folder: give the model folder to write",
            dest.display()
        ))
    })?;
    let parent = match dest.parent() {
        Some(p) if !p.as_os_str().is_empty() => p.to_owned(),
        _ => std::path::PathBuf::from("."),
    };
    std::fs::create_dir_all(&parent).with_context(|| format!("creating {}", parent.display()))?;
    // One fixed name beside the destination, so what an interrupted conversion left is
    // cleared by the next one.
    let work = parent.join(format!(".{}.partial", name.to_string_lossy()));
    if work.exists() {
        std::fs::remove_dir_all(&work).with_context(|| format!("clearing {}", work.display()))?;
    }
    let converted = write_folder(&gguf, &work, dest, provenance);
    if converted.is_err() {
        let _ = std::fs::remove_dir_all(&work);
    }
    converted.map_err(|e| match e.downcast::<hr_gguf::GgufError>() {
        Ok(e) => refused_or_io(file, e),
        Err(e) => e,
    })
}

/// Converts into `work`, adds `PROVENANCE.json`, and renames `work` to `dest`.
fn write_folder(
    gguf: &hr_gguf::Gguf,
    work: &Path,
    dest: &Path,
    mut provenance: serde_json::Value,
) -> anyhow::Result<hr_gguf::Converted> {
    let converted = hr_gguf::convert_to_hf(gguf, work)?;
    provenance["architecture"] = json!(converted.architecture);
    provenance["parameters"] = json!(converted.parameters);
    provenance["note"] =
        json!("weights dequantized to f32; llama Q/K rows un-permuted to HF order");
    std::fs::write(
        work.join("PROVENANCE.json"),
        serde_json::to_vec_pretty(&provenance)?,
    )?;
    // An empty folder the user made is replaced; one with content was refused before.
    if dest.is_dir() {
        std::fs::remove_dir(dest).with_context(|| format!("replacing {}", dest.display()))?;
    }
    std::fs::rename(work, dest)
        .with_context(|| format!("moving the converted folder to {}", dest.display()))?;
    Ok(converted)
}

/// A file the converter cannot read as a model is bad input (exit 2); a failure to write the
/// folder is not (exit 1).
fn refused_or_io(file: &Path, e: hr_gguf::GgufError) -> anyhow::Error {
    match e {
        e @ hr_gguf::GgufError::Io { .. } => anyhow::Error::new(e),
        e => Refused(format!("GGUF {}: {e}", file.display())).into(),
    }
}
