//! Core snapshots: the seed's rules for publishing sealed checkpoints to a Determined trial, as
//! one small state machine ([`Publisher`]) over a narrow [`CoreCheckpoints`] trait (implemented by
//! `hr-core` on a cluster and by fakes in tests).
//!
//! The rules: periodic saves publish after sealing; preemption and final saves publish once, only
//! after native cleanup, owned-service shutdown and the final manifest, and preemption is
//! acknowledged only after a durable `preempted_at_checkpoint` receipt exists (the order is
//! enforced by types); repeated or decreasing steps are rejected before any checkpoint UUID is
//! created; an already selected terminal UUID is reused after validation, never published again;
//! restore takes the scheduler-selected UUID and verifies seal, source and config before anything
//! is adopted; the policy RNG is preserved around every Core call; the deadline and GPU budget
//! travel in the sealed state and are never renewed.
//!
//! Nothing here does network I/O or knows about tensors: `CoreContext` in `hr-core` implements
//! the trait for real masters.
//!
//! # In detail
//!
//! The seed's Core snapshot rules as one state machine, `Publisher`, over the `CoreCheckpoints`
//! trait (checkpoint UUIDs and folders, checkpoint and metrics reports, preemption ack), which
//! `hr-core` implements on a cluster (the implementation lives there, so this crate links neither
//! tokio nor reqwest; tidy checks it). Terminal saves are a typestate chain (`Terminal` →
//! `CleanedUp` → `ServicesStopped` → `TerminalPublished`), so native cleanup, service shutdown, the
//! one publication and the durable `preempted_at_checkpoint` receipt can only happen in that order,
//! and only the receipt's token acknowledges preemption. Steps must increase before a UUID is
//! created; a scheduler-selected terminal checkpoint at the same step is reused, not republished;
//! restore verifies seal, source, config and step and refuses a selection that differs from the
//! receipt (`accept_source_change` relaxes only the source check, for `train
//! --allow-source-change`). `with_rng_preserved` keeps the policy RNG out of Core calls; `Budget`
//! (deadline, GPU seconds) is sealed state and never renewed.

mod budget;
mod checkpoints;
mod error;
mod publisher;
mod receipt;
mod rng;

pub use budget::Budget;
pub use checkpoints::{CoreCheckpoints, SelectedCheckpoint};
pub use error::SnapshotError;
pub use publisher::{
    Binding, CleanedUp, Published, Publisher, Restored, ServicesStopped, Terminal, TerminalKind,
    TerminalPublished,
};
pub use receipt::{DurableReceipt, RECEIPT_FILE, Receipt};
pub use rng::{RngState, with_rng_preserved};
