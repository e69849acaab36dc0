//! The base model a run trains, by digest: its `config.json`, `tokenizer.json` and every
//! `*.safetensors` weight file. Sealed in every snapshot and compared at restore, so adapters are
//! never resumed onto other weights or another tokenizer of the same shape.

use hr_files::IoResultExt;
use std::collections::BTreeMap;
use std::path::{Path, PathBuf};

use serde::{Deserialize, Serialize};

use crate::TrainError;

/// The digests of a model folder.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct BaseModel {
    /// sha256 of `config.json`.
    pub config_sha256: String,
    /// sha256 of `tokenizer.json`.
    pub tokenizer_sha256: String,
    /// sha256 of each weight file, by file name.
    pub weights_sha256: BTreeMap<String, String>,
}

fn hash(path: &Path) -> Result<String, TrainError> {
    hr_seal::hash_file(path)
        .map(|(_, digest)| digest)
        .map_err(|e| TrainError::Refused(format!("hashing the base model: {e}")))
}

impl BaseModel {
    /// Digests the model folder `dir`.
    pub fn of(dir: &Path) -> Result<Self, TrainError> {
        let mut weights: Vec<PathBuf> = std::fs::read_dir(dir)
            .at("list", dir)?
            .filter_map(|e| e.ok().map(|e| e.path()))
            .filter(|p| p.extension().is_some_and(|x| x == "safetensors"))
            .collect();
        weights.sort();
        let mut weights_sha256 = BTreeMap::new();
        for path in &weights {
            let name = path
                .file_name()
                .map(|n| n.to_string_lossy().into_owned())
                .unwrap_or_default();
            weights_sha256.insert(name, hash(path)?);
        }
        Ok(Self {
            config_sha256: hash(&dir.join("config.json"))?,
            tokenizer_sha256: hash(&dir.join("tokenizer.json"))?,
            weights_sha256,
        })
    }

    /// Names what differs between the sealed digests (`self`) and the model now loaded, if
    /// anything.
    pub fn difference(&self, now: &Self) -> Option<String> {
        if self.config_sha256 != now.config_sha256 {
            return Some("its config.json differs".to_owned());
        }
        if self.tokenizer_sha256 != now.tokenizer_sha256 {
            return Some("its tokenizer.json differs".to_owned());
        }
        if self.weights_sha256.keys().ne(now.weights_sha256.keys()) {
            return Some(format!(
                "its weight files differ: sealed {:?}, now {:?}",
                self.weights_sha256.keys().collect::<Vec<_>>(),
                now.weights_sha256.keys().collect::<Vec<_>>()
            ));
        }
        self.weights_sha256
            .iter()
            .find(|(name, digest)| now.weights_sha256.get(*name) != Some(digest))
            .map(|(name, _)| format!("its weights {name} differ"))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_changed_weight_or_tokenizer_file_is_named() -> Result<(), TrainError> {
        let dir = tempfile::tempdir().at("create", "tempdir")?;
        let write =
            |name: &str, text: &str| std::fs::write(dir.path().join(name), text).at("write", name);
        write("config.json", "{}")?;
        write("tokenizer.json", "{}")?;
        write("model.safetensors", "weights")?;
        let sealed = BaseModel::of(dir.path())?;
        assert_eq!(sealed.difference(&BaseModel::of(dir.path())?), None);
        write("model.safetensors", "other weights")?;
        assert_eq!(
            sealed.difference(&BaseModel::of(dir.path())?).as_deref(),
            Some("its weights model.safetensors differ")
        );
        write("model.safetensors", "weights")?;
        write("tokenizer.json", "{\"v\": 2}")?;
        assert_eq!(
            sealed.difference(&BaseModel::of(dir.path())?).as_deref(),
            Some("its tokenizer.json differs")
        );
        Ok(())
    }
}
