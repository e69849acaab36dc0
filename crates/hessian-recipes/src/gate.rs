//! The gate before sustained managed training: a plan longer than the four-step qualification
//! runs only with verified proofs (`--proofs DIR`, the output of `cargo xtask qualify BACKEND`)
//! of the same backend, plan family and binary, or with an explicit `--unqualified`, which the
//! run records.

use std::path::Path;

use hr_plan::Plan;
use hr_qualify::{verify_managed_proof, verify_native_proof};
use hr_seal::SourceBinding;

use crate::Refused;

/// The seed's qualification length: longer plans are sustained training.
pub(crate) const QUALIFICATION_STEPS: u64 = 4;

fn refused(dir: &Path, why: impl std::fmt::Display) -> anyhow::Error {
    Refused(format!(
        "--proofs {}: {why}; qualify this binary on a plan of this family (`cargo xtask qualify \
         openenv|nemo`, or `qualify native` and `qualify managed` into DIR/native and \
         DIR/managed), or pass --unqualified",
        dir.display()
    ))
    .into()
}

/// Checks the proofs in `dir` for `plan` on `backend`, run by the binary `source`.
pub(crate) fn check(
    dir: &Path,
    plan: &Plan,
    backend: &str,
    source: &SourceBinding,
) -> anyhow::Result<()> {
    let native = verify_native_proof(&dir.join("native/proof.json"))
        .map_err(|e| refused(dir, format!("the native proof does not hold: {e}")))?;
    let managed = verify_managed_proof(&dir.join("managed/managed-proof.json"))
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
    let qualified = Plan::from_file(&native.reference.join("plan.json"))
        .map_err(|e| refused(dir, format!("the qualified plan: {e}")))?;
    if hr_train::family_sha256(&qualified) != hr_train::family_sha256(plan) {
        return Err(refused(
            dir,
            "the qualified plan is of another family (model, LoRA, environment, GRPO, optimizer \
             or seeds differ)",
        ));
    }
    Ok(())
}
