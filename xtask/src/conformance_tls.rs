//! The TLS part of `cargo xtask conformance det`: a devmaster serving HTTPS with a certificate a
//! private CA (made here, at test time) issued, driven by `xtask/conformance/det_tls.py` with the
//! real `det`, a Python and a Rust Core trial, and `hessian-recipes qualify managed --master
//! https://...`, each trusting the CA through `DET_MASTER_CERT_FILE`, and refused with another's.

use std::path::Path;

use anyhow::Result;
use hr_tests::private_ca::PrivateCa;

use crate::conformance::{det_driver, det_with, run_driver, start_devmaster, training_plan};

/// `cargo xtask conformance det`: the plain cases, then the TLS ones; returns (passed, failed).
pub(crate) fn det(root: &Path) -> Result<(u64, u64)> {
    det_with(root, |venv, bin, work| det_tls(root, venv, bin, work))
}

/// Runs the TLS cases in `work/tls`; returns (passed, failed).
fn det_tls(root: &Path, venv: &Path, bin: &Path, work: &Path) -> Result<(u64, u64)> {
    let dir = work.join("tls");
    std::fs::create_dir_all(&dir)?;
    let ca = PrivateCa::new(&dir, "cluster");
    let cert = ca.issue("master", &["127.0.0.1", "localhost"]);
    let other = PrivateCa::new(&dir, "other");
    let environment = serde_json::json!({"backend": "fixture", "tasks": {"kind": "digits", "count": 8, "seed": 3}});
    let grpo = serde_json::json!({"tasks_per_step": 2, "num_generations": 4,
        "max_completion_length": 8, "max_turn_tokens": 8});
    let plan = training_plan(root, &dir, "tls-qual", &environment, &grpo, 4)?;
    let state = dir.join("state");
    let requests = dir.join("requests.jsonl");
    let (guard, url) = start_devmaster(
        &bin.join("hessian-recipes"),
        &state,
        &[
            "--tls-cert".as_ref(),
            cert.chain.as_os_str(),
            "--tls-key".as_ref(),
            cert.key.as_os_str(),
            "--record-requests".as_ref(),
            requests.as_os_str(),
        ],
    )?;
    eprintln!("conformance: TLS devmaster at {url}");
    let script = root.join("xtask/conformance/det_tls.py");
    let mut driver = det_driver(venv, &script, &url, bin, &state);
    driver
        .arg("--hessian-recipes")
        .arg(bin.join("hessian-recipes"))
        .arg("--plan")
        .arg(&plan)
        .arg("--ca")
        .arg(&ca.ca_pem)
        .arg("--wrong-ca")
        .arg(&other.ca_pem)
        .arg("--requests")
        .arg(&requests)
        .arg("--work")
        .arg(&dir);
    let result = run_driver(driver, "det-tls");
    drop(guard);
    result
}
