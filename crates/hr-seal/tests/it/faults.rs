//! The fault matrix: a writer stopped at each stage, tampering, swaps, layout attacks, stale
//! pointers and unknown schemas.

use std::{fs, path::Path};

use hr_seal::{Expectations, KeyPair, Manifest, RunIdentity, SealError, Stage, Trust, verify};

use crate::support::{
    Snapshots, assert_last_good_intact, expect, key, publish, source, two_step_store,
};

fn step2(store: &Snapshots) -> std::path::PathBuf {
    store.snapshot_dir(2)
}

fn adapter(store: &Snapshots) -> std::path::PathBuf {
    step2(store).join("payload/adapter/adapter_model.safetensors")
}

fn flip(path: &Path, offset: usize) {
    let mut bytes = fs::read(path).expect("read");
    bytes[offset] ^= 0x01;
    fs::write(path, bytes).expect("write");
}

#[test]
fn a_good_snapshot_verifies() {
    let (_tmp, store, good) = two_step_store();
    let v = verify(&step2(&store), &expect("run-a")).expect("verifies");
    assert_eq!(v.manifest.step, 2);
    assert_eq!(v.manifest.parent.as_ref().map(|p| p.step), Some(1));
    assert_last_good_intact(&store, &good);
}

#[test]
fn payload_truncated_by_one_byte_is_size_mismatch() {
    let (_tmp, store, good) = two_step_store();
    let path = adapter(&store);
    let len = fs::metadata(&path).expect("stat").len();
    fs::OpenOptions::new()
        .write(true)
        .open(&path)
        .expect("open")
        .set_len(len - 1)
        .expect("truncate");
    let err = verify(&step2(&store), &expect("run-a")).expect_err("truncated");
    assert!(
        matches!(err, SealError::SizeMismatch { ref path, expected, actual } if path.ends_with("adapter_model.safetensors") && actual == expected - 1),
        "{err}"
    );
    assert_last_good_intact(&store, &good);
}

#[test]
fn payload_truncated_to_zero_is_size_mismatch() {
    let (_tmp, store, good) = two_step_store();
    fs::write(adapter(&store), b"").expect("truncate");
    let err = verify(&step2(&store), &expect("run-a")).expect_err("truncated");
    assert!(
        matches!(err, SealError::SizeMismatch { actual: 0, .. }),
        "{err}"
    );
    assert_last_good_intact(&store, &good);
}

#[test]
fn one_flipped_payload_byte_is_digest_mismatch() {
    let (_tmp, store, good) = two_step_store();
    flip(&adapter(&store), 66);
    let err = verify(&step2(&store), &expect("run-a")).expect_err("flipped");
    assert!(
        matches!(err, SealError::DigestMismatch { ref path, .. } if path.ends_with(".safetensors")),
        "{err}"
    );
    assert_last_good_intact(&store, &good);
}

#[test]
fn a_flipped_manifest_byte_is_manifest_digest_mismatch() {
    let (_tmp, store, good) = two_step_store();
    flip(&step2(&store).join("MANIFEST.json"), 40);
    let err = verify(&step2(&store), &expect("run-a")).expect_err("flipped");
    assert!(
        matches!(err, SealError::ManifestDigestMismatch { .. }),
        "{err}"
    );
    assert_last_good_intact(&store, &good);
}

#[test]
fn a_flipped_signature_byte_is_bad_signature() {
    let (_tmp, store, good) = two_step_store();
    let seal = step2(&store).join("SEAL.dsse.json");
    let text = fs::read_to_string(&seal).expect("seal");
    let at = text.find("\"sig\": \"").expect("sig field") + 8;
    let mut bytes = text.into_bytes();
    bytes[at] = if bytes[at] == b'A' { b'B' } else { b'A' };
    fs::write(&seal, bytes).expect("write");
    let err = verify(&step2(&store), &expect("run-a")).expect_err("bad sig");
    assert!(matches!(err, SealError::BadSignature { .. }), "{err}");
    assert_last_good_intact(&store, &good);
}

#[test]
fn an_untrusted_signer_is_rejected_and_unsigned_needs_no_key_only_in_digest_mode() {
    let (_tmp, store, good) = two_step_store();
    let other = Expectations {
        trust: Trust::Keys(vec![KeyPair::from_seed([9; 32]).verifying_key()]),
        ..expect("run-a")
    };
    let err = verify(&step2(&store), &other).expect_err("untrusted");
    assert!(matches!(err, SealError::UntrustedSigner { .. }), "{err}");
    // An unsigned (digest-only) seal passes digest-only trust and fails when keys are required.
    let run = RunIdentity {
        run_id: "run-a".into(),
        writer: "w".into(),
    };
    let mut w = store.writer(run, 3, source(), "cfg-a".into());
    w.add_bytes("payload/x.json", "trainer", b"{}")
        .expect("add");
    store.publish(w.seal(None).expect("seal")).expect("publish");
    let digest_only = Expectations {
        trust: Trust::DigestOnly,
        ..expect("run-a")
    };
    verify(&store.snapshot_dir(3), &digest_only).expect("digest-sealed");
    let err = verify(&store.snapshot_dir(3), &expect("run-a")).expect_err("unsigned");
    assert!(
        matches!(err, SealError::UntrustedSigner { ref keyids } if keyids.is_empty()),
        "{err}"
    );
    assert_last_good_intact(&store, &good);
}

#[test]
fn a_file_swapped_in_from_another_run_is_digest_mismatch() {
    let (_tmp, store, good) = two_step_store();
    let other = tempfile::tempdir().expect("tmp");
    let other_store = Snapshots::new(other.path());
    publish(&other_store, "run-b", 2, "cfg-a").expect("other run");
    let name = "payload/optimizer/optimizer.json";
    fs::write(other_store.snapshot_dir(2).join(name), b"{\"step\": 9}").expect("diverge");
    fs::copy(
        other_store.snapshot_dir(2).join(name),
        step2(&store).join(name),
    )
    .expect("swap");
    let err = verify(&step2(&store), &expect("run-a")).expect_err("swapped");
    assert!(
        matches!(err, SealError::DigestMismatch { ref path, .. } if path == name),
        "{err}"
    );
    assert_last_good_intact(&store, &good);
}

#[test]
fn a_whole_snapshot_from_another_run_or_config_is_rejected() {
    let (_tmp, store, good) = two_step_store();
    let other = tempfile::tempdir().expect("tmp");
    let other_store = Snapshots::new(other.path());
    publish(&other_store, "run-b", 1, "cfg-a").expect("run b");
    let err = verify(&other_store.snapshot_dir(1), &expect("run-a")).expect_err("other run");
    assert!(
        matches!(err, SealError::RunIdMismatch { ref actual, .. } if actual == "run-b"),
        "{err}"
    );
    let third = tempfile::tempdir().expect("tmp");
    let third_store = Snapshots::new(third.path());
    publish(&third_store, "run-a", 1, "cfg-b").expect("other config");
    let err = verify(&third_store.snapshot_dir(1), &expect("run-a")).expect_err("other config");
    assert!(matches!(err, SealError::ConfigMismatch { .. }), "{err}");
    assert_last_good_intact(&store, &good);
}

#[test]
fn extra_missing_and_symlinked_files_are_rejected() {
    let (_tmp, store, good) = two_step_store();
    let dir = step2(&store);
    fs::write(dir.join("payload/extra.bin"), b"x").expect("extra");
    assert!(
        matches!(verify(&dir, &expect("run-a")), Err(SealError::UnexpectedFile { ref path }) if path == "payload/extra.bin")
    );
    fs::remove_file(dir.join("payload/extra.bin")).expect("rm");
    fs::write(dir.join("notes.txt"), b"x").expect("top-level extra");
    assert!(
        matches!(verify(&dir, &expect("run-a")), Err(SealError::UnexpectedFile { ref path }) if path == "notes.txt")
    );
    fs::remove_file(dir.join("notes.txt")).expect("rm");
    let rng = dir.join("payload/rng/rank-0.json");
    let saved = fs::read(&rng).expect("read");
    fs::remove_file(&rng).expect("rm");
    assert!(
        matches!(verify(&dir, &expect("run-a")), Err(SealError::MissingFile { ref path }) if path == "payload/rng/rank-0.json")
    );
    std::os::unix::fs::symlink(store.snapshot_dir(1).join("payload/rng/rank-0.json"), &rng)
        .expect("symlink");
    assert!(
        matches!(verify(&dir, &expect("run-a")), Err(SealError::SymlinkRejected { ref path }) if path == "payload/rng/rank-0.json")
    );
    fs::remove_file(&rng).expect("rm");
    fs::write(&rng, saved).expect("restore");
    verify(&dir, &expect("run-a")).expect("restored snapshot verifies again");
    assert_last_good_intact(&store, &good);
}

#[test]
fn fifos_empty_folders_and_names_that_are_not_utf8_are_rejected() {
    use std::os::unix::ffi::OsStrExt;
    let (_tmp, store, good) = two_step_store();
    let dir = step2(&store);
    let mkfifo = |path: &Path| {
        let status = std::process::Command::new("mkfifo")
            .arg(path)
            .status()
            .expect("mkfifo");
        assert!(status.success());
    };
    // A FIFO as the manifest is refused without being opened (opening it would block).
    let manifest = dir.join("MANIFEST.json");
    let saved = fs::read(&manifest).expect("read");
    fs::remove_file(&manifest).expect("rm");
    mkfifo(&manifest);
    let err = verify(&dir, &expect("run-a")).expect_err("fifo manifest");
    assert!(
        matches!(err, SealError::MalformedManifest(ref m) if m.contains("not a regular file")),
        "{err}"
    );
    fs::remove_file(&manifest).expect("rm");
    fs::write(&manifest, saved).expect("restore");
    // A FIFO in the payload.
    let fifo = dir.join("payload/queue");
    mkfifo(&fifo);
    assert!(
        matches!(verify(&dir, &expect("run-a")), Err(SealError::UnexpectedFile { ref path }) if path == "payload/queue")
    );
    fs::remove_file(&fifo).expect("rm");
    // An empty folder.
    fs::create_dir(dir.join("payload/empty")).expect("mkdir");
    assert!(
        matches!(verify(&dir, &expect("run-a")), Err(SealError::EmptyFolder { ref path }) if path == "payload/empty")
    );
    fs::remove_dir(dir.join("payload/empty")).expect("rmdir");
    // A name that is not UTF-8 (its lossy form would read as U+FFFD).
    let odd = dir
        .join("payload")
        .join(std::ffi::OsStr::from_bytes(b"odd-\xff"));
    fs::write(&odd, b"x").expect("odd name");
    let err = verify(&dir, &expect("run-a")).expect_err("non-UTF-8 name");
    assert!(
        matches!(err, SealError::UnexpectedFile { ref path } if path.ends_with("(not UTF-8)")),
        "{err}"
    );
    fs::remove_file(&odd).expect("rm");
    verify(&dir, &expect("run-a")).expect("restored snapshot verifies again");
    assert_last_good_intact(&store, &good);
}

/// Rewrites step 2's manifest with `edit` and reseals it with the trusted key, so only the
/// edited content is wrong.
fn reseal_with(store: &Snapshots, edit: impl FnOnce(&mut serde_json::Value)) {
    let dir = step2(store);
    let mut manifest: serde_json::Value =
        serde_json::from_slice(&fs::read(dir.join("MANIFEST.json")).expect("read")).expect("json");
    edit(&mut manifest);
    let mut bytes = serde_json::to_vec_pretty(&manifest).expect("json");
    bytes.push(b'\n');
    fs::write(dir.join("MANIFEST.json"), &bytes).expect("write");
    let seal = hr_seal::Envelope::seal(&hr_seal::sha256_hex(&bytes), "run-a", 2, Some(&key()));
    fs::write(dir.join("SEAL.dsse.json"), seal.to_bytes()).expect("write seal");
}

#[test]
fn a_seal_whose_predicate_contradicts_its_manifest_is_refused() {
    let (_tmp, store, good) = two_step_store();
    let dir = step2(&store);
    let manifest = fs::read(dir.join("MANIFEST.json")).expect("read");
    let digest = hr_seal::sha256_hex(&manifest);
    for (run, step) in [("run-b", 2), ("run-a", 7)] {
        let seal = hr_seal::Envelope::seal(&digest, run, step, Some(&key()));
        fs::write(dir.join("SEAL.dsse.json"), seal.to_bytes()).expect("write seal");
        let err = verify(&dir, &expect("run-a")).expect_err("contradicting predicate");
        assert!(
            matches!(err, SealError::MalformedSeal(ref m) if m.contains("its manifest")),
            "{run} {step}: {err}"
        );
    }
    let seal = hr_seal::Envelope::seal(&digest, "run-a", 2, Some(&key()));
    fs::write(dir.join("SEAL.dsse.json"), seal.to_bytes()).expect("write seal");
    verify(&dir, &expect("run-a")).expect("the matching predicate verifies");
    assert_last_good_intact(&store, &good);
}

#[test]
fn dot_dot_and_absolute_paths_are_invalid_even_when_sealed() {
    let (_tmp, store, good) = two_step_store();
    reseal_with(&store, |m| {
        m["files"][0]["path"] = "payload/../../escape".into()
    });
    let err = verify(&step2(&store), &expect("run-a")).expect_err("..");
    assert!(
        matches!(err, SealError::InvalidPath { ref path, .. } if path.contains("..")),
        "{err}"
    );
    reseal_with(&store, |m| m["files"][0]["path"] = "/etc/passwd".into());
    assert!(matches!(
        verify(&step2(&store), &expect("run-a")),
        Err(SealError::InvalidPath { .. })
    ));
    assert!(hr_seal::validate_payload_path("payload/./a").is_err());
    assert!(hr_seal::validate_payload_path("other/a").is_err());
    assert!(hr_seal::validate_payload_path("other.json").is_err());
    assert!(hr_seal::validate_payload_path("adapter_model.safetensors").is_ok());
    assert_last_good_intact(&store, &good);
}

#[test]
fn a_corrupt_safetensors_header_with_valid_digests_is_malformed() {
    let (_tmp, store, good) = two_step_store();
    let path = adapter(&store);
    let mut bytes = fs::read(&path).expect("read");
    let at = bytes
        .windows(5)
        .position(|w| w == b"[0,8]")
        .expect("offsets in header");
    bytes[at + 3] = b'9';
    fs::write(&path, &bytes).expect("write");
    let digest = hr_seal::sha256_hex(&bytes);
    reseal_with(&store, |m| {
        let files = m["files"].as_array_mut().expect("files");
        let f = files
            .iter_mut()
            .find(|f| {
                f["path"]
                    .as_str()
                    .is_some_and(|p| p.ends_with(".safetensors"))
            })
            .expect("adapter");
        f["sha256"] = digest.into();
    });
    let err = verify(&step2(&store), &expect("run-a")).expect_err("malformed");
    assert!(
        matches!(err, SealError::MalformedSafetensors { .. }),
        "{err}"
    );
    assert_last_good_intact(&store, &good);
}

#[test]
fn stale_pointers_missing_other_trial_or_wrong_step_are_rejected() {
    let (tmp, store, good) = two_step_store();
    let err =
        verify(&tmp.path().join("snapshots/no-such-uuid"), &expect("run-a")).expect_err("missing");
    assert!(matches!(err, SealError::CheckpointNotFound { .. }), "{err}");
    let err = verify(&step2(&store), &expect("det:1/other-trial")).expect_err("other trial");
    assert!(matches!(err, SealError::RunIdMismatch { .. }), "{err}");
    let err = verify(
        &step2(&store),
        &Expectations {
            step: Some(3),
            ..expect("run-a")
        },
    )
    .expect_err("step");
    assert!(
        matches!(
            err,
            SealError::StepMismatch {
                expected: 3,
                actual: 2
            }
        ),
        "{err}"
    );
    assert_last_good_intact(&store, &good);
}

#[test]
fn unknown_schema_version_or_payload_type_is_unsupported() {
    let (_tmp, store, good) = two_step_store();
    reseal_with(&store, |m| m["schema_version"] = 99.into());
    let err = verify(&step2(&store), &expect("run-a")).expect_err("schema");
    assert!(
        matches!(err, SealError::UnsupportedSchema(ref s) if s.contains("99")),
        "{err}"
    );
    let seal = step2(&store).join("SEAL.dsse.json");
    let text = fs::read_to_string(&seal)
        .expect("seal")
        .replace("application/vnd.in-toto+json", "application/x-other");
    fs::write(&seal, text).expect("write");
    let err = verify(&step2(&store), &expect("run-a")).expect_err("payload type");
    assert!(
        matches!(err, SealError::UnsupportedSchema(ref s) if s.contains("payloadType")),
        "{err}"
    );
    assert!(Manifest::parse(b"{\"schema_version\": 2}").is_err());
    assert_last_good_intact(&store, &good);
}

#[test]
fn a_file_changed_after_verification_is_refused_when_read_through_the_seal() {
    let (_tmp, store, _good) = two_step_store();
    let verified = verify(&step2(&store), &expect("run-a")).expect("verifies");
    let rel = "payload/adapter/adapter_model.safetensors";
    let sealed = verified.read_file(rel).expect("the verified bytes");
    // Swapped between verification and loading (same size, other content).
    let mut swapped = sealed.clone();
    let last = swapped.len() - 1;
    swapped[last] ^= 0xff;
    fs::write(adapter(&store), &swapped).expect("swap");
    let err = verified.read_file(rel).expect_err("changed after verify");
    assert!(matches!(err, SealError::DigestMismatch { .. }), "{err}");
    let err = verified
        .read_file("payload/not-sealed.json")
        .expect_err("not in the manifest");
    assert!(matches!(err, SealError::MissingFile { .. }), "{err}");
}

#[test]
fn a_writer_stopped_at_any_stage_leaves_no_snapshot_that_verifies_but_its_own_sealed_one() {
    for stop in Stage::ALL {
        let (tmp, store, good) = two_step_store();
        let run = RunIdentity {
            run_id: "run-a".into(),
            writer: "alloc-2".into(),
        };
        // The hook stops the writer as a crash would: nothing after that point happens.
        let save = std::panic::catch_unwind(std::panic::AssertUnwindSafe(|| {
            let mut w = store
                .writer(run, 3, source(), "cfg-a".into())
                .with_hook(move |at| assert_ne!(at, stop, "stopped"));
            w.add_bytes(
                "payload/adapter/a.safetensors",
                "adapter",
                &crate::support::safetensors(),
            )
            .expect("add");
            store.publish(w.seal(Some(&key())).expect("seal"))
        }));
        assert!(save.is_err(), "{stop:?}: the hook ran");
        let dir = store.snapshot_dir(3);
        match verify(&dir, &expect("run-a")) {
            // Once the seal is linked, the snapshot is whole.
            Ok(_) => assert!(
                matches!(stop, Stage::AfterCommitRename | Stage::AfterCommit),
                "{stop:?}: a snapshot verified before its commit"
            ),
            Err(e) => assert!(
                !matches!(stop, Stage::AfterCommitRename | Stage::AfterCommit),
                "{stop:?}: a committed snapshot does not verify: {e}"
            ),
        }
        assert!(
            !dir.join("SEAL.dsse.json").exists()
                || matches!(stop, Stage::AfterCommitRename | Stage::AfterCommit),
            "{stop:?}: a seal before the commit"
        );
        assert_last_good_intact(&store, &good);
        drop(tmp);
    }
}
