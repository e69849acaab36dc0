//! What a trial process gets: the `DET_*` environment and the info files
//! (`cluster.json`, `trial.json`, `rendezvous.json`, `resources.json`) the Python client reads.

use std::{
    collections::{BTreeMap, BTreeSet},
    path::Path,
};

use hr_det::task_info::{
    CLUSTER_FILE, ClusterInfoFile, RENDEZVOUS_FILE, RESOURCES_FILE, RendezvousInfoFile,
    ResourcesInfoFile, TRIAL_FILE, TrialInfoFile, env,
};
use serde_json::Value;

/// The agent every devmaster allocation runs on.
const AGENT: &str = "devmaster";
/// The task type of a trial allocation.
const TASK_TYPE: &str = "TRIAL";

/// Random hex from the OS (tokens and ids; not training randomness). Without OS randomness the
/// master stops rather than mint predictable tokens.
pub(crate) fn random_hex(bytes: usize) -> String {
    let mut buf = vec![0u8; bytes];
    if let Err(e) = getrandom::fill(&mut buf) {
        panic!("the OS random source failed ({e}); refusing to mint predictable tokens");
    }
    hex::encode(buf)
}

/// A UUID4 random id.
pub(crate) fn uuid4() -> String {
    uuid::Uuid::new_v4().to_string()
}

/// RFC 3339 UTC time now, with microseconds.
pub(crate) fn now_rfc3339() -> String {
    let d = std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .unwrap_or_default();
    let secs = d.as_secs();
    let (days, rem) = (secs / 86_400, secs % 86_400);
    let (y, m, day) = civil_from_days(i64::try_from(days).unwrap_or(0));
    format!(
        "{y:04}-{m:02}-{day:02}T{:02}:{:02}:{:02}.{:06}Z",
        rem / 3600,
        rem % 3600 / 60,
        rem % 60,
        d.subsec_micros()
    )
}

/// Howard Hinnant's days-to-civil conversion.
fn civil_from_days(z: i64) -> (i64, u32, u32) {
    let z = z + 719_468;
    let era = z.div_euclid(146_097);
    let doe = z.rem_euclid(146_097);
    let yoe = (doe - doe / 1460 + doe / 36_524 - doe / 146_096) / 365;
    let doy = doe - (365 * yoe + yoe / 4 - yoe / 100);
    let mp = (5 * doy + 2) / 153;
    let d = u32::try_from(doy - (153 * mp + 2) / 5 + 1).unwrap_or(1);
    let m = u32::try_from(if mp < 10 { mp + 3 } else { mp - 9 }).unwrap_or(1);
    (era * 400 + yoe + i64::from(m <= 2), m, d)
}

/// Everything describing one trial allocation.
pub(crate) struct Allocation<'a> {
    pub(crate) master_url: &'a str,
    pub(crate) cluster_id: &'a str,
    pub(crate) experiment_id: i32,
    pub(crate) trial_id: i32,
    pub(crate) task_id: &'a str,
    pub(crate) allocation_id: &'a str,
    pub(crate) run_id: i32,
    pub(crate) seed: u32,
    pub(crate) config: &'a Value,
    pub(crate) steps_completed: i64,
    pub(crate) latest_checkpoint: Option<&'a str>,
    pub(crate) user_token: &'a str,
    pub(crate) session_token: &'a str,
    pub(crate) work_dir: &'a Path,
    /// The certificate chain the master serves, when it serves TLS.
    pub(crate) master_cert: Option<&'a [u8]>,
    /// The trial's hyperparameter values.
    pub(crate) hparams: &'a Value,
    /// The slots it was given (`resources.slots_per_trial`), numbered from 0: a multi-slot
    /// trial's launcher starts a worker per slot, as on an agent.
    pub(crate) slots: u32,
    /// Its unique ports, by environment variable ([`TRIAL_PORTS`]).
    pub(crate) ports: &'a [(&'static str, u16)],
}

/// The ports every trial allocation of Determined 0.35 is given, each the lowest free one from
/// its base and unique among the live allocations (`master/pkg/tasks/task_trial.go`,
/// `UniqueExposedPortRequests`; `master/internal/portregistry`): distributed launchers take
/// their rendezvous and SSH ports from them, so two trials on one machine do not collide.
pub(crate) const TRIAL_PORTS: [(&str, u16); 4] = [
    ("DTRAIN_SSH_PORT", 12350),
    ("INTER_TRAIN_PROCESS_COMM_PORT_1", 12360),
    ("INTER_TRAIN_PROCESS_COMM_PORT_2", 12365),
    ("C10D_PORT", 29400),
];

/// One port per [`TRIAL_PORTS`] entry, each the lowest from its base that `taken` (the live
/// allocations' ports) and the earlier entries leave free, as Determined's registry hands them.
/// The entries are served in a fixed order (Determined walks a Go map, in no set order), so once
/// the ranges meet (six live allocations) a port may differ from the one Determined would pick,
/// never its uniqueness. The ranges end at 65535 only after tens of thousands of live
/// allocations; `base` is then handed out again.
pub(crate) fn unique_ports(taken: &BTreeSet<u16>) -> Vec<(&'static str, u16)> {
    let mut used = taken.clone();
    TRIAL_PORTS
        .iter()
        .map(|&(name, base)| {
            let port = (base..=u16::MAX)
                .find(|p| !used.contains(p))
                .unwrap_or(base);
            used.insert(port);
            (name, port)
        })
        .collect()
}

/// The master's certificate beside the info files, as a container gets it.
pub(crate) const CERT_FILE: &str = "master.crt";

impl Allocation<'_> {
    /// The `DET_*` environment (plus `HR_DET_INFO_DIR` for our own Core API).
    pub(crate) fn env(&self) -> BTreeMap<String, String> {
        let allocation = self.allocation_id;
        let mut env: BTreeMap<String, String> = [
            (env::MASTER, self.master_url.to_owned()),
            (env::CLUSTER_ID, self.cluster_id.to_owned()),
            (env::MASTER_ID, self.cluster_id.to_owned()),
            (env::AGENT_ID, AGENT.to_owned()),
            (
                env::SLOT_IDS,
                serde_json::to_string(&self.slot_ids()).unwrap_or_default(),
            ),
            (env::TASK_ID, self.task_id.to_owned()),
            (env::ALLOCATION_ID, allocation.to_owned()),
            (env::RESOURCES_ID, format!("{allocation}.0")),
            (env::CONTAINER_ID, format!("{allocation}.0")),
            (env::SESSION_TOKEN, self.session_token.to_owned()),
            (env::USER, "determined".to_owned()),
            (env::USER_TOKEN, self.user_token.to_owned()),
            (env::TASK_TYPE, TASK_TYPE.to_owned()),
            (env::RESOURCES_TYPE, "devmaster-process".to_owned()),
            (env::EXPERIMENT_ID, self.experiment_id.to_string()),
            (env::TRIAL_ID, self.trial_id.to_string()),
            (env::TRIAL_RUN_ID, self.run_id.to_string()),
            (env::TRIAL_SEED, self.seed.to_string()),
            (env::EXPERIMENT_CONFIG, self.config.to_string()),
            (env::HPARAMS, self.hparams.to_string()),
            (env::STEPS_COMPLETED, self.steps_completed.to_string()),
            (env::WORKDIR, self.work_dir.display().to_string()),
            (env::RUN_DIR, self.work_dir.display().to_string()),
            (env::USE_TLS, self.master_cert.is_some().to_string()),
            (
                env::HR_INFO_DIR,
                self.work_dir.join("info").display().to_string(),
            ),
        ]
        .into_iter()
        .map(|(k, v)| (k.to_owned(), v))
        .collect();
        if let Some(uuid) = self.latest_checkpoint {
            env.insert(env::LATEST_CHECKPOINT.to_owned(), uuid.to_owned());
        }
        for (name, port) in self.ports {
            env.insert((*name).to_owned(), port.to_string());
        }
        if self.master_cert.is_some() {
            let file = self.work_dir.join("info").join(CERT_FILE);
            env.insert(hr_det::CERT_FILE_VAR.to_owned(), file.display().to_string());
        }
        env
    }

    fn slot_ids(&self) -> Vec<i32> {
        (0..i32::try_from(self.slots).unwrap_or(i32::MAX)).collect()
    }

    /// Writes the four info files (and the master's certificate, when it serves TLS) into `dir`.
    pub(crate) fn write_info(&self, dir: &Path) -> std::io::Result<()> {
        std::fs::create_dir_all(dir)?;
        if let Some(pem) = self.master_cert {
            std::fs::write(dir.join(CERT_FILE), pem)?;
        }
        let cluster = ClusterInfoFile {
            master_url: self.master_url.to_owned(),
            cluster_id: self.cluster_id.to_owned(),
            agent_id: AGENT.to_owned(),
            slot_ids: self.slot_ids(),
            task_id: self.task_id.to_owned(),
            allocation_id: self.allocation_id.to_owned(),
            session_token: self.session_token.to_owned(),
            task_type: TASK_TYPE.to_owned(),
            master_cert_name: None,
            master_cert_file: self
                .master_cert
                .map(|_| dir.join(CERT_FILE).display().to_string()),
            latest_checkpoint: self.latest_checkpoint.map(str::to_owned),
        };
        let trial = TrialInfoFile {
            trial_id: self.trial_id,
            experiment_id: self.experiment_id,
            trial_seed: self.seed,
            hparams: self.hparams.clone(),
            config: self.config.clone(),
            steps_completed: self.steps_completed,
            trial_run_id: self.run_id,
            debug: false,
            inter_node_network_interface: None,
        };
        let rendezvous = RendezvousInfoFile {
            container_addrs: vec!["127.0.0.1".to_owned()],
            container_rank: 0,
            container_slot_counts: vec![i32::try_from(self.slots).unwrap_or(i32::MAX)],
        };
        let resources = ResourcesInfoFile {
            gpu_uuids: Vec::new(),
        };
        let json = |v: Result<Vec<u8>, serde_json::Error>| v.map_err(std::io::Error::other);
        for (name, bytes) in [
            (CLUSTER_FILE, json(serde_json::to_vec(&cluster))?),
            (TRIAL_FILE, json(serde_json::to_vec(&trial))?),
            (RENDEZVOUS_FILE, json(serde_json::to_vec(&rendezvous))?),
            (RESOURCES_FILE, json(serde_json::to_vec(&resources))?),
        ] {
            // cluster.json holds the trial's session token: owner-only, like a key file.
            use std::io::Write;
            use std::os::unix::fs::{OpenOptionsExt, PermissionsExt};
            let path = dir.join(name);
            let mut file = std::fs::OpenOptions::new()
                .write(true)
                .create(true)
                .truncate(true)
                .mode(0o600)
                .open(&path)?;
            // An existing file keeps its mode on open: set it.
            file.set_permissions(std::fs::Permissions::from_mode(0o600))?;
            file.write_all(&bytes)?;
        }
        Ok(())
    }
}

#[cfg(test)]
mod tests {
    #[test]
    fn civil_dates_are_right() {
        assert_eq!(super::civil_from_days(0), (1970, 1, 1));
        assert_eq!(super::civil_from_days(20_789), (2026, 12, 2));
        assert_eq!(super::civil_from_days(11_016), (2000, 2, 29));
    }

    #[test]
    fn info_files_are_owner_only() {
        use std::os::unix::fs::PermissionsExt;
        let dir = tempfile::tempdir().expect("tempdir");
        std::fs::write(dir.path().join("cluster.json"), "{}").expect("an older, open file");
        std::fs::set_permissions(
            dir.path().join("cluster.json"),
            std::fs::Permissions::from_mode(0o644),
        )
        .expect("chmod");
        let config = serde_json::json!({});
        let info = super::Allocation {
            master_url: "http://127.0.0.1:1",
            cluster_id: "c",
            experiment_id: 1,
            trial_id: 1,
            task_id: "t",
            allocation_id: "a",
            run_id: 1,
            seed: 0,
            config: &config,
            steps_completed: 0,
            latest_checkpoint: None,
            user_token: "u",
            session_token: "s",
            work_dir: dir.path(),
            master_cert: None,
            hparams: &serde_json::json!({}),
            slots: 2,
            ports: &super::unique_ports(&std::collections::BTreeSet::from([12350, 12351, 29400])),
        };
        info.write_info(dir.path()).expect("write");
        // Each slot is numbered, in the environment, the cluster info and the rendezvous.
        assert_eq!(info.env()["DET_SLOT_IDS"], "[0,1]");
        // Where the ranges meet, the next free port past the other range's.
        let crowded = super::unique_ports(&(12350..12365).collect());
        assert_eq!(crowded[0], ("DTRAIN_SSH_PORT", 12365));
        assert_eq!(crowded[1], ("INTER_TRAIN_PROCESS_COMM_PORT_1", 12366));
        assert_eq!(crowded[2], ("INTER_TRAIN_PROCESS_COMM_PORT_2", 12367));
        // The lowest ports the live allocations leave free, from each base.
        for (name, port) in [
            ("DTRAIN_SSH_PORT", "12352"),
            ("INTER_TRAIN_PROCESS_COMM_PORT_1", "12360"),
            ("INTER_TRAIN_PROCESS_COMM_PORT_2", "12365"),
            ("C10D_PORT", "29401"),
        ] {
            assert_eq!(info.env()[name], port, "{name}");
        }
        let cluster: serde_json::Value =
            serde_json::from_slice(&std::fs::read(dir.path().join("cluster.json")).expect("read"))
                .expect("json");
        assert_eq!(cluster["slot_ids"], serde_json::json!([0, 1]));
        let rendezvous: serde_json::Value = serde_json::from_slice(
            &std::fs::read(dir.path().join("rendezvous.json")).expect("read"),
        )
        .expect("json");
        assert_eq!(rendezvous["container_slot_counts"], serde_json::json!([2]));
        for name in [
            "cluster.json",
            "trial.json",
            "rendezvous.json",
            "resources.json",
        ] {
            let mode = std::fs::metadata(dir.path().join(name))
                .expect("file")
                .permissions()
                .mode();
            assert_eq!(mode & 0o777, 0o600, "{name}");
        }
    }

    #[test]
    fn uuids_have_the_uuid4_shape() {
        let u = super::uuid4();
        assert_eq!(u.len(), 36);
        assert_eq!(u.as_bytes()[14], b'4');
    }
}
