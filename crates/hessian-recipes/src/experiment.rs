//! `evaluate --resume EXPERIMENT`: an experiment id looked up on the master and resolved to its
//! managed run folder, `<checkpoint storage>/hr-run-<experiment>-<trial>`, as this machine sees
//! the storage (inside a Determined task container a `shared_fs` is mounted at
//! `/determined_shared_fs`; elsewhere it is its `host_path`).

use std::path::{Path, PathBuf};

use anyhow::Context;
use serde_json::Value;

use crate::Refused;

/// Where Determined mounts a `shared_fs` storage in task containers.
const SHARED_FS_MOUNT: &str = "/determined_shared_fs";

/// `resume` unchanged when it is a path that exists or not a number; otherwise the run folder
/// of the experiment with that id, looked up on `master`.
pub(crate) fn resolve(resume: &Path, master: Option<&str>) -> anyhow::Result<PathBuf> {
    let id = match resume.to_str().map(str::parse::<i32>) {
        Some(Ok(id)) if id > 0 && !resume.exists() => id,
        _ => return Ok(resume.to_owned()),
    };
    let master = master.ok_or_else(|| {
        Refused(format!(
            "--resume {id}: an experiment id is looked up on the master: give --master URL or \
             set DET_MASTER (or give the run folder <checkpoint storage>/hr-run-{id}-<trial>)"
        ))
    })?;
    let runtime = tokio::runtime::Runtime::new().context("starting the async runtime")?;
    let (config, trials) = runtime.block_on(async {
        let mut client = hr_det::Client::new(master)?;
        client.sign_in_from_env().await?;
        let experiment = client.get_experiment(id).await?;
        let trials = client.list_trials(id).await?.trials;
        Ok::<_, hr_det::DetError>((experiment.config, trials))
    })?;
    let in_container = Path::new(SHARED_FS_MOUNT).is_dir();
    let storage = storage_dir(&config, in_container).ok_or_else(|| {
        Refused(format!(
            "experiment {id}: its checkpoint_storage ({}) is not a shared_fs or directory storage \
             this machine can read; give the run folder <checkpoint storage>/hr-run-{id}-<trial>",
            config.get("checkpoint_storage").unwrap_or(&Value::Null)
        ))
    })?;
    let trial = match trials.as_slice() {
        [trial] => trial.id,
        [] => return Err(Refused(format!("experiment {id} has no trial yet")).into()),
        many => {
            return Err(Refused(format!(
                "experiment {id} has {} trials ({}): give the run folder {}/hr-run-{id}-<trial>",
                many.len(),
                many.iter()
                    .map(|t| t.id.to_string())
                    .collect::<Vec<_>>()
                    .join(", "),
                storage.display()
            ))
            .into());
        }
    };
    let dir = hr_files::RunDir::managed(&storage, id, trial)
        .root()
        .to_owned();
    eprintln!(
        "evaluate: experiment {id}, trial {trial}: {}",
        dir.display()
    );
    Ok(dir)
}

/// The folder of an experiment's `checkpoint_storage` on this machine: `directory` is its
/// `container_path`; `shared_fs` is the mount (in a container) or `host_path`, plus
/// `storage_path` (an absolute one lies under `host_path`).
fn storage_dir(config: &Value, in_container: bool) -> Option<PathBuf> {
    let storage = config.get("checkpoint_storage")?;
    match storage.get("type")?.as_str()? {
        "directory" => Some(PathBuf::from(storage.get("container_path")?.as_str()?)),
        "shared_fs" => {
            let host = storage.get("host_path")?.as_str()?;
            let base = PathBuf::from(if in_container { SHARED_FS_MOUNT } else { host });
            Some(match storage.get("storage_path").and_then(Value::as_str) {
                Some(p) if p.starts_with('/') => base.join(Path::new(p).strip_prefix(host).ok()?),
                Some(p) => base.join(p),
                None => base,
            })
        }
        _ => None,
    }
}

#[cfg(test)]
mod tests {
    use serde_json::json;

    use super::*;

    fn storage(s: &Value) -> Value {
        json!({"checkpoint_storage": s})
    }

    #[test]
    fn the_storage_folder_is_the_one_this_machine_sees() {
        let shared = storage(&json!({"type": "shared_fs", "host_path": "/mnt/share",
            "storage_path": "ckpts", "propagation": "rprivate"}));
        assert_eq!(storage_dir(&shared, false), Some("/mnt/share/ckpts".into()));
        assert_eq!(
            storage_dir(&shared, true),
            Some("/determined_shared_fs/ckpts".into())
        );
        let absolute = storage(&json!({"type": "shared_fs", "host_path": "/mnt/share",
            "storage_path": "/mnt/share/a/b"}));
        assert_eq!(storage_dir(&absolute, false), Some("/mnt/share/a/b".into()));
        assert_eq!(
            storage_dir(&absolute, true),
            Some("/determined_shared_fs/a/b".into())
        );
        let bare = storage(&json!({"type": "shared_fs", "host_path": "/mnt/share"}));
        assert_eq!(storage_dir(&bare, false), Some("/mnt/share".into()));
        let directory = storage(&json!({"type": "directory", "container_path": "/ckpt"}));
        assert_eq!(storage_dir(&directory, true), Some("/ckpt".into()));
        assert_eq!(
            storage_dir(&storage(&json!({"type": "s3", "bucket": "b"})), false),
            None
        );
        let outside = storage(&json!({"type": "shared_fs", "host_path": "/mnt/share",
            "storage_path": "/elsewhere"}));
        assert_eq!(storage_dir(&outside, false), None);
    }

    #[test]
    fn a_path_or_a_word_is_left_as_it_is_and_an_id_needs_a_master() {
        assert_eq!(
            resolve(Path::new("runs/a"), None).expect("path"),
            Path::new("runs/a")
        );
        let err = resolve(Path::new("417"), None).expect_err("no master");
        assert!(
            err.to_string()
                .contains("give --master URL or set DET_MASTER"),
            "{err}"
        );
    }
}
