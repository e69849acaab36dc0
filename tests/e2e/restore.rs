//! What `train --resume` refuses, leaving nothing behind: a checkpoint whose payload, manifest
//! or source differs, links, FIFOs and garbage in its source, other base weights, partial
//! optimizer state, and a FIFO named as the plan.

use std::process::{Command, Stdio};
use std::time::Duration;

use anyhow::Result;
use hr_tests::tiny_model::{TinySpec, write_tiny_model};
use hr_tests::{binary, text};

use crate::train::{ok, setup, snapshot};

#[test]
fn a_checkpoint_whose_payload_manifest_or_source_differs_is_refused_at_restore() -> Result<()> {
    let s = setup(3, 100);
    ok(
        &s,
        &[
            "train",
            "--plan",
            "plan.json",
            "--output",
            "runs/a",
            "--stop-after-step",
            "1",
        ],
    );
    // Another build (here: the same binary with one byte more, so its digest differs) refuses
    // the checkpoint unless told to accept the source change.
    let other = s.path().join("other-build");
    let mut bytes = std::fs::read(binary())?;
    bytes.push(0);
    std::fs::write(&other, bytes)?;
    std::fs::set_permissions(&other, std::os::unix::fs::PermissionsExt::from_mode(0o755))?;
    let other_train = |out: &str, extra: &[&str]| {
        let mut cmd = Command::new(&other);
        cmd.args([
            "train",
            "--plan",
            "plan.json",
            "--output",
            out,
            "--resume",
            "runs/a",
        ])
        .args(extra)
        .current_dir(s.path());
        cmd.output().expect("run the other build")
    };
    // A refused resume exits 3 naming why, and adopts nothing into its output folder.
    let refused = |out: &std::process::Output, run: &str, why: &str| {
        let (_, stderr) = text(out);
        assert_eq!(out.status.code(), Some(3), "{stderr}");
        assert!(
            stderr.contains(&format!("restore refused: {why}")),
            "{stderr}"
        );
        assert!(
            !s.path().join(run).exists(),
            "nothing adopted and no half-started run folder left"
        );
    };
    let resume = |run: &str| {
        s.run(&[
            "train",
            "--plan",
            "plan.json",
            "--output",
            run,
            "--resume",
            "runs/a",
        ])
    };
    refused(&other_train("runs/b", &[]), "runs/b", "source mismatch");
    let out = other_train("runs/c", &["--allow-source-change"]);
    assert!(out.status.success(), "{}", text(&out).1);

    // One changed payload byte: refused, whatever the entry point.
    let adapter = s
        .path()
        .join(snapshot(&s, "runs/a", 1))
        .join("payload/native/adapter_model.safetensors");
    let original = std::fs::read(&adapter)?;
    let mut bytes = original.clone();
    let last = bytes.len() - 1;
    bytes[last] ^= 1;
    std::fs::write(&adapter, bytes)?;
    refused(&resume("runs/d"), "runs/d", "digest mismatch");

    // PEFT's copy at the folder's root is the same adapter, sealed like the payload; a file
    // beside it that the manifest does not list is refused.
    std::fs::write(&adapter, &original)?;
    let root = s.path().join(snapshot(&s, "runs/a", 1));
    assert_eq!(
        std::fs::read(root.join("adapter_model.safetensors"))?,
        original
    );
    let mut bytes = original.clone();
    bytes[last] ^= 1;
    std::fs::write(root.join("adapter_model.safetensors"), bytes)?;
    refused(&resume("runs/root"), "runs/root", "digest mismatch");
    std::fs::write(root.join("adapter_model.safetensors"), &original)?;
    std::fs::write(root.join("README.md"), "notes")?;
    refused(
        &resume("runs/stray"),
        "runs/stray",
        "unexpected file README.md",
    );
    std::fs::remove_file(root.join("README.md"))?;

    // One changed manifest byte (the payload restored): the seal no longer covers it.
    let manifest = s
        .path()
        .join(snapshot(&s, "runs/a", 1))
        .join("MANIFEST.json");
    let mut bytes = std::fs::read(&manifest)?;
    bytes.push(b' ');
    std::fs::write(&manifest, bytes)?;
    refused(&resume("runs/e"), "runs/e", "manifest digest mismatch");
    Ok(())
}

#[test]
fn resume_refuses_links_fifos_and_garbage_in_its_source_and_leaves_nothing() {
    let s = setup(3, 1);
    ok(
        &s,
        &[
            "train",
            "--plan",
            "plan.json",
            "--output",
            "runs/a",
            "--stop-after-step",
            "2",
        ],
    );
    let checkpoint = snapshot(&s, "runs/a", 2);
    let uuid = checkpoint.rsplit('/').next().expect("uuid").to_owned();
    let copy = |name: &str| {
        let to = s.path().join(name).join(&uuid);
        std::fs::create_dir_all(s.path().join(name)).expect("mkdir");
        let status = Command::new("cp")
            .arg("-r")
            .arg(s.path().join(&checkpoint))
            .arg(&to)
            .status()
            .expect("cp");
        assert!(status.success());
        to
    };
    // A payload file replaced by a link to the same bytes elsewhere: `snapshot verify` rejects
    // it, so the import must not follow it.
    let linked = copy("linked");
    let weights = linked.join("payload/native/adapter_model.safetensors");
    std::fs::rename(&weights, s.path().join("elsewhere.safetensors")).expect("move");
    std::os::unix::fs::symlink(s.path().join("elsewhere.safetensors"), &weights).expect("link");
    // A FIFO would block a copy forever.
    let fifo = copy("fifo");
    let status = Command::new("mkfifo")
        .arg(fifo.join("payload/native/queue"))
        .status()
        .expect("mkfifo");
    assert!(status.success());
    // A run folder whose checkpoint list is garbage.
    let garbage = s.path().join("garbage");
    let status = Command::new("cp")
        .arg("-r")
        .arg(s.path().join("runs/a"))
        .arg(&garbage)
        .status()
        .expect("cp");
    assert!(status.success());
    std::fs::write(garbage.join("core/checkpoints.jsonl"), "garbage{\n").expect("garbage");
    for (source, why) in [
        (&linked, "symbolic link"),
        (&fifo, "FIFO"),
        (&garbage, "checkpoint list cannot be read"),
    ] {
        let source = source.to_str().expect("utf-8");
        let out = s.run(&[
            "train",
            "--plan",
            "plan.json",
            "--output",
            "runs/b",
            "--resume",
            source,
        ]);
        let (_, stderr) = text(&out);
        assert_eq!(out.status.code(), Some(2), "{stderr}");
        assert!(
            stderr.contains("--resume") && stderr.contains(why),
            "{stderr}"
        );
        assert!(!s.path().join("runs/b").exists(), "nothing left behind");
    }
}

#[test]
fn resume_refuses_other_base_weights_and_partial_optimizer_state() {
    let s = setup(3, 1);
    ok(
        &s,
        &[
            "train",
            "--plan",
            "plan.json",
            "--output",
            "runs/a",
            "--stop-after-step",
            "2",
        ],
    );
    let resume = |run: &str, extra: &[&str]| {
        let mut args = vec![
            "train",
            "--plan",
            "plan.json",
            "--output",
            run,
            "--resume",
            "runs/a",
        ];
        args.extend_from_slice(extra);
        s.run(&args)
    };
    let refused = |out: &std::process::Output, why: &str| {
        let (_, stderr) = text(out);
        assert_eq!(out.status.code(), Some(3), "{stderr}");
        assert!(stderr.contains(why), "expected {why:?} in: {stderr}");
    };
    // The negative control that used to resume with fresh AdamW moments now fails at load.
    refused(
        &resume("runs/b", &["--control", "drop-optimizer"]),
        "has no optimizer state at step 2",
    );
    // Other weights of the same shape (another seed) under the plan's model.path.
    write_tiny_model(
        &s.path().join("model"),
        &TinySpec {
            seed: 8,
            ..TinySpec::default()
        },
    );
    refused(
        &resume("runs/c", &[]),
        "another base model than the plan's model.path: its weights model.safetensors differ",
    );
}

#[test]
fn a_fifo_named_as_the_plan_is_refused_at_once() {
    let s = setup(3, 1);
    let mkfifo = |rel: &str| {
        let status = Command::new("mkfifo")
            .arg(s.path().join(rel))
            .status()
            .expect("mkfifo");
        assert!(status.success());
    };
    mkfifo("plan.fifo");
    // Nothing ever writes to it: a reader that opened it would wait forever.
    let mut child = Command::new(binary())
        .args(["train", "--plan", "plan.fifo", "--output", "runs/f"])
        .current_dir(s.path())
        .stdout(Stdio::null())
        .stderr(Stdio::piped())
        .spawn()
        .expect("spawn");
    let exited = (0..600).find_map(|_| {
        let status = child.try_wait().expect("wait");
        if status.is_none() {
            std::thread::sleep(Duration::from_millis(100));
        }
        status
    });
    let Some(status) = exited else {
        let _ = child.kill();
        panic!("train waited on the FIFO");
    };
    let mut stderr = String::new();
    std::io::Read::read_to_string(&mut child.stderr.take().expect("stderr"), &mut stderr)
        .expect("read");
    assert_eq!(status.code(), Some(2), "{stderr}");
    assert!(stderr.contains("not a regular file"), "{stderr}");
    assert!(!s.path().join("runs/f").exists());
}
