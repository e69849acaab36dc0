//! The trial's identity: from the info files (`cluster.json`, `trial.json`, typed in
//! `hr_det::task_info`) in `HR_DET_INFO_DIR` or `/run/determined/info`, else from the `DET_*`
//! environment.

use std::path::{Path, PathBuf};

use hr_det::task_info::{
    CLUSTER_FILE, ClusterInfoFile, INFO_DIR, RENDEZVOUS_FILE, RendezvousInfoFile, TRIAL_FILE,
    TrialInfoFile, env,
};
use serde::de::DeserializeOwned;
use serde_json::Value;

use crate::CoreError;

/// What a trial knows about itself.
#[derive(Clone, PartialEq)]
pub struct TrialInfo {
    /// The master URL.
    pub master_url: String,
    /// Task id.
    pub task_id: String,
    /// Allocation id (`<task>.<run>`).
    pub allocation_id: String,
    /// Trial id.
    pub trial_id: i32,
    /// Experiment id.
    pub experiment_id: i32,
    /// This allocation's run id.
    pub trial_run_id: i32,
    /// The trial seed.
    pub trial_seed: u64,
    /// Steps completed by the checkpoint restored (0 when fresh).
    pub steps_completed: u64,
    /// The scheduler-selected checkpoint to restore, if any.
    pub latest_checkpoint: Option<String>,
    /// The experiment config (with defaults).
    pub config: Value,
    /// Hyperparameters.
    pub hparams: Value,
    /// The cluster id (`DET_CLUSTER_ID`), inside a Determined trial.
    pub cluster_id: Option<String>,
    /// The master's certificate file (or `noverify`) on a TLS master: the cluster file's
    /// `master_cert_file`, else `DET_MASTER_CERT_FILE`.
    pub master_cert_file: Option<String>,
    /// The name the master's certificate is checked against: `master_cert_name`, else
    /// `DET_MASTER_CERT_NAME`.
    pub master_cert_name: Option<String>,
    /// This container's slots (GPUs): `slot_ids`, else `DET_SLOT_IDS`; none on a CPU.
    pub slot_ids: Vec<i32>,
    /// The containers running the trial and their slots in all (`rendezvous.json`'s addresses
    /// and `container_slot_counts`; without the file, one container with `slot_ids`).
    pub containers: (usize, usize),
    pub(crate) user_token: Option<String>,
}

impl std::fmt::Debug for TrialInfo {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("TrialInfo")
            .field("master_url", &self.master_url)
            .field("allocation_id", &self.allocation_id)
            .field("trial_id", &self.trial_id)
            .field("experiment_id", &self.experiment_id)
            .field("trial_run_id", &self.trial_run_id)
            .field("steps_completed", &self.steps_completed)
            .field("latest_checkpoint", &self.latest_checkpoint)
            .field("slot_ids", &self.slot_ids)
            .field("containers", &self.containers)
            .field(
                "user_token",
                &self.user_token.as_ref().map(|_| "<redacted>"),
            )
            .finish_non_exhaustive()
    }
}

/// The info folder: `HR_DET_INFO_DIR`, else `/run/determined/info`.
pub(crate) fn info_dir() -> PathBuf {
    std::env::var_os(env::HR_INFO_DIR).map_or_else(|| PathBuf::from(INFO_DIR), PathBuf::from)
}

/// An info file, `None` when absent; one that does not parse is an error naming it.
pub(crate) fn read_file<T: DeserializeOwned>(path: &Path) -> Result<Option<T>, CoreError> {
    match std::fs::read(path) {
        Ok(bytes) => serde_json::from_slice(&bytes).map(Some).map_err(|e| {
            CoreError::Environment(format!(
                "{} is not a Determined info file: {e}",
                path.display()
            ))
        }),
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => Ok(None),
        Err(e) => Err(hr_files::IoError::new("read", path, e).into()),
    }
}

fn var(name: &str) -> Result<String, CoreError> {
    std::env::var(name).map_err(|_| CoreError::Environment(format!("{name} is not set")))
}

fn num<T: std::str::FromStr>(name: &str) -> Result<T, CoreError> {
    let text = var(name)?;
    text.parse()
        .map_err(|_| CoreError::Environment(format!("{name}={text:?} is not a number")))
}

fn json(name: &str) -> Result<Value, CoreError> {
    serde_json::from_str(&var(name)?).map_err(|e| CoreError::Environment(format!("{name}: {e}")))
}

impl TrialInfo {
    /// Reads the trial's info from `dir`'s `cluster.json` and `trial.json`, or, without them,
    /// from the `DET_*` environment.
    pub fn from_environment_in(dir: &Path) -> Result<Self, CoreError> {
        let user_token = std::env::var(env::USER_TOKEN)
            .ok()
            .filter(|t| !t.is_empty());
        let set = |name: &str| std::env::var(name).ok().filter(|v| !v.is_empty());
        let files = (
            read_file::<ClusterInfoFile>(&dir.join(CLUSTER_FILE))?,
            read_file::<TrialInfoFile>(&dir.join(TRIAL_FILE))?,
        );
        let rendezvous = read_file::<RendezvousInfoFile>(&dir.join(RENDEZVOUS_FILE))?;
        if let (Some(cluster), Some(trial)) = files {
            let steps = u64::try_from(trial.steps_completed).map_err(|_| {
                CoreError::Environment(format!(
                    "{TRIAL_FILE}: steps_completed {} is negative",
                    trial.steps_completed
                ))
            })?;
            return Ok(Self {
                master_url: cluster.master_url,
                task_id: cluster.task_id,
                allocation_id: cluster.allocation_id,
                trial_id: trial.trial_id,
                experiment_id: trial.experiment_id,
                trial_run_id: trial.trial_run_id,
                trial_seed: u64::from(trial.trial_seed),
                steps_completed: steps,
                latest_checkpoint: cluster.latest_checkpoint.filter(|s| !s.is_empty()),
                hparams: trial.hparams,
                config: trial.config,
                cluster_id: Some(cluster.cluster_id).filter(|c| !c.is_empty()),
                master_cert_file: cluster
                    .master_cert_file
                    .filter(|f| !f.is_empty())
                    .or_else(|| set(hr_det::CERT_FILE_VAR)),
                master_cert_name: cluster
                    .master_cert_name
                    .filter(|n| !n.is_empty())
                    .or_else(|| set(hr_det::CERT_NAME_VAR)),
                containers: containers(rendezvous.as_ref(), &cluster.slot_ids),
                slot_ids: cluster.slot_ids,
                user_token,
            });
        }
        let config = json(env::EXPERIMENT_CONFIG)?;
        let slot_ids: Vec<i32> = match set(env::SLOT_IDS) {
            Some(_) => serde_json::from_value(json(env::SLOT_IDS)?)
                .map_err(|e| CoreError::Environment(format!("{}: {e}", env::SLOT_IDS)))?,
            None => Vec::new(),
        };
        Ok(Self {
            master_url: var(env::MASTER)?,
            task_id: var(env::TASK_ID)?,
            allocation_id: var(env::ALLOCATION_ID)?,
            trial_id: num(env::TRIAL_ID)?,
            experiment_id: num(env::EXPERIMENT_ID)?,
            trial_run_id: num(env::TRIAL_RUN_ID)?,
            trial_seed: num(env::TRIAL_SEED)?,
            steps_completed: num(env::STEPS_COMPLETED)?,
            latest_checkpoint: std::env::var(env::LATEST_CHECKPOINT)
                .ok()
                .filter(|s| !s.is_empty()),
            hparams: json(env::HPARAMS)
                .unwrap_or_else(|_| config.get("hyperparameters").cloned().unwrap_or_default()),
            cluster_id: std::env::var(env::CLUSTER_ID)
                .ok()
                .filter(|c| !c.is_empty()),
            config,
            master_cert_file: set(hr_det::CERT_FILE_VAR),
            master_cert_name: set(hr_det::CERT_NAME_VAR),
            containers: containers(rendezvous.as_ref(), &slot_ids),
            slot_ids,
            user_token,
        })
    }

    /// Refuses a trial whose slots are not `ranks` ranks' devices: alone (`ranks` 1), a Rust
    /// trial trains on one device, so any other slot would sit reserved and idle (Python's
    /// `core.init` refuses this case too, without a distributed context); started as one rank per
    /// slot by a launcher, every slot must have its rank.
    pub fn check_ranks(&self, ranks: usize) -> Result<(), CoreError> {
        let (containers, slots) = self.containers;
        if ranks <= 1 && (self.slot_ids.len() > 1 || containers > 1) {
            return Err(CoreError::Environment(format!(
                "this trial was given {slots} slots in {containers} container(s) \
                 (resources.slots_per_trial), but it runs as one process on one device: the rest \
                 would be held and left idle. Set resources.slots_per_trial: 1 (0 for the CPU), \
                 or start a rank per slot with a launcher (`hessian-recipes launch --` or \
                 Determined's torch_distributed before the command) and a plan whose \
                 parallel.shards the slots divide"
            )));
        }
        if ranks > 1 && slots != ranks {
            return Err(CoreError::Environment(format!(
                "this trial was given {slots} slots (resources.slots_per_trial) but started \
                 {ranks} ranks (WORLD_SIZE): a launcher starts one rank per slot"
            )));
        }
        Ok(())
    }
}

/// The containers and their slots in all: from the rendezvous where there is one, else this
/// container alone.
fn containers(rendezvous: Option<&RendezvousInfoFile>, slot_ids: &[i32]) -> (usize, usize) {
    match rendezvous {
        Some(r) => (
            r.container_addrs.len().max(1),
            r.container_slot_counts
                .iter()
                .map(|n| usize::try_from(*n).unwrap_or(0))
                .sum::<usize>()
                .max(slot_ids.len()),
        ),
        None => (1, slot_ids.len()),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_trial_on_more_than_one_slot_or_container_is_refused_counting_every_slot() {
        let trial = |slot_ids: Vec<i32>, rendezvous: Option<RendezvousInfoFile>| TrialInfo {
            master_url: String::new(),
            task_id: "t".into(),
            allocation_id: "t.1".into(),
            trial_id: 1,
            experiment_id: 1,
            trial_run_id: 1,
            trial_seed: 0,
            steps_completed: 0,
            latest_checkpoint: None,
            config: Value::Null,
            hparams: Value::Null,
            cluster_id: None,
            master_cert_file: None,
            master_cert_name: None,
            containers: containers(rendezvous.as_ref(), &slot_ids),
            slot_ids,
            user_token: None,
        };
        assert!(trial(vec![], None).check_ranks(1).is_ok(), "the CPU");
        assert!(trial(vec![0], None).check_ranks(1).is_ok(), "one GPU");
        assert!(trial(vec![0, 1], None).check_ranks(2).is_ok(), "two ranks");
        let err = trial(vec![0, 1], None)
            .check_ranks(4)
            .expect_err("ranks for slots");
        assert!(
            err.to_string().contains("2 slots") && err.to_string().contains("4 ranks"),
            "{err}"
        );
        let err = trial(vec![0, 1], None).check_ranks(1).expect_err("two");
        assert!(
            err.to_string().contains("given 2 slots in 1 container(s)")
                && err.to_string().contains("resources.slots_per_trial: 1"),
            "{err}"
        );
        // Two agents of 8 GPUs each: this container sees its own 8, the rendezvous all 16.
        let two_nodes = RendezvousInfoFile {
            container_addrs: vec!["10.0.0.1".into(), "10.0.0.2".into()],
            container_rank: 0,
            container_slot_counts: vec![8, 8],
        };
        let err = trial((0..8).collect(), Some(two_nodes))
            .check_ranks(1)
            .expect_err("sixteen");
        assert!(
            err.to_string().contains("given 16 slots in 2 container(s)"),
            "{err}"
        );
    }
}
