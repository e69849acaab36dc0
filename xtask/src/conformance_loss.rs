//! `cargo xtask conformance loss`: the GRPO loss against TRL 1.16's own
//! `GRPOTrainer._compute_loss`, in the Hugging Face venv.
//!
//! `xtask/conformance/trl_loss.py` calls the installed TRL on fixed inputs for every loss type
//! × importance-sampling level with each variant (clipping, δ, KL with and without the bias
//! correction, the off-policy and high-entropy masks, the entropy bonus, gradient accumulation)
//! and writes the cases; `hr-grpo`'s `trl_loss` test then runs our loss on them, requiring TRL's
//! loss, gradients and metrics within 1e-6. The test's own copy of the cases
//! (`crates/hr-grpo/tests/data/trl_loss.jsonl`) was written by the same script.

use std::path::Path;

use anyhow::{Context, Result};

use crate::bench_trl::{HF_PACKAGES, HF_VENV};
use crate::cache::venv;
use crate::conformance_families::{finish, offline, work_dir};

/// Returns (passed, failed).
pub(crate) fn loss(root: &Path) -> Result<(u64, u64)> {
    let python = venv(HF_VENV, HF_PACKAGES)?.join("bin/python");
    let work = work_dir(root, "loss")?;
    let cases = work.join("trl_loss.jsonl");
    let mut write = offline(&python);
    write
        .args(["-W", "ignore"])
        .arg(root.join("xtask/conformance/trl_loss.py"))
        .arg(&cases);
    crate::run(write).context("TRL's loss on the cases")?;
    let mut test = crate::ci::tests();
    test.args(["--test", "trl_loss"])
        .env("HR_TRL_LOSS_CASES", &cases);
    let verdict = match crate::run(test) {
        Ok(()) => (1, 0),
        Err(e) => {
            eprintln!("conformance loss: {e}");
            (0, 1)
        }
    };
    finish(&work, verdict)
}
