//! The assessment of a finished run, in one place: [`resolve_run_folder`] finds the run an
//! experiment id names through the master; [`adopt`] verifies the checkpoints the plan's
//! `evaluation` section lists (seal, plan digest, step, run identity, base model); [`assess`]
//! scores each on DEV, selects one, and assesses it, the base model and any compared adapters
//! (e.g. TRL's) on the same HELD-OUT episodes and MGSM items; [`write_evaluation`] writes and
//! seals the report with its plots. The training report of a run ([`write_report`], its plots
//! [`training_plots`]) lives here too, since the evaluation shows it.
//!
//! Generic over the Burn backend, as the policy it samples; the binary picks the backend. It
//! trains nothing: the environment, the plan's trainer settings and the checkpoint payload's
//! layout are `hr-train`'s.

mod adopt;
mod assess;
mod error;
mod evaluation;
mod listing;
mod report;
mod run_folder;
mod samples;
mod training_report;

pub use adopt::{Adopted, adopt};
pub use assess::{
    Assessment, CheckpointScore, ComparedScore, Comparison, RETENTION_SKIPPED, Retention,
    SELECTION_RULE, assess, check_disjoint,
};
pub use error::ReportError;
pub use evaluation::{EvaluationFlags, RetentionFlag, evaluation, parse_solved, with_flags};
pub use report::{SERVICE_LOG, write_evaluation};
pub use run_folder::{RunFolderError, resolve_run_folder};
pub use training_report::{training_plots, write_report};
