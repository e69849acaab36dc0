//! The `hessian-recipes` command line, composed from the library crates: the CPU demo fixture
//! (`demo`) and the Determined cluster tooling (`cluster render|check|cpu-command`). It parses
//! arguments, calls the libraries and maps errors to exit codes (0 ok, 1 failure, 2 bad input or
//! a refused output folder); it holds no domain logic of its own.
#![allow(clippy::print_stdout, clippy::print_stderr)]

mod cli;
mod cluster;
mod demo;
mod output;

use std::process::ExitCode;

use clap::Parser;

pub use output::Refused;

/// Runs the command line and returns the process exit code.
pub fn main() -> ExitCode {
    let cli = cli::Cli::parse();
    match run(cli) {
        Ok(code) => code,
        Err(err) => {
            let code = if err.downcast_ref::<Refused>().is_some() {
                2
            } else {
                1
            };
            eprintln!("error: {err:#}");
            ExitCode::from(code)
        }
    }
}

fn run(cli: cli::Cli) -> anyhow::Result<ExitCode> {
    match cli.command {
        cli::Command::Demo(args) => demo::run(&args),
        cli::Command::Cluster { command } => cluster::run(command),
    }
}
