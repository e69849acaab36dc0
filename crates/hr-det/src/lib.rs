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
//!
//! # In detail
//!
//! A typed client of Determined 0.35's REST API (tokio + reqwest with rustls, trusting Mozilla's
//! roots and the system's, `SSL_CERT_FILE`, plus `DET_MASTER_CERT_FILE` when given). `wire` holds
//! the grpc-gateway types (camelCase, int64 as strings, `STATE_*` enums, the error envelope);
//! `client` the transport (bearer token redacted from `Debug` and errors, bounded timeouts, retries
//! with jittered backoff on 502/503/504 and connection errors; a POST that creates a record
//! (metrics, checkpoint, experiment, command) is never sent again once it may have arrived, and
//! fails as `Unconfirmed`, which `hr-core` settles by reading the record back); `user` what `det`
//! calls (info, login, experiments, trials, checkpoints, commands, task logs,
//! `trials/metrics/trial_metrics`); `trial` what a Core API trial calls (`runs/start`, metrics,
//! checkpoint report, preemption long-poll with an HTTP timeout of N+10 s, ack with an empty body,
//! searcher operations, bare-number progress). Its wire tests parse requests captured from the real
//! client (`test_data/captured-*.jsonl`).
//!
//! `cluster` reads what a cluster offers a user (workspaces by name, a project, the resource pools
//! with their slots and zero-slot capacity), for `cluster preflight`.
//!
//! `task_info` types what a trial process is handed: the `DET_*` variable names and the info files
//! (`cluster.json`, `trial.json`, `rendezvous.json`, `resources.json`); the devmaster writes them
//! from these structs and `hr-core` reads them through the same ones. `sign_in` is where a client's
//! master and credentials come from, as `det` finds them: the master URL canonicalised as
//! `canonicalize_master_url` does (`HOST:PORT` is http, a scheme gets its default port), and
//! `Client::sign_in_from_env`'s order `DET_USER_TOKEN`, the token `det user login` cached in
//! `auth.json` for that URL (checked with `/api/v1/me`), `DET_USER`/`DET_PASS`.
//!
//! `tls` is which certificates a client trusts, as `det`'s `certs.default_load` decides: the web
//! PKI roots plus `DET_MASTER_CERT_FILE` (or `det`'s stored `certs.json` entry for the URL;
//! `noverify` turns checks off), checked against `DET_MASTER_CERT_NAME` when set (the request keeps
//! the URL's `Host`; a resolver maps the name to the URL's host, so only SNI and the check use it).
//! A refused certificate is `DetError::Tls`, found by walking the error chain to rustls's error,
//! never retried, and names the problem and the variable that fixes it.

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
