//! A backend's qualification, as the gate consumes it: the native qualification of a plan into
//! `DIR/native/`, then, when it is equal, the managed qualification into `DIR/managed/`, which
//! compares with the native proof's uninterrupted run instead of running one; both proofs are
//! then re-checked from their files. `DIR` is the `--proofs DIR` of the long run.

use hr_files::IoResultExt;
use hr_proof::{NativeProof, ProofsDir};

use crate::{
    ManagedOutcome, ManagedQualification, ManagedQualificationOptions, NativeOptions,
    NativeQualification, QualifyError, verify_managed_proof, verify_native_proof,
};

/// A backend's qualification whose plan was checked; [`BackendQualification::run`] fills the
/// proofs folder (which may hold other files, such as the plan; its `native/` and `managed/`
/// must not exist or be empty).
#[derive(Debug)]
pub struct BackendQualification {
    native: NativeQualification,
    managed: ManagedQualificationOptions,
    proofs: ProofsDir,
}

/// How a backend's qualification ended: the native proof, and the managed outcome when the
/// native run was equal (a native difference ends it there).
#[derive(Debug, Clone)]
pub struct BackendOutcome {
    /// The native proof.
    pub native: NativeProof,
    /// The managed qualification, when it ran.
    pub managed: Option<ManagedOutcome>,
}

impl BackendOutcome {
    /// Whether both proofs hold and say equal.
    pub fn equal(&self) -> bool {
        self.native.equal && self.managed.as_ref().is_some_and(|m| m.proof.equal)
    }
}

impl BackendQualification {
    /// The qualification of the plan `managed.plan` for `backend` into the proofs folder
    /// `managed.output` (its `native_proof` is the native half's; the native half runs with the
    /// same binary, device and a stop after step 2). A plan of another backend, or one that does
    /// not load, is [`QualifyError::Refused`].
    pub fn new(
        backend: &str,
        managed: ManagedQualificationOptions,
        source: hr_seal::SourceBinding,
    ) -> Result<Self, QualifyError> {
        let proofs = ProofsDir::new(managed.output.clone());
        let native = NativeQualification::new(NativeOptions {
            binary: managed.binary.clone(),
            plan: managed.plan.clone(),
            output: proofs.native(),
            device: managed.device.clone(),
            stop_after_step: 2,
            control: None,
            source,
        })?;
        let planned = native.plan().environment.backend();
        if planned != backend {
            return Err(QualifyError::Refused(format!(
                "the plan's environment is {planned}, not {backend}: qualify it as `qualify \
                 {planned}`"
            )));
        }
        Ok(Self {
            native,
            managed: ManagedQualificationOptions {
                output: proofs.managed(),
                native_proof: Some(proofs.native_proof()),
                ..managed
            },
            proofs,
        })
    }

    /// Runs the native half, then (when equal) the managed half, and re-checks both proofs.
    pub async fn run(self) -> Result<BackendOutcome, QualifyError> {
        let native_dir = self.proofs.native();
        std::fs::create_dir_all(&native_dir).at("create", &native_dir)?;
        let native = self.native.run()?;
        if !native.equal {
            return Ok(BackendOutcome {
                native,
                managed: None,
            });
        }
        let managed_dir = self.managed.output.clone();
        let managed = ManagedQualification::new(self.managed)?;
        std::fs::create_dir_all(&managed_dir).at("create", &managed_dir)?;
        let managed = managed.run().await?;
        // Both must hold when re-checked from the files alone.
        verify_native_proof(&self.proofs.native_proof())?;
        verify_managed_proof(&self.proofs.managed_proof())?;
        Ok(BackendOutcome {
            native,
            managed: Some(managed),
        })
    }
}
