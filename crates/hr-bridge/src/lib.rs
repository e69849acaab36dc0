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
//!
//! # In detail
//!
//! `OwnedService` runs a service (NeMo Gym, OpenEnv) under a given interpreter in its own process
//! group on a loopback port it picks (retrying on address-in-use or an early exit), logs to a file
//! (its stdout and stderr through `hr_files::CappedLog`, flushed before a log tail is quoted),
//! polls readiness with a total limit, reports deaths with the log tail, and stops it with TERM to
//! the group, a grace period, KILL and reap; drop kills it too.
//!
//! `OpenEnvClient` speaks OpenEnv (`/health`, `/schema`, one `/ws` session per episode, typed
//! `{"type":"error"}` codes such as `CAPACITY_REACHED`), and `OpenEnvEnvironment` implements
//! `hr_env::Environment` on it.
//!
//! `NemoGymClient` speaks to a NeMo Gym resources server (one cookie jar per `Rollout`, legacy and
//! 0.7 `/seed_session`, tool calls, `/verify` with a minimal `NeMoGymResponse`, `/close_session`
//! with 404 as a no-op, 422 detail and 500 bare-string errors); `NemoGymEnvironment` plays the
//! agent (model text -> `function_call` / `message` items, tools executed, the reward from
//! `/verify`).
//!
//! Rust servers faithful to both contracts (an echo env and `example_single_tool_call`) live only
//! in the crate's tests (`tests/it/servers.rs`, axum a dev-dependency), for fast tests without
//! Python. `hr-bridge-conformance openenv|nemo` runs the bridge against the real servers (`cargo
//! xtask conformance envs`, which also runs a short `train` against each real server and two more).
//!
//! `presets.rs` holds the launch specs, shared by the conformance driver and `train`: any OpenEnv
//! environment's ASGI app under uvicorn (the plan's `environment.app`, default the echo env's) and
//! any NeMo Gym resources server folder, run as an instance named after the folder, as NeMo Gym's
//! configs name it, with the plan's `environment.server_config` (the server's own config fields)
//! merged into that instance's block (the conformance driver proves it with a copy of the example
//! server that requires a field).

mod http;
mod nemo_gym;
mod openenv;
pub mod presets;
mod service;

pub use nemo_gym::{NemoGymClient, NemoGymEnvironment, Rollout, Verdict, output_item, response};
pub use openenv::{EnvReply, OpenEnvClient, OpenEnvEnvironment, OpenEnvSession};
pub use service::{OwnedService, ServiceSpec};
