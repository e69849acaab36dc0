//! Properties: any manifest round-trips through its bytes; any single-byte change anywhere in a
//! snapshot (payload, manifest or seal) is detected.

use std::collections::BTreeMap;

use hr_seal::{EvidencePrefix, FileEntry, Manifest, ParentRef, RunIdentity, SourceBinding, verify};
use proptest::{collection::vec, option, prelude::*};

use crate::support::{expect, two_step_store};

fn hex64() -> impl Strategy<Value = String> {
    "[0-9a-f]{64}"
}

fn manifest() -> impl Strategy<Value = Manifest> {
    let files = proptest::collection::btree_map(
        "[a-z0-9_.-]{1,12}(/[a-z0-9_.-]{1,12}){0,2}",
        (any::<u64>(), hex64(), "[a-z]{1,10}"),
        0..6,
    );
    (
        ("\\PC{0,20}", "\\PC{0,20}", any::<u64>()),
        option::of((any::<u64>(), hex64(), option::of("\\PC{0,10}"))),
        (
            "[0-9a-f]{7,40}",
            option::of(hex64()),
            option::of(hex64()),
            option::of(hex64()),
        ),
        (hex64(), files),
        (
            vec(("[a-z]{1,8}", any::<u64>(), hex64()), 0..3),
            proptest::collection::btree_map("[a-z-]{1,8}", "\\PC{0,8}", 0..3),
        ),
    )
        .prop_filter(
            "file names are not `.` or `..`",
            |(_, _, _, (_, files), _)| {
                files
                    .keys()
                    .all(|k| k.split('/').all(|s| s != "." && s != ".."))
            },
        )
        .prop_map(
            |(
                (run_id, writer, step),
                parent,
                (commit, tree, lock, binary),
                (config, files),
                (evidence, tools),
            )| Manifest {
                schema_version: hr_seal::SCHEMA_VERSION,
                hash_alg: "sha256".into(),
                run: RunIdentity { run_id, writer },
                step,
                parent: parent.map(|(step, manifest_sha256, storage_id)| ParentRef {
                    step,
                    manifest_sha256,
                    storage_id,
                }),
                source: SourceBinding {
                    commit,
                    tree_sha256: tree,
                    cargo_lock_sha256: lock,
                    binary_sha256: binary,
                },
                config_sha256: config,
                files: files
                    .into_iter()
                    .map(|(path, (size, sha256, role))| FileEntry {
                        path: format!("payload/{path}"),
                        size,
                        sha256,
                        role,
                    })
                    .collect(),
                evidence: evidence
                    .into_iter()
                    .map(|(name, count, sha256)| EvidencePrefix {
                        name,
                        count,
                        sha256,
                    })
                    .collect(),
                tools: tools.into_iter().collect::<BTreeMap<_, _>>(),
            },
        )
}

proptest! {
    #[test]
    fn any_manifest_round_trips_through_its_bytes(m in manifest()) {
        prop_assert_eq!(Manifest::parse(&m.to_bytes()).expect("parses"), m);
    }
}

proptest! {
    #![proptest_config(ProptestConfig::with_cases(64))]
    #[test]
    fn any_single_byte_change_is_detected(file_pick in any::<prop::sample::Index>(), offset in any::<prop::sample::Index>(), xor in 1u8..=255) {
        let (_tmp, store, _) = two_step_store();
        let dir = store.snapshot_dir(2);
        let files: Vec<_> = crate::support::bytes_of(&dir).into_keys().collect();
        let rel = file_pick.get(&files).clone();
        let path = dir.join(&rel);
        let mut bytes = std::fs::read(&path).expect("read");
        let at = offset.index(bytes.len());
        bytes[at] ^= xor;
        std::fs::write(&path, &bytes).expect("write");
        prop_assert!(verify(&dir, &expect("run-a")).is_err(), "changing byte {at} of {} went unnoticed", rel.display());
    }
}
