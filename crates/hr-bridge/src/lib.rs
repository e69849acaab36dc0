//! Environment services the trainer owns: each service (a NeMo Gym resources server or an
//! OpenEnv server) runs under a given interpreter in its own process group, on a loopback port
//! the bridge picks (retrying on address-in-use or an early exit), with its output captured to a
//! log file. Readiness is polled with a total limit, a child that dies is reported with its log
//! tail, and shutdown is TERM to the group, a grace period, KILL, reap; the service is also killed
//! when dropped or on panic, so no process is ever left behind.
//!
//! On top: `hr_env::Environment` for both services — the OpenEnv client (one WebSocket session
//! per episode) and the NeMo Gym resources-server client (one cookie jar per rollout, the trainer
//! playing the agent). The trait, the tasks and the built-in fixture environment live in the
//! networking-free `hr-env`; the Rust fixture servers faithful to both contracts exist only in
//! this crate's tests. No tensors, no Determined.

mod http;
mod nemo_gym;
mod openenv;
pub mod presets;
mod service;

pub use nemo_gym::{NemoGymClient, NemoGymEnvironment, Rollout, Verdict, output_item, response};
pub use openenv::{EnvReply, OpenEnvClient, OpenEnvEnvironment, OpenEnvSession};
pub use service::{OwnedService, ServiceSpec};
