//! The run an evaluation assesses, given as an experiment id: looked up on the master and
//! resolved to its managed run folder, `<checkpoint storage>/hr-run-<experiment>-<trial>`, as
//! this machine sees the storage (inside a Determined task container a `shared_fs` is mounted at
//! `/determined_shared_fs`; elsewhere it is its `host_path`).

use std::path::{Path, PathBuf};

use hr_config::{CheckpointStorage, SHARED_FS_MOUNT, StorageView};
use serde_json::Value;

/// Why a run folder could not be found.
#[derive(Debug, thiserror::Error)]
pub enum RunFolderError {
    /// Bad input: the message names what to give instead.
    #[error("{0}")]
    Refused(String),
    /// The master could not be asked.
    #[error(transparent)]
    Master(#[from] hr_det::DetError),
    /// The async runtime could not start.
    #[error("starting the async runtime: {0}")]
    Runtime(std::io::Error),
}

/// `resume` unchanged when it is a path that exists or not a number; otherwise the run folder
/// of the experiment with that id, looked up on `master`.
pub fn resolve_run_folder(resume: &Path, master: Option<&str>) -> Result<PathBuf, RunFolderError> {
    let id = match resume.to_str().map(str::parse::<i32>) {
        Some(Ok(id)) if id > 0 && !resume.exists() => id,
        _ => return Ok(resume.to_owned()),
    };
    let master = master.ok_or_else(|| {
        RunFolderError::Refused(format!(
            "--resume {id}: an experiment id is looked up on the master: give --master URL or \
             set DET_MASTER (or give the run folder <checkpoint storage>/hr-run-{id}-<trial>)"
        ))
    })?;
    let runtime = tokio::runtime::Runtime::new().map_err(RunFolderError::Runtime)?;
    let (config, trials) = runtime.block_on(async {
        let mut client = hr_det::Client::new(master)?;
        client.sign_in_from_env().await?;
        let experiment = client.get_experiment(id).await?;
        let trials = client.list_trials(id).await?.trials;
        Ok::<_, hr_det::DetError>((experiment.config, trials))
    })?;
    let view = if Path::new(SHARED_FS_MOUNT).is_dir() {
        StorageView::Container
    } else {
        StorageView::Host
    };
    let storage = CheckpointStorage::from_expconf(
        config.get("checkpoint_storage").unwrap_or(&Value::Null),
    )
    .and_then(|s| s.folder(view))
    .map_err(|e| {
        RunFolderError::Refused(format!(
            "experiment {id}: {e}; give the run folder <checkpoint storage>/hr-run-{id}-<trial>"
        ))
    })?;
    let trial = match trials.as_slice() {
        [trial] => trial.id,
        [] => {
            return Err(RunFolderError::Refused(format!(
                "experiment {id} has no trial yet"
            )));
        }
        many => {
            return Err(RunFolderError::Refused(format!(
                "experiment {id} has {} trials ({}): give the run folder {}/hr-run-{id}-<trial>",
                many.len(),
                many.iter()
                    .map(|t| t.id.to_string())
                    .collect::<Vec<_>>()
                    .join(", "),
                storage.display()
            )));
        }
    };
    let dir = hr_files::RunDir::managed(&storage, id, trial)
        .root()
        .to_owned();
    tracing::info!(
        "evaluate: experiment {id}, trial {trial}: {}",
        dir.display()
    );
    Ok(dir)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_path_or_a_word_is_left_as_it_is_and_an_id_needs_a_master() {
        assert_eq!(
            resolve_run_folder(Path::new("runs/a"), None).expect("path"),
            Path::new("runs/a")
        );
        let err = resolve_run_folder(Path::new("417"), None).expect_err("no master");
        assert!(
            err.to_string()
                .contains("give --master URL or set DET_MASTER"),
            "{err}"
        );
    }
}
