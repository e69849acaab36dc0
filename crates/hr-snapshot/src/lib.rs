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
