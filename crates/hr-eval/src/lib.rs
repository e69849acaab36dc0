//! Evaluation: the authored task suites (arithmetic word problems, tool-call formatting, an
//! MGSM-format multilingual math set), the scoring rules that judge a policy's answers, the
//! [`Policy`] interface with the deterministic [`FixturePolicy`] of the CPU demo, and the reports
//! (`results.jsonl`, `report.json`, `report.md`).
//!
//! This crate knows nothing about models, tensors, Determined or the network: a policy is anything
//! that turns a prompt into text. Checkpoint evaluation plugs a real policy in behind the same
//! trait; the scoring and reports stay the same.
//!
//! # In detail
//!
//! The authored suites (`suites/*.jsonl`, embedded), the one scoring rule that training rewards and
//! evaluation share (`score.rs`: the number after the last GSM8K `####`, else the last number, with
//! thousands separators and signs; the first `<tool_call>` JSON; property-tested), the `Policy`
//! trait (`respond_all` lets a model answer a suite in one batch) with the scripted `FixturePolicy`
//! (`fixtures/fixture-policy.jsonl`, some answers wrong on purpose), the report renderer
//! (`results.jsonl`, `report.json`, `report.md`). The demo's seal is `hr-assess`'s, so this crate,
//! which the environments read, links no signing code.

mod error;
mod policy;
mod report;
mod run;
mod score;
mod suite;

pub use error::Error;
pub use policy::{FixturePolicy, Policy};
pub use report::{ReportMeta, render_reports};
pub use run::{Evaluation, ItemResult, SuiteScore, evaluate};
pub use score::{
    CallMatch, Verdict, call_matches, final_number, number_matches, parse_tool_call, score,
};
pub use suite::{Expected, Suite, SuiteKind, Task, builtin_suites, mgsm_suite};

/// This crate's version, for reports.
pub const VERSION: &str = env!("CARGO_PKG_VERSION");
