//! The master every handler shares: its configuration, the durable state behind its lock, the
//! running allocations, and the group-commit persister.

use std::{
    collections::HashMap,
    net::SocketAddr,
    path::PathBuf,
    sync::{
        Mutex, MutexGuard, OnceLock,
        atomic::{AtomicUsize, Ordering},
    },
    time::Duration,
};

use tokio::sync::watch;

use crate::persist::{Persister, Ticket};
use crate::state::{ExperimentRec, MasterState, MetricRec};

/// How to run a devmaster.
#[derive(Debug, Clone)]
pub struct DevmasterConfig {
    /// Listen address: loopback, or any address when a [`DevmasterConfig::password`] is set.
    pub listen: SocketAddr,
    /// Folder for `state.json`, work folders and default checkpoint storage.
    pub state_dir: PathBuf,
    /// How trials find their info files at `/run/determined/info` (the only place the real
    /// Python client reads them): each its own, by default.
    pub trial_info: crate::TrialInfo,
    /// How long a preempted allocation may take to exit before it is killed (upstream: 1 h).
    pub preemption_timeout: Duration,
    /// Append every request (method, path, body; never headers or tokens) to this JSONL file:
    /// how the wire tests' fixtures were captured from the real client.
    pub record_requests: Option<PathBuf>,
    /// The password both users (`determined`, `admin`) sign in with. `None` keeps a fresh
    /// Determined master's empty passwords, which only a loopback master may use; a master on
    /// any other address needs one.
    pub password: Option<String>,
    /// Serve HTTPS with this certificate chain and key (`None`: plain HTTP).
    pub tls: Option<crate::TlsFiles>,
    /// GPU slots a trial may ask for (`resources.slots_per_trial`); a config asking for more is
    /// refused at create. Trials run as processes on this machine whatever they ask for.
    pub slots: u32,
}

/// A running allocation of a trial.
pub(crate) struct Alloc {
    pub(crate) allocation_id: String,
    pub(crate) run_id: i32,
    pub(crate) preempt: watch::Sender<bool>,
    pub(crate) ready: bool,
    pub(crate) acked: bool,
    /// The master asked it to stop (pause, kill, cancel): its exit is no failure of the trial.
    pub(crate) stopped: bool,
    pub(crate) pid: Option<u32>,
    /// Its unique ports ([`crate::info::TRIAL_PORTS`]), free again when it leaves.
    pub(crate) ports: Vec<u16>,
}

/// The queue of failed logins: each waits its turn, and how many wait is known.
#[derive(Default)]
pub(crate) struct FailedLogins {
    turn: tokio::sync::Mutex<()>,
    waiting: AtomicUsize,
}

/// A failed login's place in the queue, held through its delay (counted until dropped, also
/// when its client goes away).
pub(crate) struct Turn<'a> {
    _held: tokio::sync::MutexGuard<'a, ()>,
    _counted: Waiting<'a>,
}

struct Waiting<'a>(&'a AtomicUsize);

impl Drop for Waiting<'_> {
    fn drop(&mut self) {
        self.0.fetch_sub(1, Ordering::SeqCst);
    }
}

impl FailedLogins {
    /// How many failed logins wait now.
    pub(crate) fn waiting(&self) -> usize {
        self.waiting.load(Ordering::SeqCst)
    }

    /// Joins the queue and waits for this failure's turn.
    pub(crate) async fn turn(&self) -> Turn<'_> {
        self.waiting.fetch_add(1, Ordering::SeqCst);
        let counted = Waiting(&self.waiting);
        Turn {
            _held: self.turn.lock().await,
            _counted: counted,
        }
    }
}

/// The shared master.
pub(crate) struct Master {
    pub(crate) config: DevmasterConfig,
    pub(crate) url: String,
    /// The certificate chain it serves (PEM), handed to its trials as `master.crt`.
    pub(crate) cert_pem: Option<Vec<u8>>,
    /// How its trials see their info files.
    pub(crate) info_view: crate::trial_info::InfoView,
    state: Mutex<MasterState>,
    pub(crate) allocs: Mutex<HashMap<i32, Alloc>>,
    /// Running command processes: id -> pid (process group leader).
    pub(crate) command_pids: Mutex<HashMap<String, u32>>,
    /// Held through one experiment action (pause, activate, kill, cancel), so concurrent clicks
    /// apply one after another: each reads the state the previous one left.
    pub(crate) transitions: Mutex<()>,
    /// Failed logins waiting out their delay, one at a time.
    pub(crate) failed_logins: FailedLogins,
    /// Why the master stopped serving (its state could not be persisted), once it has.
    failed: OnceLock<String>,
    persister: Persister,
}

impl Master {
    /// A master serving at `url` with the recovered `state`.
    pub(crate) fn new(
        config: DevmasterConfig,
        url: String,
        state: MasterState,
        persister: Persister,
        cert_pem: Option<Vec<u8>>,
        info_view: crate::trial_info::InfoView,
    ) -> Self {
        Self {
            config,
            url,
            cert_pem,
            info_view,
            state: Mutex::new(state),
            allocs: Mutex::new(HashMap::new()),
            command_pids: Mutex::new(HashMap::new()),
            transitions: Mutex::new(()),
            failed_logins: FailedLogins::default(),
            failed: OnceLock::new(),
            persister,
        }
    }

    /// Locks the state.
    pub(crate) fn state(&self) -> MutexGuard<'_, MasterState> {
        self.state
            .lock()
            .unwrap_or_else(std::sync::PoisonError::into_inner)
    }

    /// Locks the allocations.
    pub(crate) fn allocs(&self) -> MutexGuard<'_, HashMap<i32, Alloc>> {
        self.allocs
            .lock()
            .unwrap_or_else(std::sync::PoisonError::into_inner)
    }

    /// Stages the state after a change (call with the lock held), first dropping the sessions of
    /// allocations that ended; [`Master::commit`] the ticket once the lock is released.
    pub(crate) fn stage(&self, state: &mut MasterState) -> Option<Ticket> {
        state.prune_trial_sessions();
        self.staged(self.persister.stage_state(state))
    }

    /// Stages a new experiment's config file (call with the lock held, before staging the
    /// state that lists the experiment: the same commit writes both, the file first).
    pub(crate) fn stage_experiment(&self, rec: &ExperimentRec) {
        if let Err(e) = self.persister.stage_experiment(rec) {
            self.fail(&e);
        }
    }

    /// Stages a metrics record just pushed (call with the lock held).
    pub(crate) fn stage_metric(&self, rec: &MetricRec) -> Option<Ticket> {
        self.staged(self.persister.stage_metric(rec))
    }

    fn staged(&self, staged: std::io::Result<Ticket>) -> Option<Ticket> {
        staged.map_err(|e| self.fail(&e)).ok()
    }

    /// Returns once a staged change is durable. When that fails (the state folder is gone or
    /// full) the master fails closed: from then on every request, the current one included, is
    /// answered 503, and `hessian-recipes devmaster` exits.
    pub(crate) fn commit(&self, ticket: Option<Ticket>) {
        if let Some(t) = ticket
            && let Err(e) = self.persister.commit(&t)
        {
            self.fail(&e);
        }
    }

    /// Stages the state, releases the lock, and commits.
    pub(crate) fn persist(&self, mut state: MutexGuard<'_, MasterState>) {
        let ticket = self.stage(&mut state);
        drop(state);
        self.commit(ticket);
    }

    fn fail(&self, e: &std::io::Error) {
        let why = format!(
            "cannot persist its state to {}: {e}",
            self.config.state_dir.display()
        );
        tracing::error!("devmaster: {why}; refusing every request from now on");
        let _ = self.failed.set(why);
    }

    /// Why the master stopped serving, if it has.
    pub(crate) fn failure(&self) -> Option<String> {
        self.failed.get().cloned()
    }

    /// The port it listens on.
    pub(crate) fn port(&self) -> u16 {
        self.url
            .rsplit(':')
            .next()
            .and_then(|p| p.parse().ok())
            .unwrap_or(0)
    }
}
