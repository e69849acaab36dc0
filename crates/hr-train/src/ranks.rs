//! A run over several ranks, one device each (`parallel.shards` in the plan): the chief (rank 0)
//! runs the lifecycle as one rank does (Core, the run folder, checkpoints); each worker runs
//! [`work`]: it takes the chief's plan and restored state, steps its shards with it, and stops
//! when the chief says so. After every step all ranks compare a digest of their state, so ranks
//! that drifted apart stop the run instead of training on.

use std::collections::BTreeMap;
use std::path::{Path, PathBuf};
use std::time::Duration;

use burn::backend::Autodiff;
use burn::tensor::backend::Backend;
use hr_collective::{Star, World};
use hr_grpo::{Alone, DataCursor, Exchange, GrpoError, NativeState, TaskSampler, Trainer, gather};
use hr_plan::Plan;
use hr_policy::{ChatTokenizer, Execution};
use hr_proof::Device;
use hr_snapshot::Budget;
use sha2::{Digest, Sha256};

use crate::config::load_policy;
use crate::environment::environment;
use crate::faults::{fault_point, kill_self, parallel_fault};
use crate::{TrainError, grpo_config, start};

/// How long ranks wait for each other to start (model loads and service starts included).
const PATIENCE: Duration = Duration::from_secs(600);

/// This process's link to the other ranks of its trial ([`World`]), or none when it runs alone.
pub struct Ranks {
    exchange: Box<dyn Exchange + Send>,
}

impl Ranks {
    /// A run on one device.
    pub fn alone() -> Self {
        Self {
            exchange: Box::new(Alone),
        }
    }

    /// Meets the other ranks of `world`, all started from `build` (the binary's digest: a rank
    /// of another build is refused), waiting up to ten minutes for them to start (the chief
    /// listens on its port, the workers connect). A rank that dies later makes the others fail
    /// at their next exchange.
    pub fn meet(world: &World, build: &str) -> Result<Self, TrainError> {
        let star = Star::connect(world, build, PATIENCE)
            .map_err(|e| TrainError::Ranks(format!("meeting the other ranks: {e}")))?;
        Ok(Self {
            exchange: Box::new(Linked(star)),
        })
    }

    /// The number of ranks.
    pub fn count(&self) -> usize {
        self.exchange.ranks()
    }

    pub(crate) fn exchange(&mut self) -> &mut dyn Exchange {
        self.exchange.as_mut()
    }

    /// The chief's word to the workers before the first step: the plan to run (the trial's
    /// searched values applied) and the state to start from, or `None`: nothing to run.
    pub(crate) fn hand_off(&mut self, handoff: Option<&Handoff>) -> Result<(), TrainError> {
        if self.count() > 1 {
            gather::<Option<Handoff>>(self.exchange(), &handoff)?;
        }
        Ok(())
    }

    /// The chief's decision whether another step runs (`go` on the chief; ignored on a worker),
    /// the same on every rank.
    pub(crate) fn decide(&mut self, go: bool) -> Result<bool, TrainError> {
        if self.count() == 1 {
            return Ok(go);
        }
        Ok(gather(self.exchange(), &go)?
            .first()
            .copied()
            .unwrap_or(false))
    }

    /// Every rank's `mine`, and the first rank whose value differs from the chief's.
    fn disagreeing<T>(&mut self, mine: &T) -> Result<Option<(usize, Vec<T>)>, TrainError>
    where
        T: PartialEq + serde::Serialize + serde::de::DeserializeOwned,
    {
        if self.count() == 1 {
            return Ok(None);
        }
        let all: Vec<T> = gather(self.exchange(), mine)?;
        Ok(all
            .iter()
            .position(|v| *v != all[0])
            .map(|rank| (rank, all)))
    }

    /// Refuses ranks on different devices (their sums round differently): every rank's record
    /// must be the chief's.
    pub(crate) fn check_devices(&mut self, mine: &Device) -> Result<(), TrainError> {
        match self.disagreeing(mine)? {
            None => Ok(()),
            Some((rank, all)) => Err(TrainError::Refused(format!(
                "rank {rank} runs on {} but the chief on {}: ranks on different devices give \
                 different bits; give every rank the same kind of device",
                all[rank], all[0]
            ))),
        }
    }

    /// Refuses to go on when any rank's state after a step differs from the chief's.
    pub(crate) fn check_same(&mut self, step: u64, state: &NativeState) -> Result<(), TrainError> {
        if self.count() == 1 {
            return Ok(());
        }
        let mut hash = Sha256::new();
        for (name, bytes) in &state.files {
            hash.update((name.len() as u64).to_le_bytes());
            hash.update(name);
            hash.update((bytes.len() as u64).to_le_bytes());
            hash.update(bytes);
        }
        let mine: [u8; 32] = hash.finalize().into();
        match self.disagreeing(&mine)? {
            None => Ok(()),
            Some((rank, _)) => Err(TrainError::Ranks(format!(
                "after step {step} rank {rank}'s adapter, optimizer or RNG state differs from the \
                 chief's: the ranks drifted apart (a rank on another kind of device, or another \
                 build?); the run stops before any of it is saved"
            ))),
        }
    }
}

/// [`Star`] as the trainer's [`Exchange`].
struct Linked(Star);

impl Exchange for Linked {
    fn rank(&self) -> usize {
        self.0.rank()
    }

    fn ranks(&self) -> usize {
        self.0.size()
    }

    fn all_gather(&mut self, bytes: Vec<u8>) -> Result<Vec<Vec<u8>>, GrpoError> {
        self.0
            .all_gather(bytes)
            .map_err(|e| GrpoError::Exchange(e.to_string()))
    }
}

/// What a worker starts from.
#[derive(serde::Serialize, serde::Deserialize)]
pub(crate) struct Handoff {
    /// The plan, as JSON (its serde attributes need a self-describing format).
    pub(crate) plan: String,
    /// The restored native state; `None`: a fresh start from the plan's seeds.
    pub(crate) state: Option<BTreeMap<String, Vec<u8>>>,
    /// Where the task sampler stands.
    pub(crate) cursor: DataCursor,
    /// The chief's service log; a worker's services log beside it.
    pub(crate) service_log: PathBuf,
    /// The allocation's run of the trial (1 for its first), for fault injection.
    pub(crate) trial_run_id: i32,
}

/// A worker rank's run: the chief's plan and state, then a step of its shards whenever the
/// chief says another step runs. `execution` is how this rank's device runs the policy (as the
/// chief's) and `record` names the device (it must be the chief's); the plan, the run folder and
/// every other choice are the chief's.
pub fn work<B: Backend>(
    (execution, record): (Execution, &Device),
    ranks: &mut Ranks,
    device: &B::Device,
    label: &str,
) -> Result<(), TrainError> {
    let rank = ranks.exchange().rank();
    let handoff: Option<Handoff> = gather(ranks.exchange(), &None::<Handoff>)?
        .into_iter()
        .next()
        .flatten();
    let Some(handoff) = handoff else {
        tracing::info!("{label}: rank {rank}: the chief has nothing to run");
        return Ok(());
    };
    ranks.check_devices(record)?;
    let plan: Plan = serde_json::from_str(&handoff.plan)
        .map_err(|e| TrainError::Refused(format!("the chief's plan: {e}")))?;
    let model = &plan.model.path;
    let tokenizer = ChatTokenizer::from_file(&model.join("tokenizer.json"))?;
    let policy = load_policy::<Autodiff<B>>(&plan, device, execution)?;
    let log = handoff
        .service_log
        .with_file_name(format!("service-rank{rank}.log"));
    let (tasks, mut service, mut env) = environment(&plan, &log)?;
    let trainer: Trainer<Autodiff<B>> = match handoff.state {
        Some(files) => Trainer::resume(
            policy,
            tokenizer,
            grpo_config(&plan),
            &NativeState { files },
            Path::new("the chief's state"),
        )?,
        None => {
            let unlimited = Budget::start(0, u64::MAX, u64::MAX);
            start::fresh(policy, tokenizer, &plan, tasks.clone(), device, unlimited)?.0
        }
    };
    let mut trainer = trainer.with_fault(parallel_fault()?);
    let mut sampler = TaskSampler::at(tasks, plan.seeds.task_order, handoff.cursor)?;
    tracing::info!(
        "{label}: rank {rank} of {} from step {}",
        ranks.count(),
        trainer.step_index()
    );
    // Fault injection: `HR_FAULT_KILL_RANK=RUN:STEP` SIGKILLs rank 1 as that step of that
    // allocation run starts, while the others wait for it inside the step.
    let kill_at = fault_point("HR_FAULT_KILL_RANK")?.filter(|_| rank == 1);
    let result = (|| {
        while ranks.decide(false)? {
            if kill_at == Some((handoff.trial_run_id, trainer.step_index() + 1)) {
                kill_self(&format!(
                    "rank {rank} as step {} starts",
                    trainer.step_index() + 1
                ));
            }
            let batch = sampler.next_batch(plan.grpo.tasks_per_step);
            let report = trainer.step_with(&batch, env.as_mut(), ranks.exchange())?;
            let state = trainer.capture(&plan.model.peft_base())?;
            ranks.check_same(report.step + 1, &state)?;
        }
        Ok::<_, TrainError>(())
    })();
    // The step's error, if any, is the one to report; a failed shutdown only when all else went
    // well.
    let shutdown = match service.take() {
        Some(s) => s
            .shutdown()
            .map_err(|e| TrainError::Refused(format!("stopping rank {rank}'s service: {e}"))),
        None => Ok(()),
    };
    result.and(shutdown)
}
