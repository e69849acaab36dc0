//! The managed CPU lifecycle of the seed (experiment 54512): a deterministic eight-step fixture
//! that runs as a Core API trial and publishes a sealed snapshot per step through `hr-snapshot`
//! ([`managed_trial_cpu`]), and the qualification that runs it uninterrupted and paused after
//! step 3, checks that the next allocation restored exactly the receipt's checkpoint, and writes
//! `proof.json` ([`qualify_cpu`], [`verify_proof`]); and the managed half of a training
//! qualification ([`managed_recovery`]): the `managed-training` trial paused, acknowledged,
//! activated and restored from exactly the receipt's checkpoint; and the kill soak
//! ([`kill_soak`]): the same trial's worker SIGKILLed again and again and its master crashed and
//! restarted, which must still complete.
//!
//! No GPU is requested or touched; no tensors. The master is the local devmaster unless a real
//! one is given.

mod error;
mod fixture;
mod managed;
mod native;
mod qualify;
mod soak;
mod source;
mod training;
mod trial;
mod verify;

pub use error::QualifyError;
pub use fixture::{FixtureRng, FixtureState};
pub use managed::{ManagedOutcome, ManagedQualification, ManagedQualificationOptions};
pub use native::{NativeOptions, NativeQualification};
pub use qualify::{Control, QualifyOptions, STEPS as CPU_FIXTURE_STEPS, qualify_cpu, verify_proof};
pub use soak::{SoakOptions, SoakQualification, SoakReport, SoakSummary, kill_soak};
pub use source::{SourceRecord, record_source};
pub use training::{ManagedOptions, ManagedRecovery, managed_recovery};
pub use trial::{TrialControls, managed_trial_cpu};
pub use verify::{runs_device, verify_managed_proof, verify_native_proof};
