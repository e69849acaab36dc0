//! Real process kills: the fault probe SIGKILLs itself at each save stage while writing step 2
//! over a good step 1; recovery adopts what the table in `checkpoints.md` §4 requires and the
//! last good snapshot stays byte-identical.

use std::{os::unix::process::ExitStatusExt, path::Path, process::Command};

use hr_seal::{
    Expectations, ParentRef, RunIdentity, SnapshotWriter, SourceBinding, Stage, Store, Trust,
};

use crate::support::bytes_of;

fn probe(store: &Path, step: u64, fault: Option<Stage>) -> std::process::Output {
    let mut cmd = Command::new(env!("CARGO_BIN_EXE_hr-seal-fault-probe"));
    cmd.args([
        "--store",
        store.to_str().expect("utf-8"),
        "--step",
        &step.to_string(),
        "--size",
        "3000000",
    ]);
    if let Some(stage) = fault {
        cmd.args(["--fault", stage.name()]);
    }
    cmd.output().expect("run probe")
}

fn probe_expect() -> Expectations {
    Expectations {
        trust: Trust::DigestOnly,
        run_id: Some("probe-run".into()),
        config_sha256: Some("config".into()),
        source: Some(SourceBinding {
            commit: "probe".into(),
            tree_sha256: None,
            cargo_lock_sha256: None,
            binary_sha256: None,
        }),
        step: None,
    }
}

/// Writes step 1 cleanly, then step 2 with a kill at `stage`. Returns the store, step 1's digest
/// and byte image.
fn killed_at(
    stage: Stage,
) -> (
    tempfile::TempDir,
    Store,
    String,
    std::collections::BTreeMap<std::path::PathBuf, Vec<u8>>,
) {
    let tmp = tempfile::tempdir().expect("tmp");
    let good = probe(tmp.path(), 1, None);
    assert!(good.status.success(), "{good:?}");
    let digest = String::from_utf8_lossy(&good.stdout)
        .trim()
        .trim_start_matches("sealed ")
        .to_owned();
    let store = Store::open(tmp.path()).expect("store");
    let image = bytes_of(&store.snapshot_dir(1));
    let killed = probe(tmp.path(), 2, Some(stage));
    assert_eq!(
        killed.status.signal(),
        Some(9),
        "{stage:?}: the probe was not killed: {killed:?}"
    );
    (tmp, store, digest, image)
}

#[test]
fn a_kill_before_the_commit_leaves_the_previous_snapshot_adopted() {
    for stage in [
        Stage::BeforeStaging,
        Stage::MidPayload,
        Stage::AfterPayloadFsync,
        Stage::AfterManifest,
        Stage::AfterSealTmp,
    ] {
        let (_tmp, store, digest, image) = killed_at(stage);
        let adoption = store
            .resolve(Some(&digest), &probe_expect())
            .expect("resolve");
        let adopted = adoption.adopted.expect("something adopted");
        assert_eq!(adopted.manifest_sha256, digest, "{stage:?}");
        assert!(
            adoption.quarantined.is_empty(),
            "{stage:?}: {:?}",
            adoption.quarantined
        );
        assert!(
            !store.snapshot_dir(2).exists(),
            "{stage:?}: step 2 must not be visible"
        );
        let leftovers = store.gc_staging().expect("gc");
        assert_eq!(
            leftovers,
            usize::from(stage != Stage::BeforeStaging),
            "{stage:?}"
        );
        assert_eq!(bytes_of(&store.snapshot_dir(1)), image, "{stage:?}");
    }
}

#[test]
fn a_kill_after_the_commit_rename_adopts_the_new_snapshot() {
    let (_tmp, store, digest, image) = killed_at(Stage::AfterCommitRename);
    let adopted = store
        .resolve(Some(&digest), &probe_expect())
        .expect("resolve")
        .adopted
        .expect("adopted");
    assert_eq!(adopted.manifest.step, 2);
    assert_eq!(
        adopted
            .manifest
            .parent
            .as_ref()
            .map(|p| p.manifest_sha256.clone()),
        Some(digest)
    );
    assert_eq!(store.head().expect("head").map(|h| h.step), Some(2));
    assert_eq!(bytes_of(&store.snapshot_dir(1)), image);
}

#[test]
fn a_sealed_orphan_is_adopted_only_if_its_chain_reaches_the_master_pointer() {
    let (_tmp, store, digest, image) = killed_at(Stage::AfterCommit);
    // HEAD was never moved and the master still points at step 1.
    assert_eq!(store.head().expect("head").map(|h| h.step), Some(1));
    // An orphan from another lineage at step 3: its parent is not in the store.
    let run = RunIdentity {
        run_id: "probe-run".into(),
        writer: "stranger".into(),
    };
    let source = probe_expect().source.expect("source");
    let mut w = SnapshotWriter::staged(store.root(), run, 3, source, "config".into());
    w.parent(ParentRef {
        step: 2,
        manifest_sha256: "0".repeat(64),
        storage_id: None,
    });
    w.add_bytes("payload/x.json", "trainer", b"{}")
        .expect("add");
    w.seal(None)
        .expect("seal")
        .commit(&store.snapshot_dir(3))
        .expect("commit orphan");
    let orphan_image = bytes_of(&store.snapshot_dir(3));

    let adoption = store
        .resolve(Some(&digest), &probe_expect())
        .expect("resolve");
    let adopted = adoption.adopted.expect("adopted");
    assert_eq!(
        adopted.manifest.step, 2,
        "the step-2 orphan chains to the master's step 1"
    );
    assert_eq!(adoption.quarantined.len(), 1);
    assert_eq!(
        bytes_of(&adoption.quarantined[0]),
        orphan_image,
        "quarantine keeps the bytes"
    );
    assert!(!store.snapshot_dir(3).exists());
    assert_eq!(bytes_of(&store.snapshot_dir(1)), image);
}

#[test]
fn a_power_loss_after_the_commit_rename_leaves_the_old_or_the_new_snapshot_never_a_mix() {
    // The rename is the only un-fsynced change at this point, so after a power loss the folder
    // holds either the renamed snapshot or the sealed staging folder; both outcomes are rebuilt
    // here at the level of directory entries.
    let (tmp, store, digest, image) = killed_at(Stage::AfterCommitRename);
    let new_image = bytes_of(&store.snapshot_dir(2));
    // Outcome 1: the rename survived -> the new snapshot, complete.
    let kept = tempfile::tempdir().expect("tmp");
    copy_tree(tmp.path(), kept.path());
    let kept_store = Store::open(kept.path()).expect("store");
    let adopted = kept_store
        .resolve(Some(&digest), &probe_expect())
        .expect("resolve")
        .adopted
        .expect("adopted");
    assert_eq!(adopted.manifest.step, 2);
    assert_eq!(bytes_of(&kept_store.snapshot_dir(2)), new_image);
    // Outcome 2: the rename was lost -> the sealed folder is back under .staging/: old adopted.
    std::fs::create_dir_all(tmp.path().join(".staging")).expect("staging");
    std::fs::rename(
        store.snapshot_dir(2),
        tmp.path().join(".staging/lost-rename"),
    )
    .expect("undo rename");
    let adoption = store
        .resolve(Some(&digest), &probe_expect())
        .expect("resolve");
    assert_eq!(adoption.adopted.expect("adopted").manifest_sha256, digest);
    assert!(!store.snapshot_dir(2).exists());
    assert_eq!(store.gc_staging().expect("gc"), 1);
    assert_eq!(bytes_of(&store.snapshot_dir(1)), image);
}

fn copy_tree(from: &Path, to: &Path) {
    std::fs::create_dir_all(to).expect("mkdir");
    for entry in std::fs::read_dir(from).expect("read") {
        let entry = entry.expect("entry");
        let target = to.join(entry.file_name());
        if entry.file_type().expect("type").is_dir() {
            copy_tree(&entry.path(), &target);
        } else {
            std::fs::copy(entry.path(), &target).expect("copy");
        }
    }
}
