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
//! It is not a cluster: one machine, no agents, no containers, one workspace and project
//! (`Uncategorized`, id 1, as on a fresh master) and one resource pool (`default`).
//!
//! # In detail
//!
//! An axum router on loopback, served over HTTP or, with `TlsFiles` (`--tls-cert`/`--tls-key`),
//! HTTPS through tokio-rustls (`tls.rs`; a bad file or a key that does not fit is refused at start
//! naming the flag, a certificate that has expired or expires within two weeks is said at start,
//! read with x509-parser; each handshake is bounded like a request head). A TLS master writes its
//! chain as `master.crt` beside each trial's info files and names it in `DET_MASTER_CERT_FILE` and
//! the cluster file's `master_cert_file`, as Determined hands a container its master's certificate.
//! It is served by its own accept loop (`listen.rs`) with flood limits: at most half the process's
//! open-file limit (`RLIMIT_NOFILE`, soft), and never more than 4096, connections are served at
//! once (the rest wait unaccepted in the kernel's backlog, holding none of its file descriptors, so
//! the state files and trial processes always have the other half), and a connection that has not
//! sent a whole request head within 10 s (new, or idle between keep-alive requests) is closed;
//! `hr-det` drops pooled connections idle for 5 s, before the master would. A flood of held-open
//! connections beyond the file limit therefore delays a login by a header timeout per cap's worth
//! of connections queued ahead of it, and stops nothing (the flood e2e test).
//!
//! `state.rs` is the master's state; `persist.rs` loads and saves it and makes every change durable
//! before it is answered, by group commit: a change is staged under the state lock (which fixes its
//! order) and written after the lock is released, one committer writing everything staged so far
//! (concurrent requests share one fsync; no request holds the state across a disk write). Metrics
//! are appended to the `metrics.jsonl` journal (a torn last line, never acknowledged, is cut at
//! start-up; archiving is recomputed by replay), each experiment's config (immutable, and as large
//! as its author made it) is written once to `experiments/<id>.json` in the same commit, before the
//! snapshot that lists it, and the rest of the state (small) is an atomically rewritten
//! `state.json` snapshot (a restart loses nothing acknowledged; running allocations are restarted
//! as run N+1).
//!
//! Trials are child processes in their own process group with the real `DET_*` environment and info
//! files; pause/activate/kill/cancel, the preemption protocol (ready = the allocation made a Core
//! call; preempt if ready, else kill; deadline configurable), restore choice by `steps_completed`
//! with a documented tie-break (latest report time, then UUID; upstream has none), duplicate UUIDs
//! and stale `trialRunId`s rejected with the upstream status and envelope, `max_restarts`, commands
//! with logs, and `shared_fs` presented to trials as a `directory` at the host path. A kill the
//! master caused (a pause) is never a restart or a failure, however a pause and an activate
//! interleave (`Alloc::stopped`), and experiment actions apply one at a time
//! (`Master::transitions`), and an allocation starts only for an active trial of an active
//! experiment (checked under the state lock), so a pause/activate storm ends with one allocation of
//! a healthy trial.
//!
//! `guard.rs` reads a request body only from a signed-in caller (or a login), whole within 60 s and
//! within its route's size, before any handler; every refusal, and every error axum would answer in
//! plain text, is Determined's envelope with its status kept; failed logins are answered one at a
//! time after a second, and with 32 waiting no login is answered until they drain.
//! `--record-requests` (`record.rs`) captures request lines (never headers; a field or query
//! parameter whose name ends in a credential word (`password`, `token`, `apikey`, ...;
//! percent-escapes decoded) redacted at any depth, a body that is not a JSON object or array not
//! written at all; the file is created 0600 without following a link, and one others may read is
//! refused at start).
//!
//! Fencing: a checkpoint report from an allocation other than the trial's current one is refused
//! (400); a trial's token acts for its own allocation only and only while that allocation runs and
//! is the trial's current one (once it exited, through a pause or a crash, and after a restart
//! started another, the token gets 403 on every route, whatever the body names, and a report is
//! checked again under the state lock that records it (`Caller::fence`), so an exit is recorded
//! before it or after it; only the sessions of a running trial's current and previous allocation
//! are kept, none once it ended, so an older token is unknown: 401), and never on the routes that
//! change what runs (creating experiments or commands, experiment actions: a user's login only);
//! when an allocation's process exits, its whole process group is killed before the exit is
//! recorded, so nothing it left running outlives it (a reward function or a service `train` started
//! in a group of its own ends with `train` through its `hr_env::GroupWatchdog`); a replayed
//! identical metrics report is not counted twice, and a restarted devmaster stops the process
//! groups of the allocations the crashed one left running (recorded with their start time, so a
//! reused pid is never hit) and allocates every active trial again, including one the crashed
//! master had not yet restarted after a failure. A reported checkpoint's uuid must be a UUID in its
//! canonical form (what upstream's Postgres `uuid` column returns; the trial's folder is named by
//! what it sends, so another spelling would name another folder), and the folder GC or `det
//! experiment delete` removes is built from the parsed UUID (`CheckpointRec:: folder_in`), so it is
//! always one child of the experiment's storage, whatever a state file holds.
//!
//! `gc.rs` applies 0.35's checkpoint GC when an experiment ends (`save_experiment_best` 0,
//! `save_trial_best` 1, `save_trial_latest` 1 unless set; files deleted, state DELETED). Creating
//! an experiment whose storage keeps no folder on this machine (not `shared_fs` or `directory`, or
//! a `storage_path` outside `host_path`) is refused with a 400 naming the field, and so is
//! `runs/start` with storage other than `shared_fs` and `directory`; a route or method it does not
//! serve is answered with Determined's error envelope naming it (404); every 5xx answer is logged
//! with its path and reason; each allocation runs through util-linux `unshare` in a private mount
//! namespace (plus a user namespace when the devmaster is not root) where its own info folder is
//! bound at `/run/determined/info`, the only place the real Python Core API reads it, so trials
//! running at once never see one another's identity and the host's folder is never written
//! (`trial_info.rs`; probed once at start and stated on stderr; where the machine allows no
//! namespace, trials run one at a time on the one shared folder, cleared after each; where even
//! that folder is missing and cannot be created, Python trials fail naming the fix; the det
//! conformance checks the host's folder stays empty).
//!
//! `searcher.rs` runs the `single`, `random` (`max_trials`, each trial seeded from the experiment
//! seed) and `grid` searchers, creating trials as earlier ones end while at most
//! `max_concurrent_trials` run, and `adaptive_asha` through `asha.rs`, a port of 0.35's
//! `adaptive_asha.go`/`asha.go` (brackets sized and rungs lengthened as upstream, asynchronous
//! promotion of the top `1/divisor`, close-out once the first rung is full; its state is kept with
//! the experiment): a trial whose operation is done waits (the searcher operation answers
//! `completed`, it exits, stays ACTIVE without an allocation) and is allocated again when promoted,
//! or completed when closed; an errored trial ranks last. An experiment ends with its last trial:
//! COMPLETED, ERROR when every trial errored, CANCELED when stopped; `max_restarts` counts all its
//! trials' restarts, as upstream. Other searchers and ASHA's `stop_once` are refused at create
//! naming the field. A trial is handed `resources.slots_per_trial` slot ids (default 1) in
//! `DET_SLOT_IDS`, `cluster.json` and the rendezvous, and, as 0.35's port registry hands them,
//! `DTRAIN_SSH_PORT`, `INTER_TRAIN_PROCESS_COMM_PORT_1/2` and `C10D_PORT`, each the lowest from its
//! base that no live allocation holds (`info::unique_ports`), free again when it leaves.
//! Hyperparameter specs (`const`, `int`, `double`, `log`, `categorical`, nested) reach a trial as
//! values drawn from its seed or as its grid point (`hparams.rs`, Determined's grid axes; kept in
//! the trial record), and a `resources.slots_per_trial` above `--slots N` is refused at create.
//!
//! A model definition (the context directory of `det experiment create CONFIG DIR`) is checked at
//! create (relative paths inside the folder, regular files and folders only, none listed twice or
//! under a file; a bad entry is a 400 naming `modelDefinition[i]`), kept under `context/<id>` and
//! copied into every allocation's work folder (`context.rs`).
//!
//! What the CLI reads comes from the metrics journal and the checkpoints (`api/workloads.rs`): a
//! trial's workloads (training, validation, checkpoints by batches), its summary metrics and
//! searcher metric value, and each checkpoint's training record (the experiment's config, the
//! trial's hyperparameters, the metrics at its step and the searcher metric), which
//! `list-checkpoints --best` sorts by (checkpoints without it last, best first by
//! `smaller_is_better`) and `det checkpoint download` finds the storage through. An ended
//! experiment can be deleted (its trials, checkpoint files, logs, work folders and model definition
//! go; metrics of deleted trials stay in the journal unread).
//!
//! `guard.rs` wraps every request: once its state cannot be written the master fails closed (503 to
//! every request, the one whose change was lost included; `hessian-recipes devmaster` exits 1), a
//! `Host` that is not `localhost` or a loopback IP (any IP literal once it listens beyond loopback)
//! gets 421 (DNS rebinding needs a name), and a body declared as anything but `application/json`
//! gets 415 (`det` sends its JSON undeclared; browsers always declare theirs). Trial info files
//! (`cluster.json` holds the session token) are mode 600. A login's token expires after 7 days and
//! `logout` revokes it (only sha256 digests of tokens are stored); a trial's token acts only for
//! its own trial and allocation (metrics, progress, searcher, run start, preemption signals,
//! checkpoints for another get 403 PermissionDenied).
//!
//! Files: `master.rs` (the shared master: config, state lock, allocations, stage/commit),
//! `server.rs` (start-up with recovery, shutdown), `listen.rs` (the accept loop and its limits),
//! `tls.rs` (the certificate files), `trial_info.rs` (where trials find their info files),
//! `searcher.rs` (which trials an experiment runs) and `asha.rs`, `hparams.rs` (hyperparameter
//! values), `context.rs` (model definitions), `api/` one file per resource (auth, experiments,
//! trials, checkpoints, `workloads`: what the CLI reads about a trial's metrics, commands, `logs`:
//! trial and task logs and the task list, and `cluster`: the one workspace and project,
//! `Uncategorized` id 1 as on a fresh master, and the one pool `default`, whose zero-slot capacity
//! is the machine's CPUs; `mod.rs` holds the router, the caller check (the `Caller` extractor: a
//! handler that takes one runs only for a live session, a trial's token only while its allocation
//! is the trial's current one) and `wire_json` / `with_cli_fields`: every record the Rust client
//! reads is built as its `hr_det::wire` struct, one definition for both sides, with only the fields
//! the `det` CLI alone reads added as JSON), `scheduler.rs` (allocations and commands as
//! processes); dependencies run one way, server → api → scheduler → master. Proven with the real
//! `det` CLI and Python Core API by `cargo xtask conformance det`.

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
