//! `hessian-recipes cluster preflight`: `hr_qualify::preflight::preflight` for the profile and
//! the config to submit; prints the checklist, or one JSON object.

use std::process::ExitCode;

use anyhow::Context;
use hr_config::ClusterProfile;
use hr_qualify::preflight::{PreflightTarget, Status, preflight, read_config};
use serde_json::Value;

use crate::cli::PreflightArgs;

pub(crate) fn run(args: &PreflightArgs) -> anyhow::Result<ExitCode> {
    let root = match &args.root {
        Some(r) => r.clone(),
        None => std::env::current_dir().context("current folder")?,
    };
    let profile = ClusterProfile::by_name(args.profile, &std::path::absolute(&root)?);
    let config = args.config.as_deref().map(read_config).transpose()?;
    let target = PreflightTarget {
        master: args.master.clone(),
        workspace: args.workspace.clone(),
        project_id: args.project_id,
        pool: args.pool.clone(),
    };
    let runtime = tokio::runtime::Runtime::new().context("starting the async runtime")?;
    let list = runtime.block_on(preflight(&target, &profile, config.as_ref()));
    let failed = list.0.iter().filter(|c| c.status == Status::Fail).count();
    if args.json {
        let checks: Vec<Value> = list
            .0
            .iter()
            .map(|c| serde_json::json!({"name": c.name, "status": c.status.word(), "detail": c.detail}))
            .collect();
        println!(
            "{}",
            serde_json::json!({"master": args.master, "ok": failed == 0, "checks": checks})
        );
    } else {
        println!("preflight of {} against {}:", args.profile, args.master);
        for c in &list.0 {
            println!("  {:<4}  {:<13} {}", c.status.word(), c.name, c.detail);
        }
        let count = |s: Status| list.0.iter().filter(|c| c.status == s).count();
        println!(
            "preflight: {} ok, {failed} failed, {} skipped",
            count(Status::Ok),
            count(Status::Skip)
        );
    }
    Ok(if failed == 0 {
        ExitCode::SUCCESS
    } else {
        ExitCode::FAILURE
    })
}
