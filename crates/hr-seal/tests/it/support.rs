//! Fixtures: a signing key, identities, a small valid safetensors file, snapshot writing, and
//! byte snapshots of folders.

use std::{
    collections::BTreeMap,
    path::{Path, PathBuf},
};

use hr_seal::{Expectations, Head, KeyPair, RunIdentity, SealError, SourceBinding, Store, Trust};

pub(crate) fn key() -> KeyPair {
    KeyPair::from_seed([7; 32])
}

pub(crate) fn source() -> SourceBinding {
    SourceBinding {
        commit: "c0ffee".into(),
        tree_sha256: Some("t".repeat(64)),
        cargo_lock_sha256: None,
        binary_sha256: None,
    }
}

pub(crate) fn expect(run_id: &str) -> Expectations {
    Expectations {
        trust: Trust::Keys(vec![key().verifying_key()]),
        run_id: Some(run_id.into()),
        config_sha256: Some("cfg-a".into()),
        source: Some(source()),
        step: None,
    }
}

/// A valid safetensors file holding one F32 tensor of shape [2].
pub(crate) fn safetensors() -> Vec<u8> {
    let header = br#"{"w":{"dtype":"F32","shape":[2],"data_offsets":[0,8]}}"#;
    let mut out = (header.len() as u64).to_le_bytes().to_vec();
    out.extend_from_slice(header);
    out.extend_from_slice(&[0, 0, 128, 63, 0, 0, 0, 64]);
    out
}

/// Writes and publishes a signed snapshot of `run_id` at `step` with `config`.
pub(crate) fn publish(
    store: &Store,
    run_id: &str,
    step: u64,
    config: &str,
) -> Result<Head, SealError> {
    let run = RunIdentity {
        run_id: run_id.into(),
        writer: "alloc-1".into(),
    };
    let mut w = store.writer(run, step, source(), config.into())?;
    w.add_bytes(
        "payload/adapter/adapter_model.safetensors",
        "adapter",
        &safetensors(),
    )?;
    w.add_bytes(
        "payload/optimizer/optimizer.json",
        "optimizer",
        format!("{{\"step\": {step}}}").as_bytes(),
    )?;
    w.add_bytes("payload/rng/rank-0.json", "rng", b"{\"state\": [1, 2, 3]}")?;
    w.tool("hr-seal", "test");
    let staged = w.seal(Some(&key()))?;
    Ok(store.publish(staged)?.1)
}

/// Every file under `dir` with its bytes.
pub(crate) fn bytes_of(dir: &Path) -> BTreeMap<PathBuf, Vec<u8>> {
    let mut out = BTreeMap::new();
    let mut stack = vec![dir.to_owned()];
    while let Some(d) = stack.pop() {
        for entry in std::fs::read_dir(&d).expect("read dir") {
            let path = entry.expect("entry").path();
            if path.is_dir() {
                stack.push(path);
            } else {
                out.insert(
                    path.strip_prefix(dir).expect("under").to_owned(),
                    std::fs::read(&path).expect("read"),
                );
            }
        }
    }
    out
}

/// A store with good snapshots at steps 1 and 2 of run `run-a`; returns the store, its temp
/// folder and the byte image of step 1 (the "last good" snapshot tests compare against).
pub(crate) fn two_step_store() -> (tempfile::TempDir, Store, BTreeMap<PathBuf, Vec<u8>>) {
    let tmp = tempfile::tempdir().expect("tempdir");
    let store = Store::open(tmp.path()).expect("store");
    publish(&store, "run-a", 1, "cfg-a").expect("step 1");
    publish(&store, "run-a", 2, "cfg-a").expect("step 2");
    let good = bytes_of(&store.snapshot_dir(1));
    (tmp, store, good)
}

/// Asserts the step-1 snapshot is unchanged and still verifies.
pub(crate) fn assert_last_good_intact(store: &Store, good: &BTreeMap<PathBuf, Vec<u8>>) {
    assert_eq!(
        &bytes_of(&store.snapshot_dir(1)),
        good,
        "the last good snapshot changed"
    );
    hr_seal::verify(&store.snapshot_dir(1), &expect("run-a")).expect("last good snapshot verifies");
}
