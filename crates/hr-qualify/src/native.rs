//! The native qualification of a plan: the binary's `train` runs it uninterrupted, stopped after
//! step K, and resumed in a new process (optionally with a negative control applied at resume),
//! and the two runs' evidence is compared field by field at every step. The proof names the plan
//! by its canonical digest, the device every allocation ran on, and the source.

use std::path::{Path, PathBuf};
use std::process::Command;

use hr_files::{IoResultExt, RunDir};
use hr_plan::Plan;
use hr_proof::{Control, EvidenceLine, NATIVE_PROOF_SCHEMA, NativeProof, first_divergence};
use hr_seal::SourceBinding;

use crate::{QualifyError, runs_device};

/// What to qualify.
#[derive(Debug, Clone)]
pub struct NativeOptions {
    /// The binary whose `train` runs the three runs.
    pub binary: PathBuf,
    /// The plan.
    pub plan: PathBuf,
    /// The output folder (`reference/`, `interrupted/`, `resumed/`, `proof.json`).
    pub output: PathBuf,
    /// `train --device` of the runs.
    pub device: String,
    /// Where the interrupted run stops.
    pub stop_after_step: u64,
    /// A negative control applied at resume, which the proof must catch.
    pub control: Option<Control>,
    /// The source the proof binds.
    pub source: SourceBinding,
}

/// A native qualification whose plan and stop were checked; [`NativeQualification::run`] runs
/// it into an output folder the caller has made.
#[derive(Debug)]
pub struct NativeQualification {
    options: NativeOptions,
    plan: Plan,
}

impl NativeQualification {
    /// Reads the plan and checks the stop, before anything is written
    /// ([`QualifyError::Refused`] names what to fix).
    pub fn new(options: NativeOptions) -> Result<Self, QualifyError> {
        let plan =
            Plan::from_file(&options.plan).map_err(|e| QualifyError::Refused(e.to_string()))?;
        if options.stop_after_step == 0 || options.stop_after_step >= plan.steps {
            return Err(QualifyError::Refused(format!(
                "--stop-after-step {} must be between 1 and the plan's steps - 1 ({})",
                options.stop_after_step,
                plan.steps - 1
            )));
        }
        Ok(Self { options, plan })
    }

    /// Runs the three runs, compares them and writes the proof (`equal` says how it ended).
    pub fn run(self) -> Result<NativeProof, QualifyError> {
        let o = &self.options;
        // The runs are named absolutely in memory; the proof file records them relative to
        // itself ([`NativeProof::write`]).
        let out = &std::path::absolute(&o.output).at("resolve", &o.output)?;
        let (reference, interrupted, resumed) = (
            out.join("reference"),
            out.join("interrupted"),
            out.join("resumed"),
        );
        self.train(&reference, &[])?;
        let stop = o.stop_after_step.to_string();
        self.train(&interrupted, &["--stop-after-step", &stop])?;
        // The interrupted run's latest checkpoint: the one its stop saved.
        let from = interrupted.display().to_string();
        let mut extra = vec!["--resume", from.as_str()];
        if let Some(control) = o.control {
            extra.extend(["--control", control.name()]);
        }
        self.train(&resumed, &extra)?;
        let (ours, theirs) = (evidence(&reference)?, evidence(&resumed)?);
        // Empty or truncated evidence is never "equal".
        for (name, lines) in [("reference", &ours), ("resumed", &theirs)] {
            if lines.len() as u64 != self.plan.steps {
                return Err(QualifyError::Failed(format!(
                    "the {name} run left {} steps of evidence, not {}",
                    lines.len(),
                    self.plan.steps
                )));
            }
        }
        let divergence = first_divergence(&ours, &theirs);
        // The plan as the runs read it, digested as every snapshot (and the managed proof) does.
        let ran = Plan::from_file(&RunDir::new(&reference).plan())
            .map_err(|e| QualifyError::Failed(format!("the reference run's plan: {e}")))?;
        let device = runs_device(&[&reference, &interrupted, &resumed])?;
        let proof = NativeProof {
            schema: NATIVE_PROOF_SCHEMA.to_owned(),
            plan_sha256: ran.sha256(),
            steps: self.plan.steps,
            stopped_after: o.stop_after_step,
            control: o.control.map(|c| format!("{c:?}")),
            reference,
            interrupted,
            resumed,
            equal: divergence.is_none(),
            first_divergence: divergence,
            source: o.source.clone(),
            device,
        };
        proof.write(&out.join(hr_proof::NATIVE_PROOF_FILE))?;
        Ok(proof)
    }

    /// The plan.
    pub fn plan(&self) -> &Plan {
        &self.plan
    }

    /// The binary's `train` of the plan into `out` with `extra` arguments.
    fn train(&self, out: &Path, extra: &[&str]) -> Result<(), QualifyError> {
        let o = &self.options;
        run_train(
            &o.binary,
            &o.plan,
            out,
            &[&["--device", &o.device], extra].concat(),
        )
    }
}

/// `binary train --plan PLAN --output OUT ARGS...`, its output on this process's; an exit
/// other than 0 is a failure naming the run folder.
pub(crate) fn run_train(
    binary: &Path,
    plan: &Path,
    out: &Path,
    args: &[&str],
) -> Result<(), QualifyError> {
    tracing::info!("train --output {} {}", out.display(), args.join(" "));
    let status = Command::new(binary)
        .arg("train")
        .arg("--plan")
        .arg(plan)
        .arg("--output")
        .arg(out)
        .args(args)
        .status()
        .map_err(|e| QualifyError::Failed(format!("running train: {e}")))?;
    if !status.success() {
        return Err(QualifyError::Failed(format!(
            "train --output {} failed ({status})",
            out.display()
        )));
    }
    Ok(())
}

/// The evidence lines of the run folder `run`.
pub(crate) fn evidence(run: &Path) -> Result<Vec<EvidenceLine>, QualifyError> {
    Ok(hr_proof::read_evidence(&RunDir::new(run).evidence())?)
}
