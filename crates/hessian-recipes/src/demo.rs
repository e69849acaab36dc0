//! `hessian-recipes demo`: the authored evaluation fixture with the scripted policy; the output
//! folder is sealed like every snapshot (`payload/` + `MANIFEST.json` + `SEAL.dsse.json`).

use std::{
    io::{IsTerminal, Write},
    process::ExitCode,
    time::Instant,
};

use anyhow::Context;
use hr_eval::{FixturePolicy, ReportMeta, builtin_suites, evaluate, render_reports};
use hr_seal::{RunIdentity, SnapshotWriter, sha256_hex};
use serde_json::json;

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
    // The config this output depends on: the command, the policy and the suite data.
    let config = json!({
        "command": "demo",
        "policy": eval.policy,
        "suites": suites.iter().map(|s| json!({"name": s.name, "sha256": s.sha256})).collect::<Vec<_>>(),
    });
    let name = args
        .output
        .file_name()
        .map_or_else(|| "demo".into(), |n| n.to_string_lossy().into_owned());
    let run = RunIdentity {
        run_id: format!("demo:{name}"),
        writer: "local".to_owned(),
    };
    output::create_fresh(&args.output)?;
    let mut writer = SnapshotWriter::in_place(
        &args.output,
        run,
        0,
        crate::source_binding()?,
        sha256_hex(config.to_string().as_bytes()),
    );
    writer
        .tool("hessian-recipes", env!("CARGO_PKG_VERSION"))
        .tool("hr-eval", hr_eval::VERSION);
    for (file, bytes) in render_reports(&eval, &meta) {
        let role = if file == "results.jsonl" {
            "results"
        } else {
            "report"
        };
        writer.add_bytes(&format!("payload/{file}"), role, &bytes)?;
    }
    let sealed = writer.seal(key.as_ref())?;
    let digest = sealed.manifest_sha256.clone();
    sealed.commit()?;
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
