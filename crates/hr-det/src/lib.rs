//! A typed async client for Determined 0.35's REST API, as the real `determined==0.35.0` client
//! speaks it: grpc-gateway JSON (camelCase, int64 as strings, `STATE_*` enums), the error envelope
//! `{"error":{...}}` mapped to typed errors, bearer tokens from `DET_USER_TOKEN` or login (never
//! logged, never in errors), bounded timeouts, and retries with jittered backoff on 502/503/504
//! and connection errors. TLS trust is `det`'s: the web PKI roots plus `DET_MASTER_CERT_FILE` (or
//! `noverify`), checked against `DET_MASTER_CERT_NAME` when set; a refused certificate is an error
//! naming the problem and the variable that fixes it.
//!
//! User side: info, login, me, experiments (create, pause, activate, kill, cancel, get), trials,
//! checkpoints, commands, task logs, trial metrics, workspaces, projects and resource pools.
//! Trial side: `runs/start`, metrics, checkpoint reports, the preemption long-poll and its ack,
//! searcher operations and progress.
//! `task_info` types what a trial process is handed (the `DET_*` names, the info files).
//! This crate is only the wire: it holds no trial logic (that is `hr-core`) and no master logic
//! (that is `hr-devmaster`).

mod auth;
mod client;
mod cluster;
mod error;
mod sign_in;
pub mod task_info;
mod tls;
mod trial;
mod user;
pub mod wire;

pub use auth::hash_password;
pub use client::{Client, RetryPolicy};
pub use error::DetError;
pub use sign_in::canonical_master_url;
pub use tls::{CERT_FILE_VAR, CERT_NAME_VAR, MasterTrust};
pub use user::ExperimentAction;
