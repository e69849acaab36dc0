//! `hessian-recipes demo`: runs the authored suites with the scripted policy, shows progress,
//! has `hr_assess::seal_demo` seal the output folder and prints the scores.

use std::{
    io::{IsTerminal, Write},
    process::ExitCode,
    time::Instant,
};

use anyhow::Context;
use hr_assess::seal_demo;
use hr_eval::{FixturePolicy, ReportMeta, builtin_suites, evaluate};

use crate::{cli::DemoArgs, output};

pub(crate) fn run(args: &DemoArgs) -> anyhow::Result<ExitCode> {
    let started = Instant::now();
    // Load everything before creating the folder, so bad data leaves nothing behind.
    let suites = builtin_suites().context("loading the authored suites")?;
    let mut policy = FixturePolicy::builtin().context("loading the fixture policy")?;
    let key = args.signing.load()?;
    output::ensure_fresh(&args.output)?;
    let tty = std::io::stderr().is_terminal();
    let eval = evaluate(&suites, &mut policy, |suite, done, total| {
        if tty {
            eprint!("\r{suite}: {done} of {total} tasks run");
            if done == total {
                eprintln!();
            }
            let _ = std::io::stderr().flush();
        } else if done == total {
            eprintln!("{suite}: {done} of {total} tasks run");
        }
    })?;
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
    output::create_fresh(&args.output)?;
    let digest = seal_demo(
        &args.output,
        &eval,
        &suites,
        &meta,
        crate::source_binding()?,
        key.as_ref(),
    )?;
    for s in &eval.suites {
        println!(
            "{:<12} {:>3}/{:<3} {:>6.1}%",
            s.suite,
            s.correct,
            s.items,
            100.0 * s.accuracy
        );
    }
    println!(
        "wrote {}/payload/{{results.jsonl,report.json,report.md}}",
        args.output.display()
    );
    println!(
        "sealed {} (manifest sha256:{digest})",
        args.output.display()
    );
    Ok(ExitCode::SUCCESS)
}
