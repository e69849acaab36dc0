//! hr-policy against tiny random models written in the real HF formats, and its GEMM probe.

mod adapters;
mod dtype;
mod generation;
mod logits;
mod probe;
mod reference;
mod weights;

use std::path::Path;

use burn::backend::Flex;
use hr_policy::Policy;
use hr_tests::tiny_model::{TinyModel, TinySpec, write_tiny_model};

/// The CPU backend the binary uses by default.
type Cpu = Flex;

/// Writes a tiny model into `dir` and loads it through the real path.
fn tiny(dir: &Path, spec: &TinySpec) -> anyhow::Result<(TinyModel, Policy<Cpu>)> {
    let written = write_tiny_model(dir, spec);
    let policy = Policy::<Cpu>::load(dir, &Default::default())?;
    Ok((written, policy))
}
