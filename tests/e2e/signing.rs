//! Signed seals end to end: `keygen`, writers signing with `--signing-key`, and readers that,
//! given `--trust`, refuse unsigned seals and seals signed with any other key (`train
//! --resume`, `evaluate`, `snapshot verify`). A world-readable key is refused.

use std::os::unix::fs::PermissionsExt;

use hr_tests::tiny_model::{TinySpec, write_tiny_model};
use hr_tests::{Scratch, text};
use serde_json::json;

fn ok(s: &Scratch, args: &[&str]) -> String {
    let out = s.run(args);
    let (stdout, stderr) = text(&out);
    assert!(out.status.success(), "{args:?}\n{stdout}\n{stderr}");
    stdout
}

fn refused(s: &Scratch, args: &[&str], code: i32, why: &str) {
    let out = s.run(args);
    let (stdout, stderr) = text(&out);
    assert_eq!(
        out.status.code(),
        Some(code),
        "{args:?}\n{stdout}\n{stderr}"
    );
    assert!(
        stdout.contains(why) || stderr.contains(why),
        "{args:?}: expected {why:?} in\n{stdout}\n{stderr}"
    );
}

/// The folder of the latest checkpoint of a `train` run.
fn latest_checkpoint(s: &Scratch, run: &str) -> String {
    let listed = std::fs::read_to_string(s.path().join(run).join("core/checkpoints.jsonl"))
        .expect("checkpoints.jsonl");
    let last: serde_json::Value =
        serde_json::from_str(listed.lines().last().expect("a checkpoint")).expect("json");
    format!(
        "{run}/core/checkpoints/{}",
        last["uuid"].as_str().expect("uuid")
    )
}

#[test]
fn trusted_readers_refuse_unsigned_and_foreign_signed_seals() {
    let s = Scratch::new();
    write_tiny_model(&s.path().join("model"), &TinySpec::default());
    let mut plan = crate::train::plan(2, 1);
    plan["evaluation"] = json!({"checkpoints": [2], "dev": {"count": 2, "seed": 1},
        "held_out": {"count": 2, "seed": 2}, "num_generations": 2, "retention_max_new_tokens": 2});
    s.write("plan.json", &plan.to_string());
    ok(&s, &["keygen", "--output", "k1"]);
    ok(&s, &["keygen", "--output", "k2"]);
    let mode = std::fs::metadata(s.path().join("k1/signing.key"))
        .expect("key")
        .permissions()
        .mode();
    assert_eq!(mode & 0o777, 0o600, "the secret key is owner-only");
    let train = |out: &str, extra: &[&str]| {
        let mut args = vec!["train", "--plan", "plan.json", "--output", out];
        args.extend_from_slice(extra);
        args.iter().map(|a| (*a).to_owned()).collect::<Vec<_>>()
    };
    let run = |args: Vec<String>| {
        let refs: Vec<&str> = args.iter().map(String::as_str).collect();
        ok(&s, &refs)
    };
    let stop = ["--stop-after-step", "1"];
    run(train(
        "signed",
        &[&stop[..], &["--signing-key", "k1/signing.key"]].concat(),
    ));
    run(train(
        "foreign",
        &[&stop[..], &["--signing-key", "k2/signing.key"]].concat(),
    ));
    run(train("unsigned", &stop));

    // snapshot verify: the signer's key accepts, another key refuses.
    let checkpoint = latest_checkpoint(&s, "signed");
    ok(
        &s,
        &[
            "snapshot",
            "verify",
            &checkpoint,
            "--trust",
            "k1/signing.pub",
        ],
    );
    refused(
        &s,
        &[
            "snapshot",
            "verify",
            &checkpoint,
            "--trust",
            "k2/signing.pub",
        ],
        3,
        "invalid",
    );

    // train --resume under trust k1: its own run continues, the others are refused.
    run(train(
        "continued",
        &[
            "--resume",
            "signed",
            "--trust",
            "k1/signing.pub",
            "--signing-key",
            "k1/signing.key",
        ],
    ));
    for other in ["foreign", "unsigned"] {
        let args = train(
            &format!("from-{other}"),
            &["--resume", other, "--trust", "k1/signing.pub"],
        );
        let refs: Vec<&str> = args.iter().map(String::as_str).collect();
        refused(&s, &refs, 3, "restore refused");
    }

    // evaluate under trust: the continued run (signed by k1) is adopted only when k1 is trusted.
    refused(
        &s,
        &[
            "evaluate",
            "--resume",
            "continued",
            "--output",
            "eval-k2",
            "--trust",
            "k2/signing.pub",
        ],
        3,
        "checkpoint of step 2 cannot be adopted",
    );
    ok(
        &s,
        &[
            "evaluate",
            "--resume",
            "continued",
            "--output",
            "eval",
            "--trust",
            "k1/signing.pub",
            "--signing-key",
            "k1/signing.key",
        ],
    );
    ok(
        &s,
        &["snapshot", "verify", "eval", "--trust", "k1/signing.pub"],
    );
    // A trust file as `train` reads it (several keys, `#` comments) works for `snapshot verify`
    // too, and the signature must be by one of its keys.
    let key =
        |dir: &str| std::fs::read_to_string(s.path().join(dir).join("signing.pub")).expect("key");
    s.write(
        "team.pub",
        &format!(
            "# the team's keys\n{}  # k2\n{}\n",
            key("k2").trim(),
            key("k1").trim()
        ),
    );
    ok(&s, &["snapshot", "verify", "eval", "--trust", "team.pub"]);
    s.write("k2-only.pub", &format!("# k2 alone\n{}", key("k2")));
    let out = s.run(&["snapshot", "verify", "eval", "--trust", "k2-only.pub"]);
    assert_eq!(out.status.code(), Some(3), "{}", text(&out).0);

    // A secret key others can read is refused before any work.
    std::fs::set_permissions(
        s.path().join("k2/signing.key"),
        std::fs::Permissions::from_mode(0o644),
    )
    .expect("chmod");
    refused(
        &s,
        &[
            "demo",
            "--output",
            "demo",
            "--signing-key",
            "k2/signing.key",
        ],
        2,
        "chmod 600",
    );
    assert!(!s.path().join("demo").exists(), "nothing written");
}
