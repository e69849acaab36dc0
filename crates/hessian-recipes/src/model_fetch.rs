//! `hessian-recipes model fetch`: a model downloaded from the Hugging Face Hub into the local
//! Hugging Face cache, laid out as `huggingface_hub` lays it out (what `--model HUB_ID` and a
//! plan's `model.hub_id` read), by the `hf-hub` client: only the files a model folder needs
//! (config, tokenizer, safetensors weights), a file cut off by a failure resumed where it
//! stopped, and every LFS file checked against the sha256 the Hub names it by.

use std::path::{Path, PathBuf};
use std::process::ExitCode;

use anyhow::Context;
use hf_hub::api::tokio::{ApiBuilder, ApiError};
use hf_hub::{Cache, Repo, RepoType};

use crate::Refused;
use crate::cli::FetchArgs;

/// The Hub's address unless `HF_ENDPOINT` names another (a mirror, or a test's server).
const DEFAULT_ENDPOINT: &str = "https://huggingface.co";

/// The files of a repository that a model folder needs besides its `*.safetensors` weights.
const MODEL_FILES: [&str; 6] = [
    "config.json",
    "generation_config.json",
    "tokenizer.json",
    "tokenizer_config.json",
    "special_tokens_map.json",
    "model.safetensors.index.json",
];

/// Files listed by a repository that are looked at (a model has a few dozen).
const MAX_LISTED: usize = 100_000;

pub(crate) fn fetch(args: &FetchArgs) -> anyhow::Result<ExitCode> {
    if let Some(value) = offline() {
        return Err(Refused(format!(
            "HF_HUB_OFFLINE is {value:?}, so nothing is downloaded (the cluster's default): \
             run `HF_HUB_OFFLINE=0 hessian-recipes model fetch {}` where the Hub is reachable, \
             or copy the model folder in and give its path",
            args.hub_id
        ))
        .into());
    }
    if !hr_plan::is_hub_id(&args.hub_id) {
        return Err(Refused(format!(
            "{:?} is not a Hub model id: give ORG/NAME, e.g. HuggingFaceTB/SmolLM2-135M-Instruct",
            args.hub_id
        ))
        .into());
    }
    if args.revision.is_empty()
        || args.revision.starts_with('/')
        || args.revision.split('/').any(|p| p.is_empty() || p == "..")
    {
        return Err(Refused(format!(
            "--revision {:?}: give a branch, tag or commit id, e.g. main",
            args.revision
        ))
        .into());
    }
    let cache = hr_plan::hub_cache_dir().ok_or_else(|| {
        Refused("no Hugging Face cache folder: set HF_HOME or HF_HUB_CACHE".into())
    })?;
    let endpoint = std::env::var("HF_ENDPOINT")
        .ok()
        .filter(|e| !e.is_empty())
        .unwrap_or_else(|| DEFAULT_ENDPOINT.to_owned());
    let endpoint = endpoint.trim_end_matches('/').to_owned();
    let runtime = tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()
        .context("starting the download runtime")?;
    let snapshot = runtime.block_on(download(args, &cache, &endpoint))?;
    println!("{}", snapshot.display());
    eprintln!(
        "{} is in the Hugging Face cache: give --model {} (or a plan's model.hub_id){}",
        args.hub_id,
        args.hub_id,
        if args.revision == "main" {
            String::new()
        } else {
            format!(
                ", or --model {} for revision {}",
                snapshot.display(),
                args.revision
            )
        }
    );
    Ok(ExitCode::SUCCESS)
}

/// `HF_HUB_OFFLINE`'s value when it says offline (`1`, `ON`, `YES`, `TRUE`, as
/// `huggingface_hub` reads it).
fn offline() -> Option<String> {
    let value = std::env::var("HF_HUB_OFFLINE").ok()?;
    ["1", "on", "yes", "true"]
        .contains(&value.trim().to_ascii_lowercase().as_str())
        .then_some(value)
}

/// The token a gated or private model needs: `HF_TOKEN`, else the one `hf auth login` saved
/// (`HF_TOKEN_PATH`, else `HF_HOME/token`, else `~/.cache/huggingface/token`). Never printed.
fn token() -> Option<String> {
    let var = |name: &str| std::env::var_os(name).filter(|v| !v.is_empty());
    if let Some(token) = var("HF_TOKEN").and_then(|t| t.into_string().ok()) {
        return Some(token.trim().to_owned());
    }
    let path = var("HF_TOKEN_PATH").map(PathBuf::from).or_else(|| {
        var("HF_HOME")
            .map(PathBuf::from)
            .or_else(|| var("XDG_CACHE_HOME").map(|x| PathBuf::from(x).join("huggingface")))
            .or_else(|| var("HOME").map(|h| PathBuf::from(h).join(".cache/huggingface")))
            .map(|home| home.join("token"))
    })?;
    let token = hr_files::read_to_string_bounded(&path, 4096).ok()?;
    Some(token.trim().to_owned()).filter(|t| !t.is_empty())
}

/// Downloads the model's files into `cache` from `endpoint`; returns its snapshot folder.
async fn download(args: &FetchArgs, cache: &Path, endpoint: &str) -> anyhow::Result<PathBuf> {
    let api = ApiBuilder::from_cache(Cache::new(cache.to_owned()))
        .with_endpoint(endpoint.to_owned())
        .with_token(token())
        .with_progress(false)
        .build()
        .context("building the Hub client")?;
    let repo = api.repo(Repo::with_revision(
        args.hub_id.clone(),
        RepoType::Model,
        args.revision.clone(),
    ));
    let what = format!("{} (revision {}) at {endpoint}", args.hub_id, args.revision);
    let info = repo.info().await.map_err(|e| failed(&what, e))?;
    anyhow::ensure!(
        info.siblings.len() <= MAX_LISTED,
        "{what} lists {} files, more than any model repository ({MAX_LISTED})",
        info.siblings.len()
    );
    let files: Vec<&str> = info
        .siblings
        .iter()
        .map(|s| s.rfilename.as_str())
        .filter(|f| MODEL_FILES.contains(f) || (f.ends_with(".safetensors") && !f.contains('/')))
        .collect();
    for needed in ["config.json", "tokenizer.json"] {
        if !files.contains(&needed) {
            return Err(Refused(format!(
                "{what} has no {needed}: it is not a model folder this tool reads"
            ))
            .into());
        }
    }
    if !files.iter().any(|f| f.ends_with(".safetensors")) {
        return Err(Refused(format!(
            "{what} has no .safetensors weights (only safetensors are read; convert the \
             weights or pick a repository that has them)"
        ))
        .into());
    }
    anyhow::ensure!(
        info.sha.len() == 40 && info.sha.bytes().all(|b| b.is_ascii_hexdigit()),
        "{what} answered {:?} as its commit, not a commit id",
        info.sha
    );
    // Every file of the one commit the revision names now, so a branch that moves meanwhile
    // cannot mix two commits; the revision points at it only once all of them are in.
    let pinned = api.repo(Repo::with_revision(
        args.hub_id.clone(),
        RepoType::Model,
        info.sha.clone(),
    ));
    for file in &files {
        eprintln!("fetching {file}");
        let path = pinned
            .get(file)
            .await
            .map_err(|e| failed(&format!("{file} of {what}"), e))?;
        check_lfs_digest(&path).with_context(|| format!("{file} of {what}"))?;
    }
    // (hf-hub also keeps `refs/<commit>`, by which the next fetch finds these files.)
    let folder = cache.join(format!("models--{}", args.hub_id.replace('/', "--")));
    Cache::new(cache.to_owned())
        .repo(Repo::with_revision(
            args.hub_id.clone(),
            RepoType::Model,
            args.revision.clone(),
        ))
        .create_ref(&info.sha)
        .with_context(|| format!("recording {} as revision {}", info.sha, args.revision))?;
    Ok(folder.join("snapshots").join(&info.sha))
}

/// A downloaded file whose blob the Hub named by a sha256 (an LFS file: the blob's name is its
/// `X-Linked-Etag`) holds exactly those bytes; a file that does not is removed, blob and link,
/// so the next fetch downloads it again.
fn check_lfs_digest(pointer: &Path) -> anyhow::Result<()> {
    let blob = std::fs::canonicalize(pointer)
        .with_context(|| format!("resolving {}", pointer.display()))?;
    let named = blob
        .file_name()
        .and_then(|n| n.to_str())
        .filter(|n| n.len() == 64 && n.bytes().all(|b| b.is_ascii_hexdigit()))
        .map(str::to_ascii_lowercase);
    let Some(expected) = named else {
        return Ok(());
    };
    let (_, actual) = hr_seal::hash_file(&blob)?;
    if actual != expected {
        let _ = std::fs::remove_file(pointer);
        let _ = std::fs::remove_file(&blob);
        anyhow::bail!(
            "the download's sha256 is {actual}, not the {expected} the Hub names: it was \
             removed; fetch again"
        );
    }
    Ok(())
}

/// What failed, said for a user: refused (exit 2) when the Hub answers that the model or
/// revision does not exist or needs a token, an error otherwise.
fn failed(what: &str, e: ApiError) -> anyhow::Error {
    let status = match &e {
        ApiError::RequestError(r) => r.status(),
        _ => None,
    };
    match status.map(|s| s.as_u16()) {
        Some(401 | 403) => Refused(format!(
            "{what}: the Hub refused access (HTTP {}): a gated or private model needs a token \
             (HF_TOKEN, or `hf auth login`) from an account that was granted access",
            status.map_or(0, |s| s.as_u16())
        ))
        .into(),
        Some(404) => Refused(format!(
            "{what}: not found (HTTP 404): check the id and --revision"
        ))
        .into(),
        _ => anyhow::Error::new(e).context(format!(
            "{what}: the download failed (run again to resume it; HF_ENDPOINT names a mirror)"
        )),
    }
}
