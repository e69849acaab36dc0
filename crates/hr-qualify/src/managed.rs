//! The managed qualification of a plan: the plan natively and uninterrupted (or, given a native
//! proof, that qualification's uninterrupted run by the same binary), then as a Determined trial
//! (`managed-training` on a devmaster or a real master) paused after an optimizer step and
//! activated again, run by one immutable copy of the binary ([`managed_recovery`]); the evidence
//! of every step must be equal field by field and the restore exactly the receipt's checkpoint.
//! Writes `managed-proof.json`.

use std::path::{Path, PathBuf};
use std::process::Command;
use std::time::Duration;

use hr_files::IoResultExt;
use hr_plan::{Environment, Plan};
use hr_proof::{CoreIdentity, MANAGED_PROOF_SCHEMA, ManagedProof, first_divergence};

use crate::native::{evidence, run_train};
use crate::{
    ManagedOptions, ManagedRecovery, QualifyError, managed_recovery, record_source, runs_device,
    verify_native_proof,
};

/// What to qualify.
#[derive(Debug, Clone)]
pub struct ManagedQualificationOptions {
    /// The binary whose copy runs every run.
    pub binary: PathBuf,
    /// The commit the binary was built from.
    pub commit: String,
    /// The plan.
    pub plan: PathBuf,
    /// The output folder (`source/`, `reference/`, `managed/`, `managed-proof.json`).
    pub output: PathBuf,
    /// The checkout.
    pub root: PathBuf,
    /// A native proof whose uninterrupted run is the reference (instead of a new one).
    pub native_proof: Option<PathBuf>,
    /// A real master; `None` starts a devmaster.
    pub master: Option<String>,
    /// `--device` of the runs.
    pub device: String,
    /// Whether the trial asks for a GPU.
    pub gpu: bool,
    /// Pause once this step's metric shows (the worker stops at the next step).
    pub pause_after_step: u64,
    /// Instead of a pause, SIGKILL the worker during this step's save.
    pub kill_during_save_at: Option<u64>,
    /// The trial's ranks, one per slot, started by `hessian-recipes launch` (1: one process).
    /// The reference runs as one rank, so an equal proof also shows the rank count changed no
    /// bit.
    pub ranks: usize,
    /// Instead of a pause, SIGKILL rank 1 as this step starts.
    pub kill_rank_at: Option<u64>,
    /// Limit for each wait, and the trial's wall budget.
    pub timeout: Duration,
}

/// How a managed qualification ended.
#[derive(Debug, Clone)]
pub struct ManagedOutcome {
    /// The proof as written.
    pub proof: ManagedProof,
    /// What the managed run did.
    pub recovery: ManagedRecovery,
    /// Steps of evidence the reference and the managed run left.
    pub evidence_steps: (usize, usize),
}

/// A managed qualification whose plan, flags and native proof were checked
/// ([`ManagedQualification::new`]); [`ManagedQualification::run`] runs it into an output folder
/// the caller has made.
#[derive(Debug)]
pub struct ManagedQualification {
    options: ManagedQualificationOptions,
    plan: Plan,
    native_reference: Option<PathBuf>,
}

fn refused(message: String) -> QualifyError {
    QualifyError::Refused(message)
}

impl ManagedQualification {
    /// Reads the plan and checks the flags and the native proof before anything is written
    /// ([`QualifyError::Refused`] names what to fix).
    pub fn new(options: ManagedQualificationOptions) -> Result<Self, QualifyError> {
        let plan = Plan::from_file(&options.plan).map_err(|e| refused(e.to_string()))?;
        for (flag, step) in [
            ("--kill-during-save-at", options.kill_during_save_at),
            ("--kill-rank-at", options.kill_rank_at),
        ] {
            if step.is_some_and(|k| k < 2 || k >= plan.steps || plan.checkpoints.every != 1) {
                return Err(refused(format!(
                    "{flag} needs a step between 2 and {} and a plan that saves every step",
                    plan.steps - 1
                )));
            }
        }
        if options.kill_during_save_at.is_some() && options.kill_rank_at.is_some() {
            return Err(refused(
                "--kill-during-save-at and --kill-rank-at: give one".to_owned(),
            ));
        }
        let ranks = options.ranks;
        if !plan.parallel.admits(ranks) {
            return Err(refused(format!(
                "--ranks {ranks} must divide the plan's parallel.shards ({})",
                plan.parallel.shards
            )));
        }
        if options.kill_rank_at.is_some() && ranks < 2 {
            return Err(refused("--kill-rank-at needs --ranks 2 or more".to_owned()));
        }
        // The pause lands while the next step runs, and that step must not be the last.
        if options.pause_after_step == 0 || options.pause_after_step + 2 > plan.steps {
            return Err(refused(format!(
                "--pause-after-step {} must be between 1 and the plan's steps - 2 ({}): the \
                 worker stops at the step after it, which must not be the last",
                options.pause_after_step,
                plan.steps.saturating_sub(2)
            )));
        }
        let native_reference = options
            .native_proof
            .as_deref()
            .map(|path| native_reference(path, &plan, &options.binary))
            .transpose()?;
        Ok(Self {
            options,
            plan,
            native_reference,
        })
    }

    /// Runs the reference (unless the native proof gave it) and the managed run, compares them
    /// and writes the proof (`equal` says how it ended).
    pub async fn run(self) -> Result<ManagedOutcome, QualifyError> {
        let o = &self.options;
        let absolute = |p: &Path| std::path::absolute(p).at("resolve", p);
        let (output, plan_path) = (absolute(&o.output)?, absolute(&o.plan)?);
        let record = record_source(&o.binary, &o.commit, &o.root, &output)?;
        let copy = output.join(&record.binary);
        let reference = match self.native_reference {
            // The native qualification's uninterrupted run, made on the device by this binary.
            Some(reference) => reference,
            None => {
                let reference = output.join("reference");
                tracing::info!("qualify managed: native reference run");
                run_train(&copy, &plan_path, &reference, &["--device", &o.device])?;
                reference
            }
        };
        tracing::info!(
            "qualify managed: managed run, paused once step {}'s metric shows (stopping at step {})",
            o.pause_after_step,
            o.pause_after_step + 1
        );
        let backend = self.plan.environment.backend();
        // More than one rank: this binary's launcher starts one per slot.
        let launcher = [
            copy.display().to_string(),
            "launch".to_owned(),
            "--".to_owned(),
        ];
        let entrypoint = launcher
            .into_iter()
            .filter(|_| o.ranks > 1)
            .chain([
                copy.display().to_string(),
                "managed-training".to_owned(),
                "--plan".to_owned(),
                plan_path.display().to_string(),
                "--backend".to_owned(),
                backend.to_owned(),
                "--max-wall-seconds".to_owned(),
                o.timeout.as_secs().to_string(),
                "--device".to_owned(),
                o.device.clone(),
            ])
            // The qualification run is by nature not yet qualified.
            .chain(
                (self.plan.steps > hr_plan::QUALIFICATION_STEPS)
                    .then(|| "--unqualified".to_owned()),
            )
            .collect();
        let recovery = managed_recovery(&ManagedOptions {
            output: output.join("managed"),
            root: o.root.clone(),
            master: o.master.clone(),
            gpu: o.gpu,
            entrypoint,
            steps: self.plan.steps,
            pause_after_step: o.pause_after_step,
            timeout: o.timeout,
            kill_during_save_at: o.kill_during_save_at,
            ranks: o.ranks,
            kill_rank_at: o.kill_rank_at,
        })
        .await?;
        let (ours, theirs) = (evidence(&reference)?, evidence(&recovery.run_dir)?);
        // Empty or truncated evidence is never "equal".
        let steps = self.plan.steps;
        let complete = ours.len() as u64 == steps && theirs.len() as u64 == steps;
        let divergence = first_divergence(&ours, &theirs);
        let proof = ManagedProof {
            schema: MANAGED_PROOF_SCHEMA.to_owned(),
            plan_sha256: self.plan.sha256(),
            backend: backend.to_owned(),
            steps,
            device: runs_device(&[&reference, &recovery.run_dir])?,
            reference,
            run_dir: recovery.run_dir.clone(),
            experiment_id: recovery.experiment_id.into(),
            trial_id: recovery.trial_id.into(),
            interruption: recovery.interruption.clone(),
            checkpoints_listed: recovery.checkpoints_listed,
            equal: complete && divergence.is_none(),
            first_divergence: divergence,
            core: CoreIdentity {
                implementation: "hr-core".to_owned(),
                version: env!("CARGO_PKG_VERSION").to_owned(),
                binary_sha256: record.binding.binary_sha256.clone().unwrap_or_default(),
            },
            source: record.binding,
            master_version: recovery.master_version.clone(),
            master_url: recovery.master_url.clone(),
            service_package: service_package(&self.plan)?,
        };
        proof.write(&output.join(hr_proof::MANAGED_PROOF_FILE))?;
        Ok(ManagedOutcome {
            proof,
            recovery,
            evidence_steps: (ours.len(), theirs.len()),
        })
    }
}

/// The environment server's package and version, read from the service's own Python.
fn service_package(plan: &Plan) -> Result<Option<String>, QualifyError> {
    let (python, package) = match &plan.environment {
        Environment::Fixture { .. } | Environment::Dataset { .. } => return Ok(None),
        Environment::Openenv { python, .. } => (python, "openenv-core"),
        Environment::Nemo { python, .. } => (python, "nemo-gym"),
    };
    let out = Command::new(python)
        .args([
            "-c",
            &format!("import importlib.metadata as m; print(m.version({package:?}))"),
        ])
        .output()
        .map_err(|e| {
            QualifyError::Failed(format!(
                "asking {} for the {package} version: {e}",
                python.display()
            ))
        })?;
    if !out.status.success() {
        return Err(QualifyError::Failed(format!(
            "{} has no {package} package: {}",
            python.display(),
            String::from_utf8_lossy(&out.stderr).trim()
        )));
    }
    Ok(Some(format!(
        "{package} {}",
        String::from_utf8_lossy(&out.stdout).trim()
    )))
}

/// The uninterrupted run of the native proof at `path`, once the proof holds and is of this
/// plan and of `binary`; refused otherwise.
fn native_reference(path: &Path, plan: &Plan, binary: &Path) -> Result<PathBuf, QualifyError> {
    let refuse = |why: String| refused(format!("--native-proof {}: {why}", path.display()));
    let native = verify_native_proof(path).map_err(|e| refuse(e.to_string()))?;
    if native.plan_sha256 != plan.sha256() {
        return Err(refuse(
            "it qualifies another plan (its plan_sha256 differs)".into(),
        ));
    }
    let (_, ours) = hr_seal::hash_file(binary)?;
    if native.source.binary_sha256.as_deref() != Some(ours.as_str()) {
        return Err(refuse(format!(
            "it was made by another binary (sha256 {}, this one {ours}): qualify both halves \
             with one build",
            native
                .source
                .binary_sha256
                .as_deref()
                .unwrap_or("unrecorded")
        )));
    }
    // The proof names it as seen from where it was verified: this folder.
    let reference = std::path::absolute(&native.reference).at("resolve", &native.reference)?;
    tracing::info!(
        "qualify managed: the reference is the native proof's uninterrupted run {}",
        reference.display()
    );
    Ok(reference)
}
