//! `hessian-recipes snapshot verify`.

use std::process::ExitCode;

use hr_seal::{Expectations, Trust, Verified, key_id, verify};

use crate::cli::SnapshotCommand;

pub(crate) fn run(command: SnapshotCommand) -> anyhow::Result<ExitCode> {
    match command {
        SnapshotCommand::Verify {
            dir,
            key,
            run_id,
            config_sha256,
            step,
            json,
        } => {
            let mut keys = Vec::new();
            for arg in &key {
                keys.extend(crate::keys::trusted_keys(arg)?);
            }
            let signed = !keys.is_empty();
            let trust = if signed {
                Trust::Keys(keys.clone())
            } else {
                Trust::DigestOnly
            };
            let expect = Expectations {
                trust,
                run_id,
                config_sha256,
                source: None,
                step,
            };
            match verify(&dir, &expect) {
                Ok(v) => {
                    let seal = if signed {
                        let ids: Vec<String> = keys.iter().map(key_id).collect();
                        format!("signature verified (trusted keys {})", ids.join(", "))
                    } else {
                        "digest checked; signatures not checked (no --key)".to_owned()
                    };
                    if json {
                        println!("{}", summary_json(&v, &seal));
                    } else {
                        print_summary(&v, &seal);
                    }
                    Ok(ExitCode::SUCCESS)
                }
                Err(e) if json => {
                    println!(
                        "{}",
                        serde_json::json!({"dir": dir, "valid": false,
                            "error": {"code": e.code(), "message": e.to_string()}})
                    );
                    Ok(ExitCode::from(3))
                }
                Err(e) => {
                    println!("invalid: {}", dir.display());
                    println!("  {}: {e}", e.code());
                    Ok(ExitCode::from(3))
                }
            }
        }
    }
}

fn summary_json(v: &Verified, seal: &str) -> serde_json::Value {
    let m = &v.manifest;
    serde_json::json!({
        "dir": v.dir, "valid": true, "run_id": m.run.run_id, "writer": m.run.writer,
        "step": m.step, "parent": m.parent, "manifest_sha256": v.manifest_sha256, "seal": seal,
        "source_commit": m.source.commit, "config_sha256": m.config_sha256, "files": m.files,
    })
}

fn print_summary(v: &Verified, seal: &str) {
    let m = &v.manifest;
    let bytes: u64 = m.files.iter().map(|f| f.size).sum();
    println!("valid: {}", v.dir.display());
    println!("  run       {} (writer {})", m.run.run_id, m.run.writer);
    println!("  step      {}", m.step);
    match &m.parent {
        Some(p) => println!("  parent    step {} sha256:{}", p.step, p.manifest_sha256),
        None => println!("  parent    none"),
    }
    println!("  manifest  sha256:{}", v.manifest_sha256);
    println!("  seal      {seal}");
    println!("  source    commit {}", m.source.commit);
    println!("  config    sha256:{}", m.config_sha256);
    println!("  files     {} ({bytes} bytes)", m.files.len());
    for f in &m.files {
        println!(
            "            {} {} {} ({})",
            &f.sha256[..12.min(f.sha256.len())],
            f.size,
            f.path,
            f.role
        );
    }
}
