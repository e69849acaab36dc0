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
    /// provider key or Python needed) and write results.jsonl, report.json and report.md.
    Demo(DemoArgs),
    /// Determined cluster configs: render the templates, check config files, build the bounded
    /// CPU command line.
    Cluster {
        #[command(subcommand)]
        command: ClusterCommand,
    },
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
