//! Qualification, in one home: the proofs that a resumed run equals an uninterrupted one, and
//! the gate that admits a long run only on them.
//!
//! - The managed CPU lifecycle of the seed (experiment 54512): a deterministic eight-step fixture
//!   that runs as a Core API trial and publishes a sealed snapshot per step through
//!   `hr-snapshot` ([`managed_trial_cpu`]), and its qualification, uninterrupted and paused
//!   after step 3, whose next allocation must restore exactly the receipt's checkpoint
//!   ([`qualify_cpu`], [`verify_proof`]).
//! - The native qualification of a training plan ([`NativeQualification`]): the binary's
//!   `train` uninterrupted, stopped after step K and resumed in a new process, compared field by
//!   field at every step.
//! - The managed qualification ([`ManagedQualification`], through [`managed_recovery`]): the
//!   `managed-training` trial paused, acknowledged, activated and restored from exactly the
//!   receipt's checkpoint, compared with the native run.
//! - The kill soak ([`SoakQualification`], through [`kill_soak`]): the same trial's worker
//!   SIGKILLed again and again and its master crashed and restarted, which must still complete
//!   with the native run's evidence.
//! - A backend's qualification ([`BackendQualification`]): the native half, then the managed
//!   half against the native proof's run, into the proofs folder the gate reads.
//! - Re-checking any proof from its files ([`verify_any_proof`]), the [`gate`], and a
//!   source-bound experiment the gate admitted ([`prepare_experiment`], `managed prepare`), and
//!   the [`preflight`] of a submission (the master and this machine).
//!
//! Each qualification is checked before any output exists (`new`, refusing with
//! [`QualifyError::Refused`]), then run into a folder the caller made. No GPU is requested or
//! touched and no tensor is computed here: training is the binary's `train` and
//! `managed-training`, run as processes. The master is the local devmaster unless a real one is
//! given.

mod backend;
mod driver;
mod error;
mod fixture;
pub mod gate;
mod glibc;
mod managed;
mod native;
pub mod preflight;
mod prepare;
mod qualify;
mod soak;
mod source;
mod training;
mod trial;
mod verify;

pub use backend::{BackendOutcome, BackendQualification};
pub use error::QualifyError;
pub use fixture::{FixtureRng, FixtureState};
pub use managed::{ManagedOutcome, ManagedQualification, ManagedQualificationOptions};
pub use native::{NativeOptions, NativeQualification};
pub use prepare::{PrepareOptions, Prepared, Search, prepare_experiment};
pub use qualify::{Control, QualifyOptions, STEPS as CPU_FIXTURE_STEPS, qualify_cpu, verify_proof};
pub use soak::{SoakOptions, SoakQualification, SoakReport, SoakSummary, kill_soak};
pub use source::{SourceRecord, record_source};
pub use training::{ManagedOptions, ManagedRecovery, managed_recovery};
pub use trial::{TrialControls, managed_trial_cpu};
pub use verify::{
    ProofVerdict, runs_device, verify_any_proof, verify_managed_proof, verify_native_proof,
};
