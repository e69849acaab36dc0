//! `hessian-recipes qualify cpu`: the managed CPU lifecycle against the local devmaster, its
//! negative controls, and `proof verify`.

use hr_tests::{Scratch, text};

fn qualify(s: &Scratch, out: &str, extra: &[&str]) -> (Option<i32>, String, String) {
    let mut args = vec![
        "qualify",
        "cpu",
        "--output",
        out,
        "--step-seconds",
        "0.3",
        "--timeout-seconds",
        "120",
    ];
    args.extend_from_slice(extra);
    let o = s.run(&args);
    let (stdout, stderr) = text(&o);
    (o.status.code(), stdout, stderr)
}

fn proof(s: &Scratch, out: &str) -> serde_json::Value {
    serde_json::from_slice(
        &std::fs::read(s.path().join(out).join("proof.json")).expect("proof.json"),
    )
    .expect("json")
}

#[test]
fn the_lifecycle_is_equal_wherever_the_pause_lands_in_step_3_or_4() {
    let s = Scratch::new();
    for (i, delay) in ["0", "150", "400"].iter().enumerate() {
        let out = format!("q{i}");
        let (code, stdout, stderr) = qualify(&s, &out, &["--pause-delay-ms", delay]);
        assert_eq!(code, Some(0), "delay {delay}: {stdout}\n{stderr}");
        let p = proof(&s, &out);
        assert_eq!(p["equal"], true);
        assert_eq!(p["resumed"]["steps"].as_array().map(Vec::len), Some(8));
        assert_eq!(
            p["resumed"]["allocations"].as_array().map(Vec::len),
            Some(2)
        );
        let step = p["interruption"]["step"].as_u64().expect("step");
        assert!(
            (3..8).contains(&step),
            "delay {delay}: paused at step {step}"
        );
        assert_eq!(
            p["interruption"]["uuid_at_pause"],
            p["interruption"]["uuid_at_restore"]
        );
        assert_eq!(p["interruption"]["restored_run_id"], 2);
        assert!(s.path().join(&out).join("source/hessian-recipes").is_file());
        assert!(s.path().join(&out).join("launch-config.yaml").is_file());
        let verified = s.run(&["proof", "verify", &format!("{out}/proof.json")]);
        assert_eq!(verified.status.code(), Some(0), "{:?}", text(&verified));
    }
}

#[test]
fn skipping_the_rng_restore_is_caught_at_the_first_resumed_step() {
    let s = Scratch::new();
    let (code, stdout, _) = qualify(&s, "q", &["--control", "skip-rng-restore"]);
    assert_eq!(code, Some(1), "{stdout}");
    let p = proof(&s, "q");
    assert_eq!(p["equal"], false);
    let restored_at = p["interruption"]["step"].as_u64().expect("step");
    assert_eq!(p["first_divergent_step"].as_u64(), Some(restored_at + 1));
    assert!(stdout.contains("DIFFERENT"));
    // The proof still holds against its snapshots: it truthfully says "not equal".
    assert_eq!(
        s.run(&["proof", "verify", "q/proof.json"]).status.code(),
        Some(1)
    );
}

#[test]
fn restoring_another_uuid_than_the_receipt_fails_the_qualification() {
    let s = Scratch::new();
    let (code, stdout, stderr) = qualify(&s, "q", &["--control", "stale-uuid"]);
    assert_eq!(code, Some(1), "{stdout}\n{stderr}");
    assert!(stderr.contains("but the receipt names"), "{stderr}");
    assert!(
        !s.path().join("q/proof.json").exists(),
        "no proof for a failed lifecycle"
    );
}

#[test]
fn a_kill_during_a_save_is_recovered_from_the_last_sealed_snapshot() {
    let s = Scratch::new();
    let (code, stdout, stderr) = qualify(&s, "q", &["--control", "kill-during-save"]);
    assert_eq!(code, Some(0), "{stdout}\n{stderr}");
    let p = proof(&s, "q");
    assert_eq!(p["equal"], true);
    assert_eq!(p["interruption"]["kind"], "kill-during-save");
    assert_eq!(p["interruption"]["uuid_at_pause"], serde_json::Value::Null);
    assert_eq!(
        p["interruption"]["step"], 4,
        "restored from the last sealed snapshot before the killed save"
    );
}

#[test]
fn a_tampered_snapshot_breaks_the_proof() {
    let s = Scratch::new();
    let (code, stdout, stderr) = qualify(&s, "q", &[]);
    assert_eq!(code, Some(0), "{stdout}\n{stderr}");
    let p = proof(&s, "q");
    let uuid = p["resumed"]["steps"][6]["checkpoint_uuid"]
        .as_str()
        .expect("uuid");
    let state = s
        .path()
        .join("q/checkpoints")
        .join(uuid)
        .join("payload/fixture/state.json");
    let mut bytes = std::fs::read(&state).expect("state");
    bytes[2] ^= 1;
    std::fs::write(&state, bytes).expect("tamper");
    let verified = s.run(&["proof", "verify", "q/proof.json"]);
    assert_eq!(verified.status.code(), Some(3));
    assert!(
        text(&verified).0.contains("DigestMismatch")
            || text(&verified).0.contains("digest mismatch"),
        "{:?}",
        text(&verified)
    );
}
