//! `hessian-recipes launch -- COMMAND`: one rank per slot of this container inside a Determined
//! trial (`--nproc N` outside one), started by `hr_collective::Launch` with torchrun's variables,
//! as Determined's `4_distributed` tutorial launches ranks where torch is absent. The ranks meet
//! on `INTER_TRAIN_PROCESS_COMM_PORT_1` inside a trial, else on `MASTER_PORT` (`C10D_PORT`, or a
//! free port on this machine). Also how `train` and `managed-training` start as a rank: the
//! chief meets its workers, a worker runs `hr_train::work`.

use std::process::ExitCode;

use burn::tensor::backend::Backend;
use hr_collective::{Launch, World};
use hr_core::Placement;
use hr_plan::Plan;
use hr_train::Ranks;

use crate::Refused;
use crate::backend::{DeviceKind, OnBackend, dispatch};
use crate::cli::LaunchArgs;
use crate::output::exit_error;

pub(crate) fn run(args: &LaunchArgs) -> anyhow::Result<ExitCode> {
    let placement = Placement::from_environment()?;
    let port = match std::env::var("C10D_PORT").ok().filter(|p| !p.is_empty()) {
        Some(port) => port
            .parse()
            .map_err(|_| Refused(format!("launch: C10D_PORT={port:?} is not a port")))?,
        None => std::net::TcpListener::bind(("127.0.0.1", 0))?
            .local_addr()?
            .port(),
    };
    let launch = layout(args.nproc, placement, port)?;
    // A terminal's Ctrl-C reaches every rank: the chief saves and stops the others; this waits.
    let _signals = hr_core::defer_stop_signals("launch")?;
    match launch
        .run(&args.command)
        .map_err(|e| Refused(format!("launch: {e}")))?
    {
        None => Ok(ExitCode::SUCCESS),
        Some((rank, status)) => {
            eprintln!("launch: rank {rank} ended ({status}); the other ranks were stopped");
            let code = status
                .code()
                .and_then(|c| u8::try_from(c).ok())
                .unwrap_or(1);
            Ok(ExitCode::from(code.max(1)))
        }
    }
}

/// Where the ranks go: inside a trial one per slot of this container (`--nproc` must agree),
/// outside one `--nproc` on this machine.
fn layout(nproc: Option<usize>, placement: Option<Placement>, port: u16) -> anyhow::Result<Launch> {
    let refused = |m: String| -> anyhow::Error { Refused(format!("launch: {m}")).into() };
    match (placement, nproc) {
        (Some(p), n) => {
            let local = p.local_slots();
            if local == 0 {
                return Err(refused(
                    "this trial has no slots (resources.slots_per_trial is 0): give it one slot \
                     per rank"
                        .to_owned(),
                ));
            }
            if n.is_some_and(|n| n != local) {
                return Err(refused(format!(
                    "--nproc {} but this container has {local} slots: inside a trial a rank \
                     runs per slot; drop --nproc",
                    n.unwrap_or(0)
                )));
            }
            Ok(Launch {
                local,
                first: p.first_rank(),
                world: p.world_size(),
                group: (p.container_rank, p.container_addrs.len()),
                chief_addr: p.chief_addr().to_owned(),
                port,
            })
        }
        (None, Some(n)) if (1..=hr_collective::MAX_RANKS).contains(&n) => Ok(Launch {
            local: n,
            first: 0,
            world: n,
            group: (0, 1),
            chief_addr: "127.0.0.1".to_owned(),
            port,
        }),
        (None, Some(n)) => Err(refused(format!(
            "--nproc {n} must be between 1 and {}",
            hr_collective::MAX_RANKS
        ))),
        (None, None) => Err(refused(
            "outside a Determined trial give the number of ranks with --nproc N".to_owned(),
        )),
    }
}

/// The ranks this process belongs to, from the launcher's variables (`launch`, or Determined's
/// torch_distributed); `None` alone. A rank trains on GPU `LOCAL_RANK`, or `HR_RANK_GPU` when
/// set.
pub(crate) fn world() -> anyhow::Result<Option<World>> {
    let world = World::from_env().map_err(|e| Refused(format!("the launcher's variables: {e}")))?;
    if let Some(w) = &world {
        let chosen = std::env::var("HR_RANK_GPU").ok();
        crate::backend::use_gpu(rank_gpu(chosen.as_deref(), w.local_rank)?);
    }
    Ok(world)
}

/// The GPU a rank trains on: `HR_RANK_GPU` (every rank on that GPU) when set, else its local
/// rank.
fn rank_gpu(chosen: Option<&str>, local_rank: usize) -> anyhow::Result<usize> {
    match chosen.map(str::trim).filter(|v| !v.is_empty()) {
        None => Ok(local_rank),
        Some(v) => v.parse().map_err(|_| {
            Refused(format!(
                "HR_RANK_GPU={v:?} is not a GPU index: give a number such as 0 (every rank on \
                 that GPU), or unset it for a GPU per rank (LOCAL_RANK)"
            ))
            .into()
        }),
    }
}

/// The chief meets its workers once the plan is known to spread over them.
pub(crate) fn meet(
    world: Option<&World>,
    plan: &Plan,
    source: &hr_seal::SourceBinding,
) -> anyhow::Result<Ranks> {
    let Some(world) = world else {
        return Ok(Ranks::alone());
    };
    let shards = plan.parallel.shards;
    if !plan.parallel.admits(world.size) {
        return Err(Refused(format!(
            "{} ranks (WORLD_SIZE: `launch --nproc`, or one per slot of resources.slots_per_trial) \
             cannot share the plan's {shards} shards: set parallel.shards to a multiple of {} (a \
             power of two that divides grpo.tasks_per_step), or start a number of ranks that \
             divides {shards}",
            world.size, world.size
        ))
        .into());
    }
    Ranks::meet(world, &build(source)).map_err(exit_error)
}

/// What ranks compare when they meet: the commit and the binary's sha256.
fn build(source: &hr_seal::SourceBinding) -> String {
    format!(
        "{} {}",
        source.commit,
        source.binary_sha256.as_deref().unwrap_or("unknown")
    )
}

/// A worker rank of `train` or `managed-training`: it meets the chief, takes the plan and state
/// from it and steps its shards until the chief stops; it writes nothing of the run.
pub(crate) fn work(kind: DeviceKind, world: &World) -> anyhow::Result<ExitCode> {
    let record = crate::backend::identify(kind)?;
    // The chief decides when the run stops; a first stop signal here waits for its word.
    let _signals = hr_core::defer_stop_signals("worker rank")?;
    let ranks = Ranks::meet(world, &build(&crate::source_binding()?)).map_err(exit_error)?;
    dispatch(
        kind,
        Worker {
            ranks,
            execution: crate::backend::execution(kind),
            record,
        },
    )
}

struct Worker {
    ranks: Ranks,
    execution: hr_policy::Execution,
    /// This rank's device, which must be the chief's.
    record: hr_proof::Device,
}

impl OnBackend for Worker {
    type Output = ExitCode;

    fn run<B: Backend>(mut self, device: B::Device, name: &str) -> anyhow::Result<ExitCode> {
        let how = (self.execution, &self.record);
        hr_train::work::<B>(how, &mut self.ranks, &device, name).map_err(exit_error)?;
        Ok(ExitCode::SUCCESS)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn ranks_follow_the_trials_slots_or_nproc_outside_one() {
        let two_nodes = Placement {
            container_rank: 1,
            container_addrs: vec!["10.0.0.1".into(), "10.0.0.2".into()],
            container_slot_counts: vec![4, 4],
        };
        assert_eq!(
            layout(None, Some(two_nodes.clone()), 29400).expect("valid"),
            Launch {
                local: 4,
                first: 4,
                world: 8,
                group: (1, 2),
                chief_addr: "10.0.0.1".into(),
                port: 29400,
            }
        );
        assert!(layout(Some(4), Some(two_nodes.clone()), 1).is_ok());
        let err = layout(Some(2), Some(two_nodes), 1).expect_err("disagrees");
        assert!(err.to_string().contains("drop --nproc"), "{err}");
        assert_eq!(layout(Some(2), None, 1).expect("local").world, 2);
        assert!(layout(None, None, 1).is_err());
        assert!(layout(Some(0), None, 1).is_err());
        let cpu_trial = Placement {
            container_rank: 0,
            container_addrs: vec!["127.0.0.1".into()],
            container_slot_counts: vec![0],
        };
        assert!(layout(None, Some(cpu_trial), 1).is_err());
    }

    #[test]
    fn a_rank_trains_on_its_local_rank_unless_hr_rank_gpu_names_one() {
        assert_eq!(rank_gpu(None, 3).expect("local rank"), 3);
        assert_eq!(rank_gpu(Some(""), 3).expect("unset"), 3);
        assert_eq!(rank_gpu(Some("0"), 3).expect("chosen"), 0);
        let err = rank_gpu(Some("cuda:1"), 3).expect_err("refused");
        assert!(err.to_string().contains("HR_RANK_GPU=\"cuda:1\""), "{err}");
    }
}
