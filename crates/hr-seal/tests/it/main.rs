//! Integration tests of hr-seal: the fault-injection matrix of `checkpoints.md` §4 (a writer
//! stopped at each stage, tampering, swaps, layout attacks, stale pointers, unknown schemas) and
//! properties of manifests and seals. Every fault test also proves the last good snapshot is
//! byte-identical afterwards.

mod faults;
mod properties;
mod support;
