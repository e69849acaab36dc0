//! The gate before sustained managed training: a plan longer than the four-step qualification
//! runs only with verified proofs (`--proofs DIR`, the output of `cargo xtask qualify BACKEND`)
//! of the same backend, plan family, binary and device, or with an explicit `--unqualified`,
//! which the run records.

use std::path::Path;

use hr_files::RunDir;
use hr_plan::Plan;
use hr_plan::QUALIFICATION_STEPS;
use hr_proof::{Device, ProofsDir};
use hr_seal::SourceBinding;

use crate::{QualifyError, verify_managed_proof, verify_native_proof};

fn refused(dir: &Path, why: impl std::fmt::Display) -> QualifyError {
    QualifyError::Refused(format!(
        "--proofs {}: {why}; qualify this binary on a plan of this family (`cargo xtask qualify \
         openenv|nemo`, or `qualify native` and `qualify managed` into DIR/native and \
         DIR/managed), or pass --unqualified",
        dir.display()
    ))
}

/// Where the main run will run: the device itself inside the trial, only its kind where the run
/// is prepared (away from the GPU it will get).
pub enum Target<'a> {
    /// `managed prepare --device KIND` (`cpu`, `cuda`, `vulkan`).
    Kind(&'a str),
    /// `managed-training`, on the device it found.
    Device(&'a Device),
}

impl Target<'_> {
    /// Why a proof made on `made_on` does not hold here, if it does not.
    fn refuses(&self, made_on: &Device) -> Option<String> {
        match self {
            Target::Kind(kind) => (made_on.kind != *kind)
                .then(|| format!("made on {made_on}, not on --device {kind}")),
            Target::Device(device) => made_on.mismatch(device),
        }
    }
}

/// The gate for `plan` run by the binary `source` on `target`: the proofs in `proofs` hold for
/// it, or the plan is no longer than the qualification, or the run is `unqualified` by choice.
pub fn require(
    plan: &Plan,
    proofs: Option<&Path>,
    unqualified: bool,
    source: &SourceBinding,
    target: &Target<'_>,
) -> Result<(), QualifyError> {
    match (proofs, unqualified) {
        (Some(dir), _) => check(dir, plan, source, target),
        (None, false) if plan.steps > QUALIFICATION_STEPS => Err(QualifyError::Refused(format!(
            "the plan runs {} steps, more than the {QUALIFICATION_STEPS}-step qualification: pass \
             --proofs DIR (DIR/native from `qualify native`, DIR/managed from `qualify managed` \
             of a plan of this family, as `cargo xtask qualify openenv|nemo` writes them) or \
             --unqualified",
            plan.steps
        ))),
        (None, _) => Ok(()),
    }
}

/// Checks the proofs in `dir` for `plan`, run by the binary `source` on `target`.
fn check(
    dir: &Path,
    plan: &Plan,
    source: &SourceBinding,
    target: &Target<'_>,
) -> Result<(), QualifyError> {
    let backend = plan.environment.backend();
    let proofs = ProofsDir::new(dir);
    let native = verify_native_proof(&proofs.native_proof())
        .map_err(|e| refused(dir, format!("the native proof does not hold: {e}")))?;
    let managed = verify_managed_proof(&proofs.managed_proof())
        .map_err(|e| refused(dir, format!("the managed proof does not hold: {e}")))?;
    if !native.equal || !managed.equal {
        return Err(refused(dir, "a proof says the resumed run differs"));
    }
    // A managed recovery proof needs an actual interruption: the receipt's checkpoint restored
    // by the trial's second allocation.
    let i = &managed.interruption;
    if i.kind != "pause" || i.uuid_at_pause.as_deref() != Some(i.uuid_at_restore.as_str()) {
        return Err(refused(
            dir,
            "the managed proof has no pause restored from its receipt",
        ));
    }
    if managed.backend != backend {
        return Err(refused(
            dir,
            format!(
                "the proofs are for backend {}, not {backend}",
                managed.backend
            ),
        ));
    }
    // A proof holds for the device it was made on: another kind or GPU model needs fresh ones.
    for (name, made_on) in [("native", &native.device), ("managed", &managed.device)] {
        if let Some(why) = target.refuses(made_on) {
            return Err(refused(dir, format!("the {name} proof was {why}")));
        }
    }
    // Another binary (a consumed-source change) needs fresh proofs.
    for (name, proof_source) in [("native", &native.source), ("managed", &managed.source)] {
        if proof_source.commit != source.commit
            || proof_source.binary_sha256 != source.binary_sha256
        {
            return Err(refused(
                dir,
                format!(
                    "the {name} proof was made by commit {} (binary {:?}), this is {} ({:?})",
                    proof_source.commit,
                    proof_source.binary_sha256,
                    source.commit,
                    source.binary_sha256
                ),
            ));
        }
    }
    let qualified = Plan::from_file(&RunDir::new(&native.reference).plan())
        .map_err(|e| refused(dir, format!("the qualified plan: {e}")))?;
    if qualified.family_sha256() != plan.family_sha256() {
        return Err(refused(
            dir,
            "the qualified plan is of another family (model, LoRA, environment, GRPO, optimizer \
             or seeds differ)",
        ));
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    fn device(kind: &str, name: &str) -> Device {
        Device::new(kind, name, "burn 0.21.0")
    }

    #[test]
    fn a_proof_holds_on_its_own_device_kind_and_model_only() {
        let h200 = device("cuda", "NVIDIA H200");
        let cpu = device("cpu", "x86_64");
        // Preparing, away from the GPU: the kind alone.
        assert_eq!(Target::Kind("cuda").refuses(&h200), None);
        assert_eq!(
            Target::Kind("cuda").refuses(&cpu).as_deref(),
            Some("made on cpu: x86_64 (burn 0.21.0), not on --device cuda")
        );
        // In the trial: the model too.
        assert_eq!(Target::Device(&h200).refuses(&h200.clone()), None);
        let a100 = device("cuda", "NVIDIA A100-SXM4-80GB");
        assert!(
            Target::Device(&a100)
                .refuses(&h200)
                .is_some_and(|why| why.contains("NVIDIA H200") && why.contains("A100"))
        );
    }
}
