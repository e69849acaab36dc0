//! The assessment of a finished run, in one place: [`resolve_run_folder`] finds the run an
//! experiment id names through the master; [`adopt`] verifies the checkpoints the plan's
//! `evaluation` section lists (seal, plan digest, step, run identity, base model); [`assess`]
//! scores each on DEV, selects one, and assesses it, the base model and any compared adapters
//! (e.g. TRL's) on the same HELD-OUT episodes and MGSM items; [`write_evaluation`] writes and
//! seals the report with its plots. The training report of a run ([`write_report`], its plots
//! [`training_plots`]) lives here too, since the evaluation shows it, and the CPU demo's seal
//! ([`seal_demo`]), so `hr-eval` links no signing code.
//!
//! Generic over the Burn backend, as the policy it samples; the binary picks the backend. It
//! trains nothing: the environment, the plan's trainer settings and the checkpoint payload's
//! layout are `hr-train`'s.
//!
//! # In detail
//!
//! The assessment of a finished run (`evaluate`) in one place. `run_folder.rs`
//! (`resolve_run_folder`) first turns an experiment id into its run folder through the master (the
//! experiment's `checkpoint_storage` as this machine sees it, `/determined_shared_fs` inside a task
//! container, plus `hr-run-<exp>-<trial>` of its one trial).
//!
//! `evaluation.rs` (`with_flags`) puts what `evaluate`'s `--dev`, `--held-out`, `--retention`,
//! `--checkpoints` and `--solved` give in place of the plan's `evaluation` fields (or makes the
//! section a plan lacks; it is outside the plan digest, so checkpoints still match) and checks the
//! result as a plan's.
//!
//! `listing.rs` lists the run's checkpoints (a `train` folder's `core/checkpoints.jsonl`, preceded
//! by those of the run it was resumed from up to the resumed step, along the chain `local_import`
//! records; for a managed run folder `<storage>/hr-run-<exp>-<trial>`, the checkpoints in
//! `<storage>` sealed with that trial's run id);
//!
//! `adopt.rs` verifies every checkpoint the plan's `evaluation.checkpoints` lists (two of a managed
//! run at one step refused; seal and trust, manifest, plan digest, step, one run id, base model; a
//! missing, tampered or foreign one is `TrainError::Checkpoint`, never a skip).
//!
//! `assess.rs` checks that the TRAIN, DEV and HELD-OUT task sets share no question
//! (`TrainError::Leak`), scores each checkpoint on DEV only (mean episode reward, the share solved
//! by `evaluation.solved` and each reward function's mean, through the plan's own environment, the
//! same seed for every policy), selects by `SELECTION_RULE`, runs the HELD-OUT episodes for the
//! selected checkpoint and the base model, and answers the MGSM suite greedily in one batch per
//! policy (retention per language): the plan's `evaluation.retention_file` (MGSM's format,
//! `hr_eval::mgsm_suite`) or the twelve authored items, the report naming which set with its digest
//! (`evaluation.retention: false` skips it). Adapters trained elsewhere (`Comparison`, `evaluate
//! --compare NAME=DIR`: PEFT folders such as TRL's `save_pretrained` output) are loaded before any
//! episode runs and get the same HELD-OUT episodes and MGSM items; they never take part in the
//! selection, and the report names each by the SHA-256 of its weights.
//!
//! `report.rs` (`write_evaluation`) writes `report.json`, `report.md` and the plots (the run's
//! training plots, DEV by checkpoint, HELD-OUT, MGSM retention), with sample completions
//! (`samples.rs`: the best and worst two that `hr_train::EpisodeScore` keeps, for the selected
//! checkpoint and the base) and seals them, with the services' log as `payload/service.log`, as one
//! snapshot bound to the plan's digest and the adopted checkpoints.
//!
//! `training_report.rs` is the training report `train` and `managed-training` write (`report.md`
//! with SVG plots drawn with `hr-plot`: reward with a ±1 std band and the DEV reward where logged,
//! KL when logged, entropy, completion length; the last step's best and worst completions from the
//! run's completions log).

mod adopt;
mod assess;
mod demo;
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
pub use demo::seal_demo;
pub use error::ReportError;
pub use evaluation::{EvaluationFlags, RetentionFlag, evaluation, parse_solved, with_flags};
pub use report::{SERVICE_LOG, write_evaluation};
pub use run_folder::{RunFolderError, resolve_run_folder};
pub use training_report::{training_plots, write_report};
