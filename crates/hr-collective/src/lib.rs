//! The ranks of a data-parallel trial and how they reach each other. [`World`] reads who this
//! process is from the variables torchrun sets (`RANK`, `WORLD_SIZE`, `LOCAL_RANK`,
//! `MASTER_ADDR`), which Determined's `torch_distributed` launcher and `hessian-recipes launch`
//! both set, and the port from Determined's per-allocation `INTER_TRAIN_PROCESS_COMM_PORT_1`
//! (torchrun's own store holds `MASTER_PORT` there) or else `MASTER_PORT`. [`Star`] is an
//! all-gather over TCP through the chief: only the chief listens, on that one port (the only one
//! Determined exposes between a trial's containers), each worker connects to it, and every
//! frame carries a sequence number, its sender's rank and the sha256 of its bytes, so a lost,
//! reordered or corrupted message is an error, never a wrong sum. Bytes are only copied; what
//! they mean, and the fixed order they are added in, is the caller's (`hr-grpo`).
//!
//! [`Launch`] starts one machine's ranks with those variables, as Determined's own launchers do,
//! prefixing their output and killing the others when one fails.
//!
//! The standard library's threads and TCP (with `rustix` for TCP keepalive and `sha2` for the
//! frames' digests): no async runtime, no NCCL (whose reductions are not order-stable across
//! topologies).
//!
//! # In detail
//!
//! `World::from_env`: who this process is, from torchrun's variables (`RANK`, `WORLD_SIZE`,
//! `LOCAL_RANK`, `MASTER_ADDR`) and the port `INTER_TRAIN_PROCESS_COMM_PORT_1` (torchrun's store
//! holds `MASTER_PORT` under Determined's launcher) else `MASTER_PORT`. `Star`: an all-gather
//! through the chief, the only rank that listens (on the one port Determined exposes between a
//! trial's containers; a connection that does not greet as a rank is dropped); every frame carries
//! a sequence number, its sender's rank and the sha256 of its bytes, bounded before allocation
//! (`frame.rs`), so a lost or corrupted message is an error and a dead rank fails the others at
//! their next exchange (TCP keepalive ends a connection whose host is gone). A ring would halve the
//! chief's traffic; LoRA-sized buffers did not need it yet. `Launch` starts one machine's ranks
//! with those variables, prefixes their lines `[rank=N]` and kills the others when one fails
//! (Determined's `4_distributed` launcher's contract). No NCCL: its reductions are not order-stable
//! across topologies, and all-gather plus a fixed fold needs none.

mod frame;
mod launch;
mod star;
mod world;

pub use launch::Launch;
pub use star::Star;
pub use world::{MAX_RANKS, World};

/// Why ranks could not meet or exchange.
#[derive(Debug, thiserror::Error)]
pub enum CollectiveError {
    /// A launcher variable is missing or malformed; names it.
    #[error("{var}: {message}")]
    Env {
        /// The variable.
        var: &'static str,
        /// What is wrong.
        message: String,
    },
    /// A socket failed (a rank that died shows here: its connection closed or reset).
    #[error("{what}: {source}")]
    Io {
        /// What was being done, with whom.
        what: String,
        /// The cause.
        source: std::io::Error,
    },
    /// A peer sent something that is not the next frame of this exchange.
    #[error("{0}")]
    Protocol(String),
}

fn io(what: impl Into<String>) -> impl FnOnce(std::io::Error) -> CollectiveError {
    let what = what.into();
    move |source| CollectiveError::Io { what, source }
}
