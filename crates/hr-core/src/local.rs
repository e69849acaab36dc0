//! The off-cluster Core context: metrics and checkpoint reports as JSON lines in a run folder,
//! checkpoints under it, preemption from SIGTERM/SIGINT (a second signal aborts at once), and
//! the import of a checkpoint written elsewhere.

use hr_files::IoResultExt;
use hr_files::local_core;
use std::{
    path::{Path, PathBuf},
    sync::{
        Arc, Mutex,
        atomic::{AtomicBool, Ordering},
    },
};

use serde_json::{Value, json};

use crate::{
    CoreContext, CoreError, TrialInfo, checkpoint::copy_tree, context::Mode, journal::append_local,
};

#[allow(clippy::print_stderr)] // off-cluster, the terminal is the one who asked
fn announce_stop() {
    eprintln!(
        "stop signal: finishing this step, then a final save (a second signal exits at once)"
    );
}

#[allow(clippy::print_stderr)] // the only way left to say why the process ends
fn abort_on_second_signal() -> ! {
    eprintln!("second stop signal: exiting now without a final save (exit 130)");
    std::process::exit(130)
}

/// On `runtime`: `first` at the first SIGTERM or SIGINT; at a second, while the stop is under
/// way, the process exits 130 at once (as a second Ctrl-C does elsewhere): no final save; the
/// last sealed checkpoint stays the resume point, and a half-written one is never adopted.
fn on_stop_signals(
    runtime: &tokio::runtime::Runtime,
    first: impl FnOnce() + Send + 'static,
) -> Result<(), CoreError> {
    runtime.block_on(async {
        let mut term = tokio::signal::unix::signal(tokio::signal::unix::SignalKind::terminate())
            .at("install SIGTERM handler in", ".")?;
        let mut int = tokio::signal::unix::signal(tokio::signal::unix::SignalKind::interrupt())
            .at("install SIGINT handler in", ".")?;
        tokio::spawn(async move {
            tokio::select! {
                _ = term.recv() => {}
                _ = int.recv() => {}
            }
            first();
            tokio::select! {
                _ = term.recv() => {}
                _ = int.recv() => {}
            }
            abort_on_second_signal();
        });
        Ok(())
    })
}

/// Held while a process that does not decide when a run stops lives ([`defer_stop_signals`]).
#[derive(Debug)]
pub struct DeferredStop {
    _runtime: tokio::runtime::Runtime,
}

/// For a process that does not decide when a run stops (a data-parallel worker, the launcher of
/// a machine's ranks): the first SIGTERM or SIGINT is announced and otherwise ignored, since the
/// chief, which a terminal's Ctrl-C reaches too, finishes its step, saves and stops every rank; a
/// second exits 130 at once. `who` names the process in the announcement.
pub fn defer_stop_signals(who: &'static str) -> Result<DeferredStop, CoreError> {
    let runtime = tokio::runtime::Builder::new_multi_thread()
        .worker_threads(1)
        .enable_all()
        .build()
        .at("start runtime in", ".")?;
    on_stop_signals(&runtime, move || defer_announce(who))?;
    Ok(DeferredStop { _runtime: runtime })
}

#[allow(clippy::print_stderr)] // off-cluster, the terminal is the one who asked
fn defer_announce(who: &str) {
    eprintln!(
        "{who}: stop signal: the chief finishes this step, saves and stops every rank (a second \
         signal exits at once)"
    );
}

impl CoreContext {
    /// Off-cluster: metrics to `run_dir/metrics.jsonl`, checkpoints under `run_dir/checkpoints/`,
    /// preemption on SIGTERM or SIGINT, a single searcher operation of `max_length` steps. Each
    /// call is a new "allocation" (`trial_run_id` counts up) restoring the latest checkpoint by
    /// the master's rule.
    pub fn local(run_dir: &Path, max_length: u64) -> Result<Self, CoreError> {
        let storage = run_dir.join(local_core::CHECKPOINTS_DIR);
        std::fs::create_dir_all(&storage).at("create", &storage)?;
        let runs_path = run_dir.join(local_core::RUNS);
        let run_id = std::fs::read_to_string(&runs_path)
            .ok()
            .and_then(|s| s.trim().parse::<i32>().ok())
            .unwrap_or(0)
            + 1;
        std::fs::write(&runs_path, run_id.to_string()).at("write", &runs_path)?;
        let latest = local_latest(run_dir)?;
        let info = TrialInfo {
            master_url: String::new(),
            task_id: "local".into(),
            allocation_id: format!("local.{run_id}"),
            trial_id: 0,
            experiment_id: 0,
            trial_run_id: run_id,
            trial_seed: 0,
            steps_completed: latest.as_ref().map_or(0, |l| l.1),
            latest_checkpoint: latest.map(|l| l.0),
            config: json!({"checkpoint_storage": {"type": "directory", "container_path": storage}}),
            hparams: json!({}),
            cluster_id: None,
            master_cert_file: None,
            master_cert_name: None,
            slot_ids: Vec::new(),
            containers: (1, 0),
            user_token: None,
        };
        let runtime = tokio::runtime::Builder::new_multi_thread()
            .worker_threads(1)
            .enable_all()
            .build()
            .at("start runtime in", ".")?;
        let preempt = Arc::new(AtomicBool::new(false));
        let flag = preempt.clone();
        on_stop_signals(&runtime, move || {
            flag.store(true, Ordering::SeqCst);
            announce_stop();
        })?;
        Ok(Self {
            info,
            mode: Mode::Local {
                run_dir: run_dir.to_owned(),
                max_length,
            },
            storage,
            runtime,
            preempt,
            queue: Mutex::new(None),
        })
    }

    /// Continues a local run from a checkpoint written elsewhere (like a Determined experiment
    /// started from a source checkpoint): `src` is a checkpoint folder (with the `metadata.json`
    /// that reporting wrote) or a local run folder (its latest checkpoint by the master's rule).
    /// The folder is copied into `run_dir`'s storage under its UUID and recorded as reported, so
    /// the next [`CoreContext::local`] selects and restores it like any other checkpoint. Returns
    /// the UUID and its `steps_completed`.
    pub fn local_import(run_dir: &Path, src: &Path) -> Result<(String, u64), CoreError> {
        let not = |why: &str| CoreError::NotACheckpoint {
            path: src.to_owned(),
            why: why.to_owned(),
        };
        let dir = if src.join(local_core::CHECKPOINT_LIST).is_file() {
            let (uuid, _) = local_latest(src)
                .map_err(|e| not(&format!("its checkpoint list cannot be read ({e})")))?
                .ok_or_else(|| not("its run has no checkpoint"))?;
            src.join(local_core::CHECKPOINTS_DIR).join(uuid)
        } else {
            src.to_owned()
        };
        let meta_path = dir.join("metadata.json");
        let meta: Value = std::fs::read(&meta_path)
            .ok()
            .and_then(|b| serde_json::from_slice(&b).ok())
            .ok_or_else(|| not("no readable metadata.json (give a checkpoint or a run folder)"))?;
        let steps = meta["steps_completed"]
            .as_u64()
            .ok_or_else(|| not("metadata.json has no steps_completed"))?;
        // Its identity is the UUID its own folder is named by (a link is followed, never named);
        // a folder named otherwise (`det checkpoint download -o ckpt`) is imported under a new
        // UUID, recorded with where it came from.
        let dir =
            std::fs::canonicalize(&dir).map_err(|e| not(&format!("cannot be resolved ({e})")))?;
        let uuid = dir
            .file_name()
            .and_then(|n| n.to_str())
            .and_then(|n| uuid::Uuid::try_parse(n).ok())
            .unwrap_or_else(uuid::Uuid::new_v4)
            .hyphenated()
            .to_string();
        let from = dir
            .to_str()
            .ok_or_else(|| not("its path is not UTF-8: move or rename it"))?;
        let storage = run_dir.join(local_core::CHECKPOINTS_DIR);
        copy_tree(&dir, &storage.join(&uuid))?;
        append_local(
            run_dir,
            local_core::CHECKPOINT_LIST,
            &json!({"uuid": uuid, "steps_completed": steps, "trial_run_id": 0,
                "imported": true, "imported_from": from, "metadata": meta}),
        )?;
        Ok((uuid, steps))
    }
}

impl CoreContext {
    /// Deletes a local run's checkpoints but its latest `keep_last` (by the master's order:
    /// steps, then report) and those at the `protected` steps, as Determined's checkpoint GC
    /// does with `save_trial_latest`; `keep_last` 0 keeps all. Each is first marked deleted in
    /// `checkpoints.jsonl`, then its folder removed, so a crash between the two leaves a folder
    /// nothing lists (removed by the next prune), never a listed checkpoint without its folder.
    /// A mark hides only the reports before it. Returns the deleted
    /// `(uuid, step)`s; a managed run's checkpoints are the master's, and nothing is deleted.
    pub fn prune_local(
        &self,
        keep_last: usize,
        protected: &[u64],
    ) -> Result<Vec<(String, u64)>, CoreError> {
        let Mode::Local { run_dir, .. } = &self.mode else {
            return Ok(Vec::new());
        };
        if keep_last == 0 {
            return Ok(Vec::new());
        }
        // Folders of checkpoints marked deleted by a prune that stopped before removing them.
        for v in local_reports(run_dir)?
            .iter()
            .filter(|v| v["deleted"] == true)
        {
            let dir = v["uuid"].as_str().map(|u| self.storage.join(u));
            if let Some(dir) = dir.filter(|d| d.is_dir()) {
                std::fs::remove_dir_all(&dir).at("remove", &dir)?;
            }
        }
        let mut listed = local_checkpoints(run_dir)?;
        // The master's order, latest last: steps, then report order (the sort is stable).
        listed.sort_by_key(|c| c.1);
        let old = listed.len().saturating_sub(keep_last);
        let doomed: Vec<(String, u64)> = listed
            .into_iter()
            .take(old)
            .filter(|(_, step)| !protected.contains(step))
            .collect();
        for (uuid, _) in &doomed {
            append_local(
                run_dir,
                local_core::CHECKPOINT_LIST,
                &json!({"uuid": uuid, "deleted": true}),
            )?;
            let dir = self.storage.join(uuid);
            if dir.is_dir() {
                std::fs::remove_dir_all(&dir).at("remove", &dir)?;
            }
        }
        Ok(doomed)
    }
}

/// The checkpoints a local run reported and has not deleted ([`CoreContext::prune_local`]), as
/// `(uuid, steps_completed)` in report order (its `checkpoints.jsonl`); empty when it reported
/// none. A torn or unreadable line is an error.
pub fn local_checkpoints(run_dir: &Path) -> Result<Vec<(String, u64)>, CoreError> {
    let mut listed: Vec<(String, u64)> = Vec::new();
    // In order: a deletion mark removes the reports before it, never a later one.
    for v in local_reports(run_dir)? {
        let Some(uuid) = v["uuid"].as_str() else {
            continue;
        };
        if v["deleted"] == true {
            listed.retain(|(u, _)| u != uuid);
        } else if let Some(step) = v["steps_completed"].as_u64() {
            listed.push((uuid.to_owned(), step));
        }
    }
    Ok(listed)
}

/// Where a local run that was resumed from another run's checkpoint
/// ([`CoreContext::local_import`]) began: the imported checkpoint's original folder and its
/// step; `None` for a run started fresh, or imported before the origin was recorded.
pub fn local_import_source(run_dir: &Path) -> Result<Option<(PathBuf, u64)>, CoreError> {
    Ok(local_reports(run_dir)?.iter().find_map(|v| {
        Some((
            PathBuf::from(v["imported_from"].as_str()?),
            v["steps_completed"].as_u64()?,
        ))
    }))
}

/// The complete lines of a local run's `checkpoints.jsonl`, parsed.
fn local_reports(run_dir: &Path) -> Result<Vec<Value>, CoreError> {
    let path = run_dir.join(local_core::CHECKPOINT_LIST);
    let text = match std::fs::read_to_string(&path) {
        Ok(t) => t,
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => return Ok(Vec::new()),
        Err(e) => return Err(hr_files::IoError::new("read", path, e).into()),
    };
    // A crash in the middle of an append leaves a last line without its newline: that report
    // never completed, so it is not a checkpoint (any other bad line is an error).
    let complete = match text.rfind('\n') {
        Some(end) if !text.ends_with('\n') => &text[..=end],
        None if !text.is_empty() => "",
        _ => text.as_str(),
    };
    complete
        .lines()
        .filter(|l| !l.trim().is_empty())
        .map(|line| {
            serde_json::from_str(line).map_err(|e| {
                hr_files::IoError::new(
                    "parse",
                    &path,
                    std::io::Error::new(std::io::ErrorKind::InvalidData, e),
                )
                .into()
            })
        })
        .collect()
}

/// The latest local checkpoint by the master's rule: highest steps, then the latest report.
pub(crate) fn local_latest(run_dir: &Path) -> Result<Option<(String, u64)>, CoreError> {
    let mut best: Option<(String, u64)> = None;
    // Later lines are later reports, so `>=` keeps the latest of equal steps.
    for (uuid, steps) in local_checkpoints(run_dir)? {
        if best.as_ref().is_none_or(|b| steps >= b.1) {
            best = Some((uuid, steps));
        }
    }
    Ok(best)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_torn_last_report_is_not_a_checkpoint_but_a_bad_middle_line_is_an_error() {
        let dir = tempfile::tempdir().expect("tempdir");
        let file = dir.path().join(local_core::CHECKPOINT_LIST);
        let good = r#"{"uuid": "a", "steps_completed": 1}"#;
        std::fs::write(&file, format!("{good}\n{{\"uuid\": \"b\", \"steps_")).expect("write");
        assert_eq!(
            local_checkpoints(dir.path()).expect("torn tail ignored"),
            [("a".to_owned(), 1)]
        );
        assert_eq!(
            local_latest(dir.path()).expect("latest"),
            Some(("a".to_owned(), 1))
        );
        std::fs::write(&file, format!("{{\"uuid\": \"b\", \"st\n{good}\n")).expect("write");
        assert!(
            local_checkpoints(dir.path()).is_err(),
            "a bad complete line is corruption"
        );
        std::fs::write(&file, "{\"uuid\": \"b\"").expect("write");
        assert_eq!(local_checkpoints(dir.path()).expect("only a torn line"), []);
        // The next report cuts the torn line off and starts clean.
        std::fs::write(&file, format!("{good}\n{{\"uuid\": \"b\", \"steps_")).expect("write");
        append_local(
            dir.path(),
            local_core::CHECKPOINT_LIST,
            &serde_json::json!({"uuid": "c", "steps_completed": 2}),
        )
        .expect("append");
        assert_eq!(
            local_checkpoints(dir.path()).expect("clean"),
            [("a".to_owned(), 1), ("c".to_owned(), 2)]
        );
    }

    #[test]
    fn pruning_keeps_the_latest_and_the_protected_and_marks_before_it_deletes() {
        let dir = tempfile::tempdir().expect("tempdir");
        let core = CoreContext::local(dir.path(), 8).expect("local context");
        let storage = dir.path().join(local_core::CHECKPOINTS_DIR);
        for step in 1..=5u64 {
            std::fs::create_dir_all(storage.join(format!("c{step}"))).expect("folder");
            append_local(
                dir.path(),
                local_core::CHECKPOINT_LIST,
                &json!({"uuid": format!("c{step}"), "steps_completed": step}),
            )
            .expect("report");
        }
        let deleted = core.prune_local(2, &[2]).expect("prune");
        assert_eq!(deleted, [("c1".to_owned(), 1), ("c3".to_owned(), 3)]);
        let kept: Vec<u64> = local_checkpoints(dir.path())
            .expect("list")
            .into_iter()
            .map(|c| c.1)
            .collect();
        assert_eq!(kept, [2, 4, 5]);
        assert!(!storage.join("c1").exists() && !storage.join("c3").exists());
        assert!(storage.join("c2").is_dir() && storage.join("c5").is_dir());
        assert_eq!(
            local_latest(dir.path()).expect("latest"),
            Some(("c5".to_owned(), 5))
        );
        // Nothing more to delete; 0 keeps all.
        assert!(core.prune_local(2, &[2]).expect("again").is_empty());
        assert!(core.prune_local(0, &[]).expect("all").is_empty());
        assert_eq!(core.prune_local(1, &[]).expect("one").len(), 2);
        assert_eq!(
            local_checkpoints(dir.path()).expect("list"),
            [("c5".to_owned(), 5)]
        );
        // A mark hides the reports before it only: the same UUID reported again is listed.
        append_local(
            dir.path(),
            local_core::CHECKPOINT_LIST,
            &json!({"uuid": "c2", "steps_completed": 6}),
        )
        .expect("report");
        assert_eq!(
            local_checkpoints(dir.path()).expect("list"),
            [("c5".to_owned(), 5), ("c2".to_owned(), 6)]
        );
        // A folder whose removal a crash cut short goes at the next prune.
        std::fs::create_dir_all(storage.join("c1")).expect("left behind");
        core.prune_local(2, &[]).expect("prune");
        assert!(!storage.join("c1").exists());
    }

    #[test]
    fn an_imported_checkpoint_is_named_by_its_own_uuid_never_by_a_link() {
        let dir = tempfile::tempdir().expect("tempdir");
        let uuid = "0b7e2c4a-1f3d-4e5a-9c8b-7d6e5f4a3b2c";
        let real = dir.path().join(uuid);
        std::fs::create_dir_all(&real).expect("folder");
        std::fs::write(real.join("metadata.json"), r#"{"steps_completed": 3}"#).expect("meta");
        let link = dir.path().join("cklink");
        std::os::unix::fs::symlink(&real, &link).expect("link");
        let run = dir.path().join("run");
        let (imported, steps) = CoreContext::local_import(&run, &link).expect("import");
        assert_eq!((imported.as_str(), steps), (uuid, 3));
        // A folder not named by a UUID gets a new one.
        let plain = dir.path().join("ckpt");
        std::fs::create_dir_all(&plain).expect("folder");
        std::fs::write(plain.join("metadata.json"), r#"{"steps_completed": 4}"#).expect("meta");
        let (named, _) = CoreContext::local_import(&run, &plain).expect("import");
        assert!(
            uuid::Uuid::try_parse(&named).is_ok() && named != "ckpt",
            "{named}"
        );
        assert!(run.join(local_core::CHECKPOINTS_DIR).join(&named).is_dir());
    }
}
