//! [`OwnedService`]: one service process group, from spawn to reaped.

use hr_files::{CappedLog, IoResultExt};
use std::{
    io::{Read, Seek, SeekFrom},
    net::TcpListener,
    os::unix::process::{CommandExt, ExitStatusExt},
    path::{Path, PathBuf},
    process::{Child, Command, ExitStatus, Stdio},
    time::{Duration, Instant},
};

use rustix::process::{Pid, Signal, kill_process_group};

use hr_env::{EnvError, GroupWatchdog};

/// How to run a service.
#[derive(Debug, Clone)]
pub struct ServiceSpec {
    /// Name used in errors and logs (e.g. `nemo-gym`, `openenv`).
    pub name: String,
    /// The interpreter (the seed's `--service-python`) or program.
    pub program: PathBuf,
    /// Arguments; `{port}` is replaced by the port the bridge picked.
    pub args: Vec<String>,
    /// Working folder.
    pub cwd: PathBuf,
    /// Extra environment; `{port}` is replaced here too.
    pub env: Vec<(String, String)>,
    /// Log file (appended to; one per run folder).
    pub log_path: PathBuf,
    /// Readiness path polled with GET until it answers 2xx (`/health`, or `/` for NeMo Gym).
    pub ready_path: String,
    /// Total time to become ready.
    pub ready_timeout: Duration,
    /// Time between TERM and KILL at shutdown.
    pub grace: Duration,
    /// Spawn attempts (each on a fresh port) when the child exits before it is ready.
    pub attempts: u32,
    /// Port of the first attempt (tests use it to force a collision); `None` picks a free one.
    pub first_port: Option<u16>,
}

/// A running service, killed with its whole process group on shutdown or drop.
#[derive(Debug)]
pub struct OwnedService {
    name: String,
    child: Option<Child>,
    /// Its stdout and stderr, copied into the log.
    logs: Vec<CappedLog>,
    /// Kills its group if this process ends without stopping it (a SIGKILL).
    _watchdog: GroupWatchdog,
    port: u16,
    log_path: PathBuf,
    grace: Duration,
}

fn free_port() -> std::io::Result<u16> {
    Ok(TcpListener::bind(("127.0.0.1", 0))?.local_addr()?.port())
}

/// The last `lines` lines of a log file.
pub(crate) fn log_tail(path: &Path, lines: usize) -> String {
    let Ok(mut f) = std::fs::File::open(path) else {
        return String::from("(no log)");
    };
    let len = f.metadata().map_or(0, |m| m.len());
    let _ = f.seek(SeekFrom::Start(len.saturating_sub(16 * 1024)));
    let mut text = String::new();
    let _ = f.read_to_string(&mut text);
    let all: Vec<&str> = text.lines().collect();
    all[all.len().saturating_sub(lines)..].join("\n")
}

fn describe(status: ExitStatus) -> String {
    match (status.code(), status.signal()) {
        (Some(code), _) => format!("exit code {code}"),
        (None, Some(sig)) => format!("killed by signal {sig}"),
        _ => status.to_string(),
    }
}

fn signal_group(child: &Child, signal: Signal) {
    if let Some(pid) = i32::try_from(child.id()).ok().and_then(Pid::from_raw) {
        let _ = kill_process_group(pid, signal);
    }
}

impl OwnedService {
    /// Starts the service and waits until it is ready.
    pub fn start(spec: &ServiceSpec) -> Result<Self, EnvError> {
        if let Some(dir) = spec.log_path.parent() {
            std::fs::create_dir_all(dir).at("create", dir)?;
        }
        let mut last_exit = String::new();
        for attempt in 1..=spec.attempts.max(1) {
            let port = match (attempt, spec.first_port) {
                (1, Some(p)) => p,
                _ => free_port().at("pick a port on", "127.0.0.1")?,
            };
            let mut service = Self::spawn(spec, port)?;
            tracing::debug!(service = %spec.name, port, attempt, "started; waiting until ready");
            match service.wait_ready(spec)? {
                None => {
                    tracing::debug!(service = %spec.name, port, "service ready");
                    return Ok(service);
                }
                Some(status) => {
                    tracing::debug!(service = %spec.name, port, %status, "exited before ready");
                    last_exit = status;
                }
            }
        }
        Err(EnvError::EarlyExit {
            service: spec.name.clone(),
            status: last_exit,
            attempts: spec.attempts.max(1),
            log_tail: log_tail(&spec.log_path, 30),
        })
    }

    fn spawn(spec: &ServiceSpec, port: u16) -> Result<Self, EnvError> {
        let fill = |s: &str| s.replace("{port}", &port.to_string());
        let mut child = Command::new(&spec.program)
            .args(spec.args.iter().map(|a| fill(a)))
            .envs(spec.env.iter().map(|(k, v)| (k.clone(), fill(v))))
            .current_dir(&spec.cwd)
            .stdin(Stdio::null())
            .stdout(Stdio::piped())
            .stderr(Stdio::piped())
            .process_group(0)
            .spawn()
            .map_err(|source| EnvError::Spawn {
                service: spec.name.clone(),
                program: spec.program.clone(),
                source,
            })?;
        let watchdog = match GroupWatchdog::spawn(child.id()) {
            Ok(w) => w,
            Err(e) => {
                signal_group(&child, Signal::KILL);
                let _ = child.wait();
                return Err(EnvError::Spawn {
                    service: spec.name.clone(),
                    program: PathBuf::from("sh"),
                    source: e,
                });
            }
        };
        // Both go to the run's log, which stops growing at its bound.
        let mut logs = Vec::new();
        let out = child
            .stdout
            .take()
            .map(|o| Box::new(o) as Box<dyn Read + Send>);
        let err = child
            .stderr
            .take()
            .map(|e| Box::new(e) as Box<dyn Read + Send>);
        for pipe in [out, err].into_iter().flatten() {
            match CappedLog::spawn(pipe, &spec.log_path, hr_files::MAX_SERVICE_LOG_BYTES) {
                Ok(log) => logs.push(log),
                Err(e) => {
                    signal_group(&child, Signal::KILL);
                    let _ = child.wait();
                    return Err(hr_files::IoError::new("open", &spec.log_path, e).into());
                }
            }
        }
        Ok(Self {
            name: spec.name.clone(),
            child: Some(child),
            logs,
            _watchdog: watchdog,
            port,
            log_path: spec.log_path.clone(),
            grace: spec.grace,
        })
    }

    /// Polls readiness; `Ok(None)` when ready, `Ok(Some(status))` when the child exited first.
    fn wait_ready(&mut self, spec: &ServiceSpec) -> Result<Option<String>, EnvError> {
        let start = Instant::now();
        let runtime = crate::http::runtime(&spec.name)?;
        let url = format!("http://127.0.0.1:{}{}", self.port, spec.ready_path);
        loop {
            if let Some(child) = self.child.as_mut()
                && let Ok(Some(status)) = child.try_wait()
            {
                // Reap the rest of its group, then report the early exit for a retry.
                signal_group(child, Signal::KILL);
                self.child = None;
                self.flush_logs();
                return Ok(Some(describe(status)));
            }
            if crate::http::get(&runtime, &url, Duration::from_secs(2))
                .is_ok_and(|(status, _)| (200..300).contains(&status))
            {
                return Ok(None);
            }
            if start.elapsed() >= spec.ready_timeout {
                self.kill_now();
                return Err(EnvError::NotReady {
                    service: spec.name.clone(),
                    waited_s: start.elapsed().as_secs(),
                    log_tail: log_tail(&self.log_path, 30),
                });
            }
            std::thread::sleep(Duration::from_millis(100));
        }
    }

    /// The service's port on 127.0.0.1.
    pub fn port(&self) -> u16 {
        self.port
    }

    /// `http://127.0.0.1:PORT`.
    pub fn base_url(&self) -> String {
        format!("http://127.0.0.1:{}", self.port)
    }

    /// The service's name.
    pub fn name(&self) -> &str {
        &self.name
    }

    /// The process id of the group leader (while running).
    pub fn pid(&self) -> Option<u32> {
        self.child.as_ref().map(Child::id)
    }

    /// Fails with [`EnvError::Died`] (and the log tail) if the service has exited.
    pub fn check_alive(&mut self) -> Result<(), EnvError> {
        let Some(child) = self.child.as_mut() else {
            return Err(EnvError::Died {
                service: self.name.clone(),
                status: "already stopped".into(),
                log_tail: String::new(),
            });
        };
        match child.try_wait() {
            Ok(Some(status)) => {
                signal_group(child, Signal::KILL);
                self.child = None;
                self.flush_logs();
                Err(EnvError::Died {
                    service: self.name.clone(),
                    status: describe(status),
                    log_tail: log_tail(&self.log_path, 30),
                })
            }
            _ => Ok(()),
        }
    }

    /// The end of the service's log.
    pub fn log_tail(&self, lines: usize) -> String {
        log_tail(&self.log_path, lines)
    }

    fn kill_now(&mut self) {
        if let Some(mut child) = self.child.take() {
            signal_group(&child, Signal::KILL);
            let _ = child.wait();
            self.flush_logs();
        }
    }

    /// Waits until what the exited service wrote is in the log (bounded: a process that left
    /// its group and kept the pipe open is not waited for).
    fn flush_logs(&self) {
        for log in &self.logs {
            log.finish(Duration::from_secs(5));
        }
    }

    /// Stops the service: TERM to its process group, the grace period, KILL, reap. An exit by
    /// our own signal (TERM, or 143/130 from a server that re-raises it) is a clean stop.
    pub fn shutdown(mut self) -> Result<(), EnvError> {
        let Some(mut child) = self.child.take() else {
            return Ok(());
        };
        tracing::debug!(service = %self.name, "stopping: TERM to the process group");
        signal_group(&child, Signal::TERM);
        let deadline = Instant::now() + self.grace;
        let status = loop {
            match child.try_wait() {
                Ok(Some(status)) => break status,
                _ if Instant::now() >= deadline => {
                    signal_group(&child, Signal::KILL);
                    break child.wait().at("reap", &self.log_path)?;
                }
                _ => std::thread::sleep(Duration::from_millis(50)),
            }
        };
        // Whatever the leader did, no member of its group may outlive it.
        signal_group(&child, Signal::KILL);
        self.flush_logs();
        let clean = status.success()
            || matches!(status.code(), Some(143 | 130))
            || matches!(status.signal(), Some(15 | 2 | 9));
        if clean {
            Ok(())
        } else {
            Err(EnvError::Died {
                service: self.name.clone(),
                status: describe(status),
                log_tail: log_tail(&self.log_path, 30),
            })
        }
    }
}

impl Drop for OwnedService {
    fn drop(&mut self) {
        self.kill_now();
    }
}
