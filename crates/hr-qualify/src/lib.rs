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
//!
//! # In detail
//!
//! Every qualification lives here; each is checked before any output exists (`new`, refusing with
//! `QualifyError::Refused`, which the binary maps to exit 2) and then run into a folder the caller
//! made; training itself is the binary's `train` and `managed-training`, run as processes, so
//! nothing here touches tensors. `driver.rs` is what every managed qualification shares: start a
//! master (or use the one given), submit and find the trial, poll for an event (failing at once,
//! with the trial log's tail, when the experiment ended instead), wait for the end, and the seed's
//! pause protocol written once (`pause`: the step's metric visible, pause, the durable receipt,
//! PAUSED; then `activate`).
//!
//! The seed's eight-step CPU fixture (`FixtureState`, advanced by an explicit xorshift RNG whose
//! state is part of the digest) as a Core API trial (`managed_trial_cpu`: restore through the
//! publisher, its payload read through the verified snapshot, a metric and a sealed checkpoint per
//! step, preemption honoured with receipt and ack; each restore or refusal a typed `RestoreRecord`
//! line in `RunDir::restores`), and `qualify_cpu`: copies the binary with its source digests into
//! `OUTPUT/source/`, runs the reference and the managed run (pause after the step-3 metric,
//! receipt, PAUSED, activate, check the trial, run id 2 and the exact receipt UUID; the managed
//! run's first allocation waits at the second step after the paused one until asked to stop,
//! `HR_FIXTURE_HOLD_AT`, so the pause lands in time on a machine of any speed), verifies every
//! checkpoint, and writes `proof.json`; `verify_proof` re-checks one. Negative controls
//! (`skip-rng-restore`, `stale-uuid`, `kill-during-save`) prove the check catches what it must.
//!
//! `training.rs` (`managed_recovery`) is the managed half of a training qualification. It runs a
//! `managed-training` entrypoint as a trial, pauses once the metric of a given step k is visible (1
//! by default), and waits for the receipt and PAUSED. The seed's recovery point: the pause lands
//! while step k + 1 runs and the worker stops there (its first allocation holds after step k + 1
//! until asked to stop, `HR_FAULT_HOLD_AT`; a stop at another step fails the qualification, and the
//! proof records `pause_sent_after_step`, which `verify.rs` checks lies before the stop). Then it
//! activates and requires that the second allocation restored exactly the receipt's checkpoint and
//! that the run completed. With `kill_during_save_at` the worker is SIGKILLed mid-save instead
//! (`HR_FAULT_KILL_AT`, `max_restarts: 1`) and the restart must restore the step before. With
//! `ranks` N (`qualify managed --ranks N`) the trial asks for N slots and runs N ranks through
//! `launch`, against a one-rank reference; `kill_rank_at` SIGKILLs rank 1 as a step starts
//! (`HR_FAULT_KILL_RANK`): the launcher fails the allocation and the restart must restore the step
//! before.
//!
//! `soak.rs` (`kill_soak`) runs a `managed-training` trial on a devmaster process, SIGKILLs the
//! newest allocation's worker (its pid is in `allocations.jsonl`) at seeded moments (0 to 3 steps
//! after its restore, then 0 to 200 ms, so the soak does not depend on how fast a step is),
//! SIGKILLs and restarts the master once, checks that no acknowledged checkpoint was lost and that
//! the trial completes.
//!
//! `native.rs` (`NativeQualification`) runs a plan three times with the given binary
//! (uninterrupted; stopped after step K; resumed from that run folder in a new process, optionally
//! with a negative control, `hr_proof::Control`), compares `evidence.jsonl` step by step and field
//! by field and writes `proof.json`, naming the plan by its canonical digest (`Plan::sha256`) and
//! its three runs relative to the proof's own folder (`NativeProof::write`; `verify.rs` resolves
//! them there, so `proof verify`, the gate in a trial and preflight read the same folders from any
//! working folder).
//!
//! `managed.rs` (`ManagedQualification`) copies the binary into `OUTPUT/source/`, runs the plan
//! natively with the copy (or, with `--native-proof`, takes a verified native proof's uninterrupted
//! run of the same plan digest and binary sha256), then under `managed_recovery`, compares the
//! evidence (complete and equal at every step) and writes `managed-proof.json`. `soak.rs`'s
//! `SoakQualification` runs the native reference, the soak and the comparison and writes
//! `soak.json`. `verify.rs` re-checks native and managed proofs against the run folders and
//! checkpoints they name (all steps present, the verdict follows, the restored step and the
//! receipt, the source); `verify_any_proof` picks the check by the proof's schema. `backend.rs`
//! (`BackendQualification`, the binary's `qualify openenv|nemo`) runs the native half into
//! `DIR/native/` and, when equal, the managed half against the native proof's run into
//! `DIR/managed/`, the proofs folder the gate reads, and re-checks both.
//!
//! `gate.rs`: a plan longer than the four-step qualification runs under `managed-training` (or is
//! prepared) only with `--proofs DIR`, whose native and managed proofs are re-verified and must be
//! equal, a real pause, and of the same backend, plan family (`Plan::family_sha256`: the plan
//! without name, length and checkpoint schedule), binary and device, or with an explicit
//! `--unqualified` that `allocations.jsonl` records. The device is checked twice: `managed prepare
//! --device KIND`, away from the GPU, compares the kind; `managed-training`, in the trial, compares
//! the kind and the GPU's name with the device it found (`Target`).
//!
//! `preflight.rs` is `cluster preflight`'s checklist before a submission: the master (0.35.x,
//! sign-in, workspace, project, pool and what it offers) and this machine (the shared mount; the
//! config's binary with `cuda` when it runs `--device cuda`, that it starts here and needs no newer
//! glibc than this machine's (`glibc.rs`: the newest `GLIBC_x.y` in its ELF version requirements,
//! read with `object`, against `getconf GNU_LIBC_VERSION`; run in a shell of the job's image, so
//! the image's), plan, every file and folder the plan reads (`inputs`), the checkpoint storage
//! (named in the config, reachable here, a `directory` inside a bind mount), service venv and
//! proofs (verified as the gate verifies them, no run named from qualify's working folder)), each
//! path where the trial will look (`TrialView`: under one of the config's bind mounts, when it has
//! any).
//!
//! Every wait on a running experiment (`driver::poll_run`) fails at once, with the trial log's
//! tail, once the experiment has ended.

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
