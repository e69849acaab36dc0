//! Environment services the trainer owns: each service (a NeMo Gym resources server or an
//! OpenEnv server) runs under a given interpreter in its own process group, on a loopback port
//! the bridge picks (retrying on address-in-use or an early exit), with its output captured to a
//! log file. Readiness is polled with a total limit, a child that dies is reported with its log
//! tail, and shutdown is TERM to the group, a grace period, KILL, reap; the service is also killed
//! when dropped or on panic, so no process is ever left behind.
//!
//! On top: the [`Environment`] trait the trainer drives episodes through, the OpenEnv client (one
//! WebSocket session per episode) and the NeMo Gym resources-server client (one cookie jar per
//! rollout, the trainer playing the agent), Rust fixture servers faithful to both contracts, and
//! the built-in fixture environment (arithmetic, tool-call, calculator and digits tasks, no service).
//! No tensors, no Determined.

mod environment;
mod error;
pub mod fixture;
mod http;
mod nemo_gym;
mod openenv;
pub mod presets;
mod service;
mod tasks;

pub use environment::{Environment, Observation, StepOutcome, Task};
pub use error::BridgeError;
pub use nemo_gym::{NemoGymClient, NemoGymEnvironment, Rollout, Verdict, output_item, response};
pub use openenv::{EnvReply, OpenEnvClient, OpenEnvEnvironment, OpenEnvSession};
pub use service::{OwnedService, ServiceSpec};
pub use tasks::{FixtureEnvironment, FixtureKind, Split, fixture_split_tasks, fixture_tasks};
