//! Fixtures: a signing key, identities, a small valid safetensors file, a folder of snapshots
//! written in place (one per step, each chained to the one before, as the trainer's checkpoints
//! are), and byte snapshots of folders.

use std::{
    collections::BTreeMap,
    path::{Path, PathBuf},
};

use hr_seal::{
    CommitOutcome, Expectations, KeyPair, ParentRef, RunIdentity, SealError, SealedSnapshot,
    SnapshotWriter, SourceBinding, Trust,
};

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

/// Snapshots in place under one folder, `<root>/step-<N>`, each writer chained to the
/// snapshot last committed here.
pub(crate) struct Snapshots {
    root: PathBuf,
    last: std::cell::RefCell<Option<ParentRef>>,
}

impl Snapshots {
    pub(crate) fn new(root: &Path) -> Self {
        Self {
            root: root.to_owned(),
            last: std::cell::RefCell::new(None),
        }
    }

    /// The folder of `step`.
    pub(crate) fn snapshot_dir(&self, step: u64) -> PathBuf {
        self.root.join(format!("step-{step}"))
    }

    /// A writer for `step`, its parent the last snapshot committed here.
    pub(crate) fn writer(
        &self,
        run: RunIdentity,
        step: u64,
        source: SourceBinding,
        config: String,
    ) -> SnapshotWriter {
        let mut w = SnapshotWriter::in_place(&self.snapshot_dir(step), run, step, source, config);
        if let Some(parent) = self.last.borrow().clone() {
            w.parent(parent);
        }
        w
    }

    /// Commits a sealed snapshot and makes it the next writer's parent.
    pub(crate) fn publish(&self, sealed: SealedSnapshot) -> Result<CommitOutcome, SealError> {
        let parent = ParentRef {
            step: sealed.manifest.step,
            manifest_sha256: sealed.manifest_sha256.clone(),
            storage_id: Some(format!("step-{}", sealed.manifest.step)),
        };
        let outcome = sealed.commit()?;
        *self.last.borrow_mut() = Some(parent);
        Ok(outcome)
    }
}

/// Writes and commits a signed snapshot of `run_id` at `step` with `config`.
pub(crate) fn publish(
    store: &Snapshots,
    run_id: &str,
    step: u64,
    config: &str,
) -> Result<CommitOutcome, SealError> {
    let run = RunIdentity {
        run_id: run_id.into(),
        writer: "alloc-1".into(),
    };
    let mut w = store.writer(run, step, source(), config.into());
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
    let sealed = w.seal(Some(&key()))?;
    store.publish(sealed)
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

/// Good snapshots at steps 1 and 2 of run `run-a`; returns their temp folder, the snapshots and
/// the byte image of step 1 (the "last good" snapshot tests compare against).
pub(crate) fn two_step_store() -> (tempfile::TempDir, Snapshots, BTreeMap<PathBuf, Vec<u8>>) {
    let tmp = tempfile::tempdir().expect("tempdir");
    let store = Snapshots::new(tmp.path());
    publish(&store, "run-a", 1, "cfg-a").expect("step 1");
    publish(&store, "run-a", 2, "cfg-a").expect("step 2");
    let good = bytes_of(&store.snapshot_dir(1));
    (tmp, store, good)
}

/// Asserts the step-1 snapshot is unchanged and still verifies.
pub(crate) fn assert_last_good_intact(store: &Snapshots, good: &BTreeMap<PathBuf, Vec<u8>>) {
    assert_eq!(
        &bytes_of(&store.snapshot_dir(1)),
        good,
        "the last good snapshot changed"
    );
    hr_seal::verify(&store.snapshot_dir(1), &expect("run-a")).expect("last good snapshot verifies");
}
