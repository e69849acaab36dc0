//! Where a trial finds its info files. The real Python Core API reads only
//! `/run/determined/info`; a container on a Determined agent has its own. Here every allocation
//! runs in a private mount namespace (util-linux `unshare`, with a user namespace when the
//! devmaster is not root) in which its own info folder is bound at `/run/determined/info`, so
//! trials running at once each see their own identity and nothing is written to the host's
//! folder. Where this machine allows no such namespace, the devmaster writes the one shared
//! folder and runs trials one at a time, clearing the folder after each.

use std::{
    collections::VecDeque,
    path::{Path, PathBuf},
    sync::Mutex,
};

use hr_det::task_info::{CLUSTER_FILE, INFO_DIR, RENDEZVOUS_FILE, RESOURCES_FILE, TRIAL_FILE};

/// How trials get their info files (`DevmasterConfig::trial_info`).
#[derive(Debug, Clone, Default)]
pub enum TrialInfo {
    /// Each allocation sees its own folder at `/run/determined/info` (a private mount
    /// namespace); where the machine cannot do that, [`TrialInfo::Shared`] at that path.
    #[default]
    Private,
    /// Every trial's files are written into this one folder, and trials run one at a time.
    Shared(PathBuf),
}

/// What the devmaster found it can do, decided once at start.
#[derive(Debug)]
pub(crate) enum InfoView {
    /// Allocations run through `unshare`, their own folder bound at `/run/determined/info`.
    Namespace { unshare: PathBuf, user: bool },
    /// One folder for all: trials take turns.
    Shared(PathBuf, Mutex<Turns>),
    /// Neither is possible: why (Python trials fail with it; others read `HR_DET_INFO_DIR`).
    Unavailable(String),
}

/// Which trial holds the shared folder, and which wait for it (in order).
#[derive(Debug, Default)]
pub(crate) struct Turns {
    holder: Option<i32>,
    waiting: VecDeque<i32>,
}

/// The shell line run inside the namespace: bind the folder given as `$0`, then run the trial.
const BIND_AND_EXEC: &str = "mount --bind \"$0\" /run/determined/info && exec \"$@\"";

impl InfoView {
    /// Decides how trials get their info files; `scratch` is a folder of the devmaster's own
    /// where the namespace probe may write.
    pub(crate) async fn probe(wanted: &TrialInfo, scratch: &Path) -> Self {
        let shared = |dir: PathBuf| Self::Shared(dir, Mutex::new(Turns::default()));
        if let TrialInfo::Shared(dir) = wanted {
            return shared(dir.clone());
        }
        let target = Path::new(INFO_DIR);
        let root = rustix::process::geteuid().is_root();
        // A container runtime creates the mount point; as root, so does the devmaster (it stays
        // empty: every trial's files are bound over it in the trial's own namespace).
        if root && !target.is_dir() {
            let _ = std::fs::create_dir_all(target);
        }
        if !target.is_dir() {
            return Self::Unavailable(format!(
                "{INFO_DIR} does not exist and this user cannot create it, so a Python Core API \
                 trial cannot find its info files; create it once as root \
                 (`install -d -m 0755 {INFO_DIR}`; it stays empty) and restart the devmaster"
            ));
        }
        let Some(unshare) = find_program("unshare") else {
            return shared(target.to_owned());
        };
        // Root tries a plain mount namespace first; anyone may try a user namespace.
        for user in [false, true].into_iter().filter(|&user| user || root) {
            let view = Self::Namespace {
                unshare: unshare.clone(),
                user,
            };
            if view.works(scratch).await {
                return view;
            }
        }
        shared(target.to_owned())
    }

    /// Whether a probe allocation sees a file of `scratch` at `/run/determined/info`.
    async fn works(&self, scratch: &Path) -> bool {
        let probe = scratch.join("info-probe");
        if std::fs::create_dir_all(&probe)
            .and_then(|()| std::fs::write(probe.join("probe"), b""))
            .is_err()
        {
            return false;
        }
        let argv = self.wrap(
            &probe,
            vec![
                "test".to_owned(),
                "-f".to_owned(),
                format!("{INFO_DIR}/probe"),
            ],
        );
        let ok = tokio::process::Command::new(&argv[0])
            .args(&argv[1..])
            .stdin(std::process::Stdio::null())
            .stdout(std::process::Stdio::null())
            .stderr(std::process::Stdio::null())
            .status()
            .await
            .is_ok_and(|s| s.success());
        let _ = std::fs::remove_dir_all(&probe);
        ok
    }

    /// The command line that runs `argv` with `own` (the allocation's info folder) seen at
    /// `/run/determined/info`; `argv` itself where the files are shared or unavailable.
    pub(crate) fn wrap(&self, own: &Path, argv: Vec<String>) -> Vec<String> {
        let Self::Namespace { unshare, user } = self else {
            return argv;
        };
        let mut line = vec![
            unshare.display().to_string(),
            "--mount".to_owned(),
            "--propagation".to_owned(),
            "private".to_owned(),
        ];
        if *user {
            line.extend(["--user".to_owned(), "--map-root-user".to_owned()]);
        }
        line.extend([
            "/bin/sh".to_owned(),
            "-c".to_owned(),
            BIND_AND_EXEC.to_owned(),
            own.display().to_string(),
        ]);
        line.extend(argv);
        line
    }

    /// One line for the devmaster's start-up output.
    pub(crate) fn describe(&self) -> String {
        match self {
            Self::Namespace { user: false, .. } => {
                format!("trials: each sees its own {INFO_DIR} (a private mount namespace)")
            }
            Self::Namespace { user: true, .. } => format!(
                "trials: each sees its own {INFO_DIR} (a private user and mount namespace; the \
                 trial runs as root inside it, as the invoking user outside)"
            ),
            Self::Shared(dir, _) => format!(
                "trials: this machine allows no private mount namespace (util-linux `unshare` \
                 missing, or namespaces not permitted), so every trial's info files go to {} and \
                 trials run one at a time",
                dir.display()
            ),
            Self::Unavailable(why) => format!("trials: {why}"),
        }
    }

    /// Whether `trial` may start now. With a shared folder it takes the folder if free, or
    /// queues (once) and must wait; otherwise always.
    pub(crate) fn take_turn(&self, trial: i32) -> bool {
        let Self::Shared(_, turns) = self else {
            return true;
        };
        let mut turns = lock(turns);
        match turns.holder {
            None => {
                turns.holder = Some(trial);
                true
            }
            Some(h) if h == trial => true,
            Some(_) => {
                if !turns.waiting.contains(&trial) {
                    turns.waiting.push_back(trial);
                }
                false
            }
        }
    }

    /// `trial`'s allocation ended and it will not run again now: frees the shared folder
    /// (clearing its files) and returns the trials waiting for it, in order; the caller
    /// allocates them (the first that still may run takes the folder).
    pub(crate) fn end_turn(&self, trial: i32) -> Vec<i32> {
        let Self::Shared(dir, turns) = self else {
            return Vec::new();
        };
        let mut turns = lock(turns);
        turns.waiting.retain(|&t| t != trial);
        if turns.holder != Some(trial) {
            return Vec::new();
        }
        turns.holder = None;
        clear(dir);
        turns.waiting.drain(..).collect()
    }

    /// Where the devmaster writes a trial's files besides its own work folder.
    pub(crate) fn shared_dir(&self) -> Option<&Path> {
        match self {
            Self::Shared(dir, _) => Some(dir),
            _ => None,
        }
    }

    /// At shutdown: the shared folder holds no session of a master that is gone.
    pub(crate) fn clear_shared(&self) {
        if let Some(dir) = self.shared_dir() {
            clear(dir);
        }
    }
}

fn lock(turns: &Mutex<Turns>) -> std::sync::MutexGuard<'_, Turns> {
    turns
        .lock()
        .unwrap_or_else(std::sync::PoisonError::into_inner)
}

/// Removes the info files from `dir`.
fn clear(dir: &Path) {
    for file in [
        CLUSTER_FILE,
        TRIAL_FILE,
        RENDEZVOUS_FILE,
        RESOURCES_FILE,
        crate::info::CERT_FILE,
    ] {
        let _ = std::fs::remove_file(dir.join(file));
    }
}

/// `name` on `PATH`, or in the system folders when `PATH` lacks it.
fn find_program(name: &str) -> Option<PathBuf> {
    let path = std::env::var_os("PATH").unwrap_or_default();
    std::env::split_paths(&path)
        .chain(["/usr/bin", "/bin", "/usr/sbin", "/sbin"].map(PathBuf::from))
        .map(|dir| dir.join(name))
        .find(|p| p.is_file())
}
