//! `hessian-recipes demo`: the authored evaluation fixture with the scripted policy.

use std::{
    io::{IsTerminal, Write},
    process::ExitCode,
    time::Instant,
};

use anyhow::Context;
use hr_eval::{FixturePolicy, ReportMeta, builtin_suites, evaluate, write_reports};

use crate::{cli::DemoArgs, output};

pub(crate) fn run(args: &DemoArgs) -> anyhow::Result<ExitCode> {
    let started = Instant::now();
    // Load everything before creating the folder, so bad data leaves nothing behind.
    let suites = builtin_suites().context("loading the authored suites")?;
    let mut policy = FixturePolicy::builtin().context("loading the fixture policy")?;
    output::ensure_fresh(&args.output)?;
    let tty = std::io::stderr().is_terminal();
    let eval = evaluate(&suites, &mut policy, |suite, done, total| {
        if tty {
            eprint!("\r{suite}: {done}/{total}");
            if done == total {
                eprintln!();
            }
            let _ = std::io::stderr().flush();
        } else if done == total {
            eprintln!("{suite}: {done}/{total}");
        }
    })?;
    output::create_fresh(&args.output)?;
    let meta = ReportMeta {
        tool_versions: vec![
            (
                "hessian-recipes".to_owned(),
                env!("CARGO_PKG_VERSION").to_owned(),
            ),
            ("hr-eval".to_owned(), hr_eval::VERSION.to_owned()),
        ],
        elapsed_ms: u64::try_from(started.elapsed().as_millis()).unwrap_or(u64::MAX),
    };
    let files = write_reports(&args.output, &eval, &meta)?;
    for s in &eval.suites {
        println!(
            "{:<12} {:>3}/{:<3} {:>6.1}%",
            s.suite,
            s.correct,
            s.items,
            100.0 * s.accuracy
        );
    }
    for f in files {
        println!("wrote {}", f.display());
    }
    Ok(ExitCode::SUCCESS)
}
