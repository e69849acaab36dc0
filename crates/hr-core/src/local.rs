//! The off-cluster Core context: metrics and checkpoint reports as JSON lines in a run folder,
//! checkpoints under it, preemption from SIGTERM/SIGINT (a second signal aborts at once), and
//! the import of a checkpoint written elsewhere.

use hr_files::IoResultExt;
use hr_files::local_core;
use std::{
    path::Path,
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
            user_token: None,
        };
        let runtime = tokio::runtime::Builder::new_multi_thread()
            .worker_threads(1)
            .enable_all()
            .build()
            .at("start runtime in", ".")?;
        let preempt = Arc::new(AtomicBool::new(false));
        let flag = preempt.clone();
        runtime.block_on(async {
            let mut term =
                tokio::signal::unix::signal(tokio::signal::unix::SignalKind::terminate())
                    .at("install SIGTERM handler in", ".")?;
            let mut int = tokio::signal::unix::signal(tokio::signal::unix::SignalKind::interrupt())
                .at("install SIGINT handler in", ".")?;
            tokio::spawn(async move {
                tokio::select! {
                    _ = term.recv() => {}
                    _ = int.recv() => {}
                }
                flag.store(true, Ordering::SeqCst);
                announce_stop();
                // A second signal while the stop is under way aborts at once (as a second Ctrl-C
                // does elsewhere): no final save; the last sealed checkpoint stays the resume
                // point, and a half-written one is never adopted.
                tokio::select! {
                    _ = term.recv() => {}
                    _ = int.recv() => {}
                }
                abort_on_second_signal();
            });
            Ok::<_, CoreError>(())
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
        let uuid = dir
            .file_name()
            .map(|n| n.to_string_lossy().into_owned())
            .ok_or_else(|| not("no folder name"))?;
        let storage = run_dir.join(local_core::CHECKPOINTS_DIR);
        copy_tree(&dir, &storage.join(&uuid))?;
        append_local(
            run_dir,
            local_core::CHECKPOINT_LIST,
            &json!({"uuid": uuid, "steps_completed": steps, "trial_run_id": 0,
                "imported": true, "metadata": meta}),
        )?;
        Ok((uuid, steps))
    }
}

/// The checkpoints a local run reported, as `(uuid, steps_completed)` in report order (its
/// `checkpoints.jsonl`); empty when it reported none. A torn or unreadable line is an error.
pub fn local_checkpoints(run_dir: &Path) -> Result<Vec<(String, u64)>, CoreError> {
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
    let mut out = Vec::new();
    for line in complete.lines().filter(|l| !l.trim().is_empty()) {
        let v: Value = serde_json::from_str(line).map_err(|e| {
            hr_files::IoError::new(
                "parse",
                &path,
                std::io::Error::new(std::io::ErrorKind::InvalidData, e),
            )
        })?;
        if let (Some(uuid), Some(steps)) = (v["uuid"].as_str(), v["steps_completed"].as_u64()) {
            out.push((uuid.to_owned(), steps));
        }
    }
    Ok(out)
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
}
