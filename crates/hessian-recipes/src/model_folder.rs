//! The model folder a command reads: `--model` or a plan's `model.path`, or a Hub id found in
//! the local Hugging Face cache, checked before any work (its `config.json` read as the policy
//! will read it), so a model we cannot load is bad input (exit 2) that leaves nothing behind.

use std::path::{Path, PathBuf};

use crate::Refused;

/// `model` as given when it exists; else, spelled as a Hub id, that model's snapshot folder in
/// the local Hugging Face cache. `what` names the flag or field in the refusal.
pub(crate) fn resolve(model: &Path, what: &str) -> Result<PathBuf, Refused> {
    let id = model.to_string_lossy();
    if model.exists() || !hr_plan::is_hub_id(&id) {
        return Ok(model.to_owned());
    }
    hr_plan::find_cached(&id).map_err(|e| Refused(format!("{what}: {e}")))
}

/// Reads the folder's `config.json` as the policy does: a missing file, an unsupported family
/// or RoPE type, or a bad field is refused naming `what` and the config's field.
pub(crate) fn check(dir: &Path, what: &str) -> Result<(), Refused> {
    if !dir.is_dir() {
        let how = if what == "--model" {
            "give a Hugging Face model folder, or the Hub id of a model in the local cache"
        } else {
            "a plan's model.path is read relative to the plan's folder; pass --model DIR (or a \
             cached Hub id) to train another folder"
        };
        return Err(Refused(format!(
            "{what}: no model folder at {}: {how}",
            dir.display()
        )));
    }
    hr_policy::ModelConfig::from_file(&dir.join("config.json"))
        .map(drop)
        .map_err(|e| Refused(format!("{what}: {e}")))
}
