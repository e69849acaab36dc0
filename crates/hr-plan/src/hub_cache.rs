//! Models named by their Hugging Face Hub id, found offline in the local Hugging Face cache as
//! `huggingface_hub` lays it out: `<cache>/models--ORG--NAME/refs/main` holds the commit whose
//! files are in `<cache>/models--ORG--NAME/snapshots/<commit>/`. Nothing is downloaded.
//!
//! (The `hf-hub` crate reads the same layout, but links reqwest and tokio for downloads; this
//! crate stays free of networking. The binary's `model fetch` downloads with it.)

use std::path::{Path, PathBuf};

/// The cache folder `huggingface_hub` uses: `HF_HUB_CACHE`, else `HF_HOME/hub`, else
/// `XDG_CACHE_HOME/huggingface/hub`, else `~/.cache/huggingface/hub`.
pub fn hub_cache_dir() -> Option<PathBuf> {
    let var = |name: &str| {
        std::env::var_os(name)
            .filter(|v| !v.is_empty())
            .map(PathBuf::from)
    };
    var("HF_HUB_CACHE")
        .or_else(|| var("HF_HOME").map(|h| h.join("hub")))
        .or_else(|| var("XDG_CACHE_HOME").map(|x| x.join("huggingface").join("hub")))
        .or_else(|| var("HOME").map(|h| h.join(".cache").join("huggingface").join("hub")))
}

/// The snapshot folder of model `id` in the Hugging Face cache (`HF_HUB_CACHE`, else `HF_HOME/hub`,
/// else `XDG_CACHE_HOME/huggingface/hub`, else `~/.cache/huggingface/hub`), or why there is none.
pub fn find_cached(id: &str) -> Result<PathBuf, String> {
    let cache = hub_cache_dir()
        .ok_or_else(|| "no Hugging Face cache folder: set HF_HOME or HF_HUB_CACHE".to_owned())?;
    snapshot_in(&cache, id)
}

/// Whether `id` is spelled as a Hub model id: `NAME` or `ORG/NAME` of letters, digits, `-`,
/// `_` and `.`, neither part starting with `.`.
pub fn is_hub_id(id: &str) -> bool {
    let parts: Vec<&str> = id.split('/').collect();
    parts.len() <= 2
        && parts.iter().all(|p| {
            !p.is_empty()
                && !p.starts_with('.')
                && p.chars()
                    .all(|c| c.is_ascii_alphanumeric() || "-_.".contains(c))
        })
}

/// The snapshot folder of model `id` in `cache` (the commit `refs/main` names), or why there is
/// none.
pub(crate) fn snapshot_in(cache: &Path, id: &str) -> Result<PathBuf, String> {
    let repo = cache.join(format!("models--{}", id.replace('/', "--")));
    let refs = repo.join("refs").join("main");
    let commit = std::fs::read_to_string(&refs).map_err(|e| {
        format!(
            "`{id}` is not in the Hugging Face cache ({}: {e}); download it there first \
             (`hessian-recipes model fetch {id}` or `hf download {id}`), point HF_HOME or HF_HUB_CACHE at the cache that has it, or \
             set model.path to the model folder",
            refs.display()
        )
    })?;
    let commit = commit.trim();
    if commit.is_empty() || !commit.chars().all(|c| c.is_ascii_alphanumeric()) {
        return Err(format!(
            "{} does not hold a commit id (found {commit:?})",
            refs.display()
        ));
    }
    let snapshot = repo.join("snapshots").join(commit);
    if !snapshot.join("config.json").is_file() {
        return Err(format!(
            "{} has no config.json: the download of `{id}` is incomplete",
            snapshot.display()
        ));
    }
    Ok(snapshot)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn ids_and_snapshots_resolve_as_huggingface_hub_lays_them_out() {
        assert!(is_hub_id("Qwen/Qwen3-0.6B") && is_hub_id("gpt2"));
        for bad in ["", "a/b/c", "../x", "org/.hidden", "org/na me", "/abs"] {
            assert!(!is_hub_id(bad), "{bad}");
        }
        let cache = tempfile::tempdir().expect("tempdir");
        let err = snapshot_in(cache.path(), "Qwen/Qwen3-0.6B").expect_err("absent");
        assert!(err.contains("hf download Qwen/Qwen3-0.6B"), "{err}");
        let repo = cache.path().join("models--Qwen--Qwen3-0.6B");
        std::fs::create_dir_all(repo.join("refs")).expect("refs");
        std::fs::write(repo.join("refs/main"), "abc123\n").expect("ref");
        let err = snapshot_in(cache.path(), "Qwen/Qwen3-0.6B").expect_err("no files");
        assert!(err.contains("incomplete"), "{err}");
        let snapshot = repo.join("snapshots/abc123");
        std::fs::create_dir_all(&snapshot).expect("snapshot");
        std::fs::write(snapshot.join("config.json"), "{}").expect("config");
        assert_eq!(snapshot_in(cache.path(), "Qwen/Qwen3-0.6B"), Ok(snapshot));
        std::fs::write(repo.join("refs/main"), "../../x").expect("ref");
        assert!(snapshot_in(cache.path(), "Qwen/Qwen3-0.6B").is_err());
    }
}
