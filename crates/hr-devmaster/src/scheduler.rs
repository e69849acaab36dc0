//! Scheduling: trial allocations and commands as child processes (each in its own process
//! group), their exits, and the pause / activate / kill / cancel transitions with the master's
//! preemption protocol.
// The devmaster's operational log (stale allocations stopped, GC failures)
// goes to its stderr, like a master's log.

use std::{
    path::{Path, PathBuf},
    process::{ExitStatus, Stdio},
    sync::Arc,
};

use hr_det::wire::{State, TaskState};
use serde_json::{Value, json};
use tokio::sync::watch;

use crate::{
    info::{Allocation, now_rfc3339, random_hex},
    master::{Alloc, Master},
    state::{CommandRec, MasterState},
    trial_info::InfoView,
};

/// Kills a process group.
pub(crate) fn kill_group(pid: u32) {
    if let Some(pid) = i32::try_from(pid)
        .ok()
        .and_then(rustix::process::Pid::from_raw)
    {
        let _ = rustix::process::kill_process_group(pid, rustix::process::Signal::KILL);
    }
}

/// After a restart: allocations that were running are gone; active trials get a new one, and
/// commands that were running are marked terminated.
pub(crate) fn recover(master: &Arc<Master>) {
    let to_start: Vec<i32> = {
        let mut state = master.state();
        let mut restart = Vec::new();
        for trial in state.trials.values_mut() {
            // Fencing: an allocation of the crashed devmaster that still runs is stopped before
            // a new one starts (it could no longer publish anyway: its run is stale).
            if let Some(p) = trial.process.take().filter(crate::state::ProcessRef::alive) {
                tracing::warn!(
                    "devmaster: stopping trial {}'s allocation of the previous devmaster (process group {})",
                    trial.id,
                    p.pid
                );
                kill_group(p.pid);
            }
            // Every active trial gets an allocation again: the one that was running, and one the
            // crashed devmaster had not yet restarted (between a failed allocation and its
            // restart under `max_restarts`).
            trial.allocated = false;
            if trial.state == State::Active {
                restart.push(trial.id);
            }
        }
        for cmd in state.commands.values_mut() {
            if cmd.state != TaskState::Terminated {
                cmd.state = TaskState::Terminated;
                cmd.exit_status = Some("devmaster restarted".to_owned());
            }
        }
        master.persist(state);
        restart
    };
    for trial in to_start {
        allocate(master, trial);
    }
}

/// Kills every process this devmaster started.
pub(crate) fn kill_all(master: &Master) {
    for alloc in master.allocs().values() {
        if let Some(pid) = alloc.pid {
            kill_group(pid);
        }
    }
    for pid in master
        .command_pids
        .lock()
        .unwrap_or_else(std::sync::PoisonError::into_inner)
        .values()
    {
        kill_group(*pid);
    }
}

/// The folder the trials of an experiment with `config` keep checkpoints in, as the host sees it
/// (`hr-config`'s one resolver); `None` when the storage keeps none here (creation refuses those).
pub(crate) fn storage_dir(config: &Value) -> Option<PathBuf> {
    hr_config::CheckpointStorage::from_expconf(config.get("checkpoint_storage")?)
        .and_then(|s| s.folder(hr_config::StorageView::Host))
        .ok()
}

/// The config a trial sees: `shared_fs` storage becomes a `directory` at its folder on the host
/// (there are no containers, so nothing is mounted at `/determined_shared_fs`).
pub(crate) fn trial_config(config: &Value) -> Value {
    let mut config = config.clone();
    let folder = storage_dir(&config);
    if let Some(storage) = config.get_mut("checkpoint_storage")
        && storage.get("type").and_then(Value::as_str) == Some("shared_fs")
        && let Some(folder) = folder
    {
        // The retention settings stay; only where the files live changes.
        storage["type"] = json!("directory");
        storage["container_path"] = json!(folder);
        if let Some(m) = storage.as_object_mut() {
            m.remove("host_path");
            m.remove("storage_path");
            m.remove("propagation");
        }
    }
    config
}

fn entrypoint(config: &Value) -> Option<Vec<String>> {
    match config.get("entrypoint")? {
        Value::String(s) => Some(vec!["sh".to_owned(), "-c".to_owned(), s.clone()]),
        Value::Array(words) => {
            let words: Vec<String> = words
                .iter()
                .filter_map(Value::as_str)
                .map(str::to_owned)
                .collect();
            (!words.is_empty()).then_some(words)
        }
        _ => None,
    }
}

fn user_env(config: &Value) -> Vec<(String, String)> {
    config
        .pointer("/environment/environment_variables")
        .and_then(Value::as_array)
        .into_iter()
        .flatten()
        .filter_map(Value::as_str)
        .filter_map(|kv| kv.split_once('='))
        .map(|(k, v)| (k.to_owned(), v.to_owned()))
        .collect()
}

fn spawn_logged(
    argv: &[String],
    cwd: &Path,
    env: &[(String, String)],
    log: &Path,
) -> std::io::Result<tokio::process::Child> {
    let out = std::fs::OpenOptions::new()
        .create(true)
        .append(true)
        .open(log)?;
    let err = out.try_clone()?;
    let mut cmd = tokio::process::Command::new(&argv[0]);
    cmd.args(&argv[1..])
        .current_dir(cwd)
        .envs(env.iter().map(|(k, v)| (k.as_str(), v.as_str())))
        .stdin(Stdio::null())
        .stdout(Stdio::from(out))
        .stderr(Stdio::from(err))
        .process_group(0)
        .kill_on_drop(false);
    cmd.spawn()
}

/// Whether an entrypoint runs Python (a Python Core API trial), by its program or shell line.
fn runs_python(argv: &[String]) -> bool {
    let program = argv
        .first()
        .map(|p| {
            Path::new(p)
                .file_name()
                .unwrap_or_default()
                .to_string_lossy()
                .into_owned()
        })
        .unwrap_or_default();
    program.starts_with("python")
        || (program == "sh" && argv.get(2).is_some_and(|line| line.contains("python")))
}

/// A trial that cannot start errors (its log says why); returns the trials its experiment's
/// searcher creates in its place, for the caller to allocate once the state lock is released.
#[must_use]
fn fail_trial(state: &mut MasterState, trial_id: i32, why: &str, log: &Path) -> Vec<i32> {
    let _ = std::fs::write(log, format!("devmaster: {why}\n"));
    let Some(trial) = state.trials.get_mut(&trial_id) else {
        return Vec::new();
    };
    trial.state = State::Error;
    trial.end_time = Some(now_rfc3339());
    crate::searcher::trial_ended(state, trial_id, true)
}

/// Starts allocation `run_id + 1` of a trial: restores the latest checkpoint by the master's
/// rule, writes the environment and info files, and spawns the entrypoint.
///
/// At most one allocation runs per trial: a trial that already has one keeps it (an activate
/// racing an allocation's exit must not start a second beside the one the exit starts). The
/// check and the insert happen under the state lock, as does [`on_exit`]'s removal.
pub(crate) fn allocate(master: &Arc<Master>, trial_id: i32) {
    let mut state = master.state();
    if master.allocs().contains_key(&trial_id) {
        return;
    }
    let Some(trial) = state.trials.get(&trial_id).cloned() else {
        return;
    };
    let Some(exp) = state.experiments.get(&trial.experiment_id).cloned() else {
        return;
    };
    // Only an active trial of an active experiment runs: a pause or kill that landed between an
    // exit's decision and this call wins.
    if exp.state != State::Active || trial.state != State::Active {
        return;
    }
    let run_id = trial.run_id + 1;
    let allocation_id = format!("{}.{run_id}", trial.task_id);
    let work_dir = master.config.state_dir.join("work").join(&allocation_id);
    let log = master
        .config
        .state_dir
        .join("logs")
        .join(format!("{}.log", trial.task_id));
    let _ = std::fs::create_dir_all(log.parent().unwrap_or(Path::new(".")));
    let config = trial_config(&exp.config);
    let Some(argv) = entrypoint(&config) else {
        return fail_and_go_on(
            master,
            state,
            trial_id,
            "the config has no entrypoint",
            &log,
        );
    };
    if let InfoView::Unavailable(why) = &master.info_view
        && runs_python(&argv)
    {
        return fail_and_go_on(master, state, trial_id, why, &log);
    }
    // With one shared info folder, a trial waits (active, unallocated) for the one holding it.
    if !master.info_view.take_turn(trial_id) {
        return;
    }
    let latest = state.latest_checkpoint(trial_id).map(|c| {
        (
            c.checkpoint.uuid.clone(),
            c.checkpoint.steps_completed().unwrap_or(0),
        )
    });
    let user_token = random_hex(24);
    state.add_trial_session(
        &user_token,
        "determined",
        crate::state::TrialScope {
            trial_id,
            allocation_id: allocation_id.clone(),
        },
    );
    // States saved before the values were kept draw them now, as at create.
    let hparams = if trial.hparams.is_null() {
        crate::hparams::sample(
            config.get("hyperparameters").unwrap_or(&Value::Null),
            trial.seed,
        )
        .unwrap_or_default()
    } else {
        trial.hparams.clone()
    };
    let ports = free_ports(master);
    let alloc = Allocation {
        master_url: &master.url,
        cluster_id: &state.cluster_id,
        experiment_id: exp.id,
        trial_id,
        task_id: &trial.task_id,
        allocation_id: &allocation_id,
        run_id,
        seed: trial.seed,
        config: &config,
        steps_completed: latest.as_ref().map_or(0, |l| l.1),
        latest_checkpoint: latest.as_ref().map(|l| l.0.as_str()),
        user_token: &user_token,
        session_token: &user_token,
        work_dir: &work_dir,
        master_cert: master.cert_pem.as_deref(),
        hparams: &hparams,
        // Determined's default is one slot per trial.
        slots: config
            .pointer("/resources/slots_per_trial")
            .and_then(Value::as_u64)
            .map_or(1, |n| u32::try_from(n).unwrap_or(u32::MAX)),
        ports: &ports,
    };
    let own_info = work_dir.join("info");
    let prepared = std::fs::create_dir_all(&work_dir)
        .and_then(|()| crate::context::unpack(&master.config.state_dir, exp.id, &work_dir))
        .and_then(|()| alloc.write_info(&own_info))
        .and_then(|()| match master.info_view.shared_dir() {
            Some(dir) => alloc.write_info(dir),
            None => Ok(()),
        });
    let mut env: Vec<(String, String)> = alloc.env().into_iter().collect();
    env.extend(user_env(&config));
    let argv = master.info_view.wrap(&own_info, argv);
    let child = prepared.and_then(|()| spawn_logged(&argv, &work_dir, &env, &log));
    let mut child = match child {
        Ok(c) => c,
        Err(e) => {
            let why = format!("cannot start {argv:?}: {e}");
            let next = fail_trial(&mut state, trial_id, &why, &log);
            master.persist(state);
            // After the state lock is let go: the next trial's allocation takes it.
            hand_on_turn(master, trial_id);
            allocate_all(master, next);
            return;
        }
    };
    if let Some(t) = state.trials.get_mut(&trial_id) {
        t.run_id = run_id;
        t.allocated = true;
        t.process = child.id().and_then(crate::state::ProcessRef::of);
    }
    let ticket = master.stage(&mut state);
    let (preempt, _) = watch::channel(false);
    master.allocs().insert(
        trial_id,
        Alloc {
            allocation_id,
            run_id,
            preempt,
            ready: false,
            acked: false,
            stopped: false,
            pid: child.id(),
            ports: ports.iter().map(|(_, port)| *port).collect(),
        },
    );
    drop(state);
    master.commit(ticket);
    let master = master.clone();
    tokio::spawn(async move {
        let status = child.wait().await;
        on_exit(&master, trial_id, run_id, status.ok());
    });
}

/// The allocation's ports (`C10D_PORT`, `INTER_TRAIN_PROCESS_COMM_PORT_1`, ...): unique among
/// the live allocations (the caller holds the state lock, so no other allocation picks ports
/// meanwhile); they are free again when the allocation leaves.
fn free_ports(master: &Master) -> Vec<(&'static str, u16)> {
    let taken = master
        .allocs()
        .values()
        .flat_map(|a| a.ports.iter().copied())
        .collect();
    crate::info::unique_ports(&taken)
}

/// A trial that cannot start fails (`why` in its log), and the trials waiting on it go on.
fn fail_and_go_on(
    master: &Arc<Master>,
    mut state: std::sync::MutexGuard<'_, MasterState>,
    trial_id: i32,
    why: &str,
    log: &Path,
) {
    let next = fail_trial(&mut state, trial_id, why, log);
    master.persist(state);
    allocate_all(master, next);
}

/// An allocation ended: decide the trial's fate as the master does.
fn on_exit(master: &Arc<Master>, trial_id: i32, run_id: i32, status: Option<ExitStatus>) {
    let success = status.is_some_and(|s| s.success());
    let (again, created) = {
        // The allocation leaves and its trial's fate is decided under one hold of the state
        // lock, so no activate sees the trial without an allocation before that is decided.
        let mut state = master.state();
        let ended = {
            let mut allocs = master.allocs();
            match allocs.get(&trial_id) {
                Some(a) if a.run_id == run_id => allocs.remove(&trial_id),
                _ => return,
            }
        };
        let Some(ended) = ended else { return };
        // Whatever the allocation left running in its group (a helper) goes with it before its
        // exit is recorded (what `train` started in groups of its own, a reward function or a
        // service, ends with it through their watchdogs); its token already acts for nothing.
        if let Some(pid) = ended.pid {
            kill_group(pid);
        }
        let (acked, stopped) = (ended.acked, ended.stopped);
        let Some(trial) = state.trials.get(&trial_id).cloned() else {
            return;
        };
        let Some(exp) = state.experiments.get(&trial.experiment_id).cloned() else {
            return;
        };
        // `max_restarts` counts the restarts of all the experiment's trials, as upstream.
        let restarted: i32 = state.trials_of(exp.id).map(|t| t.restarts).sum();
        let (trial_state, restarts, again) = match exp.state {
            State::StoppingKilled | State::StoppingCanceled => {
                (State::Canceled, trial.restarts, false)
            }
            // The searcher has no more work (the Core API acks "out of ops" then exits 0).
            _ if success && trial.searcher_completed => (State::Completed, trial.restarts, false),
            // Out of operations while its searcher decides (adaptive_asha's rungs; the Core API
            // acknowledges that as a preemption): it waits, and is allocated once promoted.
            _ if success && trial.op_length.is_some() && trial.op_done => {
                (trial.state, trial.restarts, false)
            }
            // Preempted and acknowledged: resumable; it runs again only if still active.
            _ if acked => (trial.state, trial.restarts, exp.state == State::Active),
            // Promoted while it was exiting: it runs again for its new operation.
            _ if success && trial.op_length.is_some() => {
                (trial.state, trial.restarts, exp.state == State::Active)
            }
            _ if success => (State::Completed, trial.restarts, false),
            // The master stopped it (a pause): no failure and no restart, whatever its exit. It
            // runs again if an activate came first (its own allocation skipped this trial).
            _ if stopped => (trial.state, trial.restarts, exp.state == State::Active),
            State::Paused => (State::Paused, trial.restarts + 1, false),
            _ if restarted < exp.max_restarts => (State::Active, trial.restarts + 1, true),
            _ => (State::Error, trial.restarts + 1, false),
        };
        if let Some(t) = state.trials.get_mut(&trial_id) {
            t.allocated = false;
            t.process = None;
            t.state = trial_state;
            t.restarts = restarts;
            if trial_state.is_terminal() {
                t.end_time = Some(now_rfc3339());
            }
        }
        let created =
            crate::searcher::trial_ended(&mut state, trial_id, trial_state == State::Error);
        let exp_state = state
            .experiments
            .get(&exp.id)
            .map_or(exp.state, |e| e.state);
        let collected = if exp_state.is_terminal() {
            crate::gc::collect(
                &mut state,
                exp.id,
                &exp.config,
                storage_dir(&exp.config).as_deref(),
            )
        } else {
            Vec::new()
        };
        master.persist(state);
        for folder in collected {
            if let Err(e) = std::fs::remove_dir_all(&folder)
                && e.kind() != std::io::ErrorKind::NotFound
            {
                tracing::warn!(
                    "devmaster: checkpoint GC could not delete {}: {e}",
                    folder.display()
                );
            }
        }
        (again, created)
    };
    if again {
        allocate(master, trial_id);
    } else {
        hand_on_turn(master, trial_id);
    }
    allocate_all(master, created);
}

/// Allocates each of `trials` (trials a searcher just created).
fn allocate_all(master: &Arc<Master>, trials: Vec<i32>) {
    for trial in trials {
        allocate(master, trial);
    }
}

/// `trial_id` will not run again now: the trials waiting for the shared info folder it held
/// get their turn (the first still active takes it; the others queue again).
fn hand_on_turn(master: &Arc<Master>, trial_id: i32) {
    for next in master.info_view.end_turn(trial_id) {
        let runnable = master
            .state()
            .trials
            .get(&next)
            .is_some_and(|t| t.state == State::Active && !t.allocated);
        if runnable {
            allocate(master, next);
        }
    }
}

/// Marks an allocation ready (it made a Core API call); returns its trial and run id.
pub(crate) fn touch_allocation(
    master: &Master,
    allocation_id: &str,
) -> Option<(i32, watch::Receiver<bool>)> {
    let mut allocs = master.allocs();
    let (trial, alloc) = allocs
        .iter_mut()
        .find(|(_, a)| a.allocation_id == allocation_id)?;
    alloc.ready = true;
    Some((*trial, alloc.preempt.subscribe()))
}

/// Asks a trial's allocation to stop: preempt if ready (killed after the deadline), kill
/// otherwise. `force` kills at once.
pub(crate) fn stop_allocation(master: &Arc<Master>, trial_id: i32, force: bool) {
    let (pid, preempted, run_id) = {
        let mut allocs = master.allocs();
        let Some(a) = allocs.get_mut(&trial_id) else {
            return;
        };
        a.stopped = true;
        if a.ready && !force {
            a.preempt.send_replace(true);
            (a.pid, true, a.run_id)
        } else {
            (a.pid, false, a.run_id)
        }
    };
    if !preempted {
        if let Some(pid) = pid {
            kill_group(pid);
        }
        return;
    }
    let master = master.clone();
    let deadline = master.config.preemption_timeout;
    tokio::spawn(async move {
        tokio::time::sleep(deadline).await;
        let pid = master
            .allocs()
            .get(&trial_id)
            .filter(|a| a.run_id == run_id)
            .and_then(|a| a.pid);
        if let Some(pid) = pid {
            kill_group(pid);
        }
    });
}

/// Starts a command: a child process in its own work folder, logs captured.
pub(crate) fn start_command(
    master: &Arc<Master>,
    config: Value,
    workspace_id: i32,
) -> Result<CommandRec, String> {
    let Some(argv) = entrypoint(&config).map(|argv| {
        // `det cmd run a b` sends a list; a single argument runs through the shell.
        if argv.len() == 1 {
            vec!["sh".to_owned(), "-c".to_owned(), argv[0].clone()]
        } else {
            argv
        }
    }) else {
        return Err("the command config has no non-empty entrypoint".to_owned());
    };
    let mut state = master.state();
    // Command ids are UUIDs: `det cmd describe/logs` expand anything else as a prefix.
    let id = crate::info::uuid4();
    let dir: PathBuf = master.config.state_dir.join("commands").join(&id);
    let log = dir.join("output.log");
    std::fs::create_dir_all(&dir).map_err(|e| e.to_string())?;
    let mut env = user_env(&config);
    env.push(("DET_MASTER".to_owned(), master.url.clone()));
    env.push(("DET_TASK_ID".to_owned(), id.clone()));
    env.push(("DET_TASK_TYPE".to_owned(), "COMMAND".to_owned()));
    let mut child =
        spawn_logged(&argv, &dir, &env, &log).map_err(|e| format!("cannot start {argv:?}: {e}"))?;
    let rec = CommandRec {
        id: id.clone(),
        description: config
            .get("description")
            .and_then(Value::as_str)
            .map_or_else(|| format!("Command ({id})"), str::to_owned),
        config,
        state: TaskState::Running,
        exit_status: None,
        start_time: now_rfc3339(),
        workspace_id,
        log_path: log,
    };
    state.commands.insert(id.clone(), rec.clone());
    master.persist(state);
    if let Some(pid) = child.id() {
        master
            .command_pids
            .lock()
            .unwrap_or_else(std::sync::PoisonError::into_inner)
            .insert(id.clone(), pid);
    }
    let master = master.clone();
    tokio::spawn(async move {
        let status = child.wait().await.ok();
        master
            .command_pids
            .lock()
            .unwrap_or_else(std::sync::PoisonError::into_inner)
            .remove(&id);
        let mut state = master.state();
        if let Some(cmd) = state.commands.get_mut(&id) {
            cmd.state = TaskState::Terminated;
            cmd.exit_status = Some(match status.and_then(|s| s.code()) {
                Some(code) => code.to_string(),
                None => "killed".to_owned(),
            });
        }
        master.persist(state);
    });
    Ok(rec)
}
