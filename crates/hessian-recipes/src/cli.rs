//! The command-line interface (clap).

use std::path::PathBuf;

use clap::{Args, Parser, Subcommand};

/// GRPO fine-tuning of LM agents on Determined 0.35, with checkpoints that survive pause,
/// preemption and restart exactly.
#[derive(Debug, Parser)]
#[command(name = "hessian-recipes", version)]
pub(crate) struct Cli {
    #[command(subcommand)]
    pub(crate) command: Command,
}

#[derive(Debug, Subcommand)]
pub(crate) enum Command {
    /// Run the authored evaluation fixture on the CPU with a scripted policy (no GPU, model,
    /// provider key or Python needed). The output folder becomes a sealed snapshot: payload/
    /// holds results.jsonl, report.json and report.md; MANIFEST.json and SEAL.dsse.json seal them.
    Demo(DemoArgs),
    /// Determined cluster configs: render the templates, check config files, build the bounded
    /// CPU command line.
    Cluster {
        #[command(subcommand)]
        command: ClusterCommand,
    },
    /// Run a local Determined-0.35-compatible master on loopback (for local runs and tests),
    /// keeping its state in --state-dir so a restart loses nothing. Stops on Ctrl-C / SIGTERM,
    /// killing the trial and command processes it started.
    Devmaster(DevmasterArgs),
    /// Sealed snapshots (checkpoints and run outputs).
    Snapshot {
        #[command(subcommand)]
        command: SnapshotCommand,
    },
}

#[derive(Debug, Subcommand)]
pub(crate) enum SnapshotCommand {
    /// Verify a sealed snapshot folder: seal, manifest digest, identity, file set, sizes, digests
    /// and structure, in that order. Prints the verdict and a manifest summary; exits 0 when
    /// valid and 3 with the typed error (e.g. `DigestMismatch`) when not.
    Verify {
        /// The snapshot folder (holding MANIFEST.json and SEAL.dsse.json).
        dir: PathBuf,
        /// Require a valid signature by this Ed25519 public key (64 hex characters, or a file
        /// holding them). Repeatable; without it a digest-only seal is accepted.
        #[arg(long)]
        key: Vec<String>,
        /// Require this run id.
        #[arg(long)]
        run_id: Option<String>,
        /// Require this config digest.
        #[arg(long)]
        config_sha256: Option<String>,
        /// Require this step.
        #[arg(long)]
        step: Option<u64>,
    },
}

#[derive(Debug, Args)]
pub(crate) struct DevmasterArgs {
    /// Loopback address to listen on, e.g. 127.0.0.1:8080 (port 0 picks a free port).
    #[arg(long, default_value = "127.0.0.1:8080")]
    pub(crate) listen: std::net::SocketAddr,
    /// Folder for the master's state, trial work folders and default checkpoint storage.
    #[arg(long)]
    pub(crate) state_dir: PathBuf,
    /// Also write each trial's info files here; the real Python Core API reads only
    /// /run/determined/info (so two Python trials must not run at once).
    #[arg(long)]
    pub(crate) info_dir: Option<PathBuf>,
    /// Seconds a preempted allocation may take to exit before it is killed (upstream: 3600).
    #[arg(long, default_value_t = 3600)]
    pub(crate) preemption_timeout_seconds: u64,
    /// Append every request's method, path and body (never headers or tokens) to this JSONL
    /// file, e.g. to capture what a real client sends.
    #[arg(long)]
    pub(crate) record_requests: Option<PathBuf>,
}

#[derive(Debug, Args)]
pub(crate) struct DemoArgs {
    /// Output folder; must not exist or be empty (earlier results are never overwritten).
    #[arg(long)]
    pub(crate) output: PathBuf,
}

#[derive(Debug, Subcommand)]
pub(crate) enum ClusterCommand {
    /// Render every template of a profile into a fresh folder.
    Render {
        /// `jaif` (the shared cluster) or `local` (this machine, paths under <root>/runs).
        #[arg(long)]
        profile: hr_config::ProfileName,
        /// Output folder; must not exist or be empty.
        #[arg(long)]
        out_dir: PathBuf,
        /// The checkout the `local` profile points at (default: the current folder).
        #[arg(long)]
        root: Option<PathBuf>,
    },
    /// Validate config files against Determined 0.35's schemas and our rules. Exits 0 when all
    /// are valid, 2 otherwise, printing each problem with its field and fix.
    Check {
        /// `experiment` or `command`; by default a file with a `searcher` is an experiment.
        #[arg(long)]
        kind: Option<hr_config::ConfigKind>,
        /// The files to check.
        #[arg(required = true)]
        files: Vec<PathBuf>,
    },
    /// Print the bounded `det command run` line that runs this binary on the cluster's CPU
    /// auxiliary capacity, e.g. `cluster cpu-command --output runs/jaif-cpu-fixture-01 -- demo`.
    /// The output folder is appended as `--output`; an existing one is refused.
    CpuCommand {
        /// The run's output folder, relative to the checkout (e.g. `runs/NAME`).
        #[arg(long)]
        output: PathBuf,
        /// Wall-clock limit in seconds before TERM (KILL follows 30 s later).
        #[arg(long, default_value_t = 900)]
        timeout_seconds: u64,
        /// The subcommand and arguments to run, after `--`.
        #[arg(last = true, required = true)]
        args: Vec<String>,
    },
}
