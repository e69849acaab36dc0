//! Integration tests of hr-seal: the fault-injection matrix of `checkpoints.md` §4 (real SIGKILLs
//! of a writer process at each stage, tampering, swaps, layout attacks, step rules, concurrent
//! writers, stale pointers, unknown schemas) and properties of manifests and seals. Every fault
//! test also proves the last good snapshot is byte-identical afterwards.

mod faults;
mod kills;
mod properties;
mod support;
