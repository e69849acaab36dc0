//! Integration tests of hr-config: Determined's own schema test vectors, our rules, the
//! templates (validity and drift), and render/parse round trips.

mod fuzz;
mod roundtrip;
mod rules;
mod schema_cases;
mod templates;

use std::path::PathBuf;

/// The repository root (two levels above this crate).
fn repo_root() -> PathBuf {
    PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("../..")
}
