//! A Determined-0.35-compatible master for local runs and tests, serving on loopback (or, with a
//! configured password, on another address): the
//! endpoints the real `det` CLI and the real Python Core API use (and `hr-det`), with state kept
//! durably in a state folder (a `state.json` snapshot and a `metrics.jsonl` journal, written by
//! group commit before a change is acknowledged), so a restart loses no acknowledged experiment,
//! trial, checkpoint or metric.
//!
//! It runs an experiment's trials (the `single`, `random`, `grid` and `adaptive_asha`
//! searchers) as child processes running the config's entrypoint (a string via `sh -c`, a list
//! exec'd) in a fresh work folder holding the experiment's model definition, with the real
//! `DET_*` environment and info files (each allocation seeing its own `/run/determined/info`),
//! and follows the master's semantics: pause makes experiment and trials PAUSED at once and
//! preempts a ready allocation (kills one that is not) with a deadline, and an exit the master
//! caused is never a failure or a restart, however a pause and an activate interleave; an ack
//! then exit keeps the trial resumable, exit 0 without ack completes it; an allocation's whole
//! process group is killed when it exits, and its token acts for nothing from then on (fencing:
//! only the running, current allocation publishes); activate starts run `runID+1` from the
//! completed checkpoint with the highest `steps_completed` (ties: latest report time, then UUID;
//! upstream has no tie-break); a UUID reported twice and metrics from a stale `trialRunId` are
//! rejected with the upstream status and envelope; a checkpoint's uuid must be a UUID in its
//! canonical form (what upstream's `uuid` column returns), so the folder GC deletes is always one
//! child of the storage; `max_restarts` is honoured. Without
//! containers, `shared_fs` storage is presented to trials as a `directory` at the host path.
//!
//! It is not a cluster: one machine, no agents, no resource pools, no containers.

mod api;
mod asha;
mod context;
mod error;
mod gc;
mod guard;
mod hparams;
mod info;
mod listen;
mod master;
mod persist;
mod record;
mod scheduler;
mod searcher;
mod server;
mod state;
mod tls;
mod trial_info;

pub use master::DevmasterConfig;
pub use server::Devmaster;
pub use tls::TlsFiles;
pub use trial_info::TrialInfo;
