//! Environment services the trainer owns: each service (a NeMo Gym resources server or an
//! OpenEnv server) runs under a given interpreter in its own process group, on a loopback port
//! the bridge picks (retrying on address-in-use or an early exit), with its output captured to a
//! log file. Readiness is polled with a total limit, a child that dies is reported with its log
//! tail, and shutdown is TERM to the group, a grace period, KILL, reap; the service is also killed
//! when dropped or on panic, so no process is ever left behind.
//!
//! This first part holds the supervisor ([`OwnedService`]) and the [`Environment`] trait; the
//! NeMo Gym and OpenEnv clients build on them. No tensors, no Determined.

mod environment;
mod error;
pub mod fixture;
mod http;
mod nemo_gym;
mod openenv;
mod service;

pub use environment::{Environment, Observation, StepOutcome, Task};
pub use error::BridgeError;
pub use nemo_gym::{NemoGymClient, NemoGymEnvironment, Rollout, Verdict, output_item, response};
pub use openenv::{EnvReply, OpenEnvClient, OpenEnvEnvironment, OpenEnvSession};
pub use service::{OwnedService, ServiceSpec};
