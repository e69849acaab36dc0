//! One test per publication rule.

use std::path::Path;

use hr_seal::{KeyPair, SealError, SnapshotWriter, SourceBinding, Trust};
use hr_snapshot::{
    Binding, Budget, Publisher, RECEIPT_FILE, Receipt, SelectedCheckpoint, SnapshotError,
    TerminalKind, with_rng_preserved,
};
use serde_json::json;

use crate::fake::{FakeCore, Log, SharedRng};

fn key() -> KeyPair {
    KeyPair::from_seed([3; 32])
}

fn binding(writer: &str, config: &str) -> Binding {
    Binding {
        run_id: "det:54512/76039".into(),
        writer: writer.into(),
        source: SourceBinding {
            commit: "abc123".into(),
            tree_sha256: None,
            cargo_lock_sha256: None,
            binary_sha256: None,
        },
        config_sha256: config.into(),
    }
}

fn publisher(storage: &Path, run_dir: &Path, writer: &str, log: &Log) -> Publisher<FakeCore> {
    Publisher::new(
        FakeCore::new(storage, run_dir, log.clone()),
        binding(writer, "cfg"),
        Some(key()),
        Trust::Keys(vec![key().verifying_key()]),
        run_dir.to_owned(),
    )
}

fn payload(step: u64, budget: Budget) -> impl FnOnce(&mut SnapshotWriter) -> Result<(), String> {
    move |w| {
        w.add_bytes(
            "payload/trainer/trainer_state.json",
            "trainer",
            format!("{{\"step\": {step}}}").as_bytes(),
        )
        .and_then(|()| w.add_bytes("payload/budget.json", "budget", &budget.to_bytes()))
        .map_err(|e| e.to_string())
    }
}

fn events(log: &Log) -> Vec<String> {
    log.lock().expect("log").clone()
}

struct World {
    _tmp: tempfile::TempDir,
    storage: std::path::PathBuf,
    run_dir: std::path::PathBuf,
    log: Log,
}

fn world() -> World {
    let tmp = tempfile::tempdir().expect("tmp");
    let storage = tmp.path().join("storage");
    let run_dir = tmp.path().join("run");
    std::fs::create_dir_all(&storage).expect("storage");
    World {
        storage,
        run_dir,
        log: Log::default(),
        _tmp: tmp,
    }
}

const BUDGET: Budget = Budget {
    deadline_unix_s: 1_800_000_000,
    gpu_seconds_limit: 28_800,
    gpu_seconds_used: 0,
};

#[test]
fn periodic_saves_publish_only_after_sealing() {
    let w = world();
    let mut p = publisher(&w.storage, &w.run_dir, "alloc-1", &w.log);
    let published = p.save_periodic(1, payload(1, BUDGET)).expect("save");
    // The fake master refuses a report of an unsealed folder, so reaching here proves the order.
    assert_eq!(
        events(&w.log),
        [
            format!("new_checkpoint {}", published.uuid),
            format!("report_checkpoint {} 1", published.uuid)
        ]
    );
    let reported = &p.core().reported[0].2;
    assert_eq!(reported["manifest_sha256"], published.manifest_sha256);
}

#[test]
fn repeated_or_decreasing_steps_are_rejected_before_any_uuid_is_created() {
    let w = world();
    let mut p = publisher(&w.storage, &w.run_dir, "alloc-1", &w.log);
    p.save_periodic(2, payload(2, BUDGET)).expect("save");
    for step in [2, 1] {
        let err = p
            .save_periodic(step, payload(step, BUDGET))
            .expect_err("refused");
        assert!(
            matches!(err, SnapshotError::StepNotIncreasing { last: 2, .. }),
            "{err}"
        );
        let err = p
            .terminal(TerminalKind::Final, step)
            .err()
            .expect("refused");
        assert!(
            matches!(err, SnapshotError::StepNotIncreasing { .. }),
            "{err}"
        );
    }
    assert_eq!(p.core().uuids_created, 1, "a refused save created a UUID");
    assert_eq!(std::fs::read_dir(&w.storage).expect("ls").count(), 1);
}

#[test]
fn preemption_publishes_once_after_cleanup_and_service_shutdown_then_receipt_then_ack() {
    let w = world();
    let mut p = publisher(&w.storage, &w.run_dir, "alloc-1", &w.log);
    p.save_periodic(1, payload(1, BUDGET)).expect("step 1");
    let (log_a, log_b) = (w.log.clone(), w.log.clone());
    let (published, receipt) = p
        .terminal(TerminalKind::Preemption, 2)
        .expect("terminal")
        .native_cleanup(move || {
            log_a.lock().expect("log").push("native_cleanup".into());
            Ok(())
        })
        .expect("cleanup")
        .stop_services(move || {
            log_b.lock().expect("log").push("stop_services".into());
            Ok(())
        })
        .expect("services")
        .publish(payload(2, BUDGET))
        .expect("publish")
        .write_receipt()
        .expect("receipt");
    // The receipt is durable on disk before the acknowledgement (the fake master checks too).
    let on_disk = Receipt::read(&w.run_dir)
        .expect("read")
        .expect("receipt exists");
    assert_eq!(&on_disk, receipt.receipt());
    assert_eq!(on_disk.step, 2);
    assert_eq!(on_disk.uuid, published.uuid);
    assert_eq!(on_disk.allocation, "alloc-1");
    p.acknowledge_preemption(receipt).expect("ack");
    let ev = events(&w.log);
    let tail: Vec<&str> = ev[2..]
        .iter()
        .map(|s| s.split(' ').next().unwrap_or(""))
        .collect();
    assert_eq!(
        tail,
        [
            "native_cleanup",
            "stop_services",
            "new_checkpoint",
            "report_checkpoint",
            "acknowledge_preemption"
        ]
    );
    assert_eq!(
        p.core().reported.iter().filter(|r| r.1 == 2).count(),
        1,
        "published exactly once"
    );
}

#[test]
fn a_failing_cleanup_stops_the_terminal_save_before_anything_is_published() {
    let w = world();
    let mut p = publisher(&w.storage, &w.run_dir, "alloc-1", &w.log);
    let err = p
        .terminal(TerminalKind::Preemption, 1)
        .expect("terminal")
        .native_cleanup(|| Err("flush failed".into()))
        .err()
        .expect("fails");
    assert!(
        matches!(
            err,
            SnapshotError::Hook {
                stage: "native cleanup",
                ..
            }
        ),
        "{err}"
    );
    assert!(events(&w.log).is_empty());
    assert!(!w.run_dir.join(RECEIPT_FILE).exists());
}

/// Allocation 1 is preempted at step 2; returns the published checkpoint.
fn preempt_first_allocation(w: &World) -> hr_snapshot::Published {
    let mut p = publisher(&w.storage, &w.run_dir, "alloc-1", &w.log);
    p.save_periodic(1, payload(1, BUDGET)).expect("step 1");
    let (published, receipt) = p
        .terminal(TerminalKind::Preemption, 2)
        .and_then(|t| t.native_cleanup(|| Ok(())))
        .and_then(|t| t.stop_services(|| Ok(())))
        .and_then(|t| t.publish(payload(2, BUDGET)))
        .and_then(|t| t.write_receipt())
        .expect("preempted");
    p.acknowledge_preemption(receipt).expect("ack");
    published
}

/// The Core of the next allocation, whose scheduler selected `uuid` at step 2.
fn resumed_core(w: &World, uuid: &str) -> FakeCore {
    let mut core = FakeCore::new(&w.storage, &w.run_dir, w.log.clone());
    core.selected = Some(SelectedCheckpoint {
        uuid: uuid.to_owned(),
        steps_completed: 2,
    });
    core
}

/// A publisher that signs with `key()` and trusts only it.
fn signed_publisher(core: FakeCore, writer: &str, w: &World) -> Publisher<FakeCore> {
    Publisher::new(
        core,
        binding(writer, "cfg"),
        Some(key()),
        Trust::Keys(vec![key().verifying_key()]),
        w.run_dir.clone(),
    )
}

#[test]
fn restore_takes_the_selected_uuid_verifies_it_and_keeps_the_budget() {
    let w = world();
    let published = preempt_first_allocation(&w);
    let core = resumed_core(&w, &published.uuid);
    let mut p = signed_publisher(core, "alloc-2", &w);
    let restored = p.restore().expect("restore").expect("a checkpoint");
    assert_eq!(restored.uuid, published.uuid);
    assert_eq!(restored.snapshot.manifest.step, 2);
    assert_eq!(restored.snapshot.manifest.run.writer, "alloc-1");
    let budget = Budget::from_bytes(
        &std::fs::read(restored.snapshot.dir.join("payload/budget.json")).expect("budget"),
    )
    .expect("parse");
    assert_eq!(
        budget, BUDGET,
        "a restart never renews the deadline or the GPU budget"
    );
    // The next save chains to the restored checkpoint.
    let next = p.save_periodic(3, payload(3, budget)).expect("step 3");
    let manifest = hr_seal::verify(
        &w.storage.join(&next.uuid),
        &hr_seal::Expectations::default(),
    )
    .expect("verify");
    assert_eq!(
        manifest.manifest.parent.map(|p| p.manifest_sha256),
        Some(published.manifest_sha256)
    );
}

#[test]
fn restore_refuses_another_config_or_a_tampered_checkpoint() {
    let w = world();
    let published = preempt_first_allocation(&w);
    let selected = SelectedCheckpoint {
        uuid: published.uuid.clone(),
        steps_completed: 2,
    };
    let mut core = FakeCore::new(&w.storage, &w.run_dir, w.log.clone());
    core.selected = Some(selected.clone());
    let mut p = Publisher::new(
        core,
        binding("alloc-2", "other-cfg"),
        None,
        Trust::DigestOnly,
        w.run_dir.clone(),
    );
    assert!(matches!(
        p.restore(),
        Err(SnapshotError::Seal(SealError::ConfigMismatch { .. }))
    ));
    let state = w
        .storage
        .join(&published.uuid)
        .join("payload/trainer/trainer_state.json");
    std::fs::write(&state, b"{\"step\": 7}").expect("tamper");
    let mut core = FakeCore::new(&w.storage, &w.run_dir, w.log.clone());
    core.selected = Some(selected);
    let mut p = Publisher::new(
        core,
        binding("alloc-2", "cfg"),
        None,
        Trust::DigestOnly,
        w.run_dir.clone(),
    );
    assert!(matches!(
        p.restore(),
        Err(SnapshotError::Seal(SealError::DigestMismatch { .. }))
    ));
    assert!(p.last().is_none(), "nothing was adopted");
}

#[test]
fn a_scheduler_selection_other_than_the_receipt_is_refused() {
    // The seed's historical failure: two UUIDs at one step, the scheduler picked the other one.
    let w = world();
    let published = preempt_first_allocation(&w);
    let core = resumed_core(&w, "uuid-other");
    let mut p = Publisher::new(
        core,
        binding("alloc-2", "cfg"),
        None,
        Trust::DigestOnly,
        w.run_dir.clone(),
    );
    let err = p.restore().expect_err("refused");
    assert!(
        matches!(err, SnapshotError::ReceiptMismatch { ref receipt, .. } if *receipt == published.uuid),
        "{err}"
    );
}

#[test]
fn a_checkpoint_that_is_not_what_the_receipt_recorded_is_refused() {
    // Fencing: the receipt names the UUID the scheduler selected, but its manifest digest (or
    // writer) is not the one the preempted allocation recorded, e.g. a stale writer's copy.
    for field in ["manifest_sha256", "allocation"] {
        let w = world();
        let published = preempt_first_allocation(&w);
        let path = w.run_dir.join(RECEIPT_FILE);
        let mut receipt: serde_json::Value =
            serde_json::from_slice(&std::fs::read(&path).expect("receipt")).expect("json");
        receipt[field] = json!("someone-else");
        std::fs::write(&path, receipt.to_string()).expect("write");
        let core = resumed_core(&w, &published.uuid);
        let mut p = Publisher::new(
            core,
            binding("alloc-2", "cfg"),
            None,
            Trust::DigestOnly,
            w.run_dir.clone(),
        );
        let err = p.restore().expect_err("refused");
        assert!(
            matches!(err, SnapshotError::ReceiptContentMismatch { ref expected, .. } if expected == "someone-else"),
            "{field}: {err}"
        );
        assert!(p.last().is_none(), "nothing was adopted");
    }
}

#[test]
fn an_already_selected_terminal_uuid_is_reused_and_not_published_again() {
    let w = world();
    let published = preempt_first_allocation(&w);
    let core = resumed_core(&w, &published.uuid);
    let mut p = signed_publisher(core, "alloc-2", &w);
    p.restore().expect("restore");
    let before = events(&w.log).len();
    // Preempted again before finishing another step: the step-2 checkpoint is reused.
    let (again, receipt) = p
        .terminal(TerminalKind::Preemption, 2)
        .and_then(|t| t.native_cleanup(|| Ok(())))
        .and_then(|t| t.stop_services(|| Ok(())))
        .and_then(|t| t.publish(|_| Err("must not write".into())))
        .and_then(|t| t.write_receipt())
        .expect("reused");
    p.acknowledge_preemption(receipt).expect("ack");
    assert_eq!(again, published);
    assert_eq!(
        events(&w.log)[before..],
        ["acknowledge_preemption".to_owned()],
        "nothing published again"
    );
    assert_eq!(p.core().uuids_created, 0);
    let local =
        std::fs::read_to_string(w.run_dir.join("local-records.jsonl")).expect("local record");
    assert!(
        local.contains("terminal-checkpoint-reused") && local.contains(&published.uuid),
        "{local}"
    );
}

#[test]
fn the_rng_is_identical_before_and_after_a_report_call() {
    let w = world();
    let mut core = FakeCore::new(&w.storage, &w.run_dir, w.log.clone());
    let mut rng = SharedRng::new(0x9e37_79b9_7f4a_7c15);
    core.meddling_rng = Some(rng.clone());
    let mut p = Publisher::new(
        core,
        binding("alloc-1", "cfg"),
        None,
        Trust::DigestOnly,
        w.run_dir.clone(),
    );
    let before = hr_snapshot::RngState::save_state(&rng);
    p.report_metrics(&mut rng, 1, json!({"loss": 0.5}))
        .expect("report");
    assert_eq!(
        hr_snapshot::RngState::save_state(&rng),
        before,
        "a report call moved the RNG"
    );
    // Negative control: the same call without preservation does move it.
    let mut raw = FakeCore::new(&w.storage, &w.run_dir, w.log.clone());
    raw.meddling_rng = Some(rng.clone());
    hr_snapshot::CoreCheckpoints::report_metrics(&mut raw, 1, json!({})).expect("raw report");
    assert_ne!(hr_snapshot::RngState::save_state(&rng), before);
    // And the helper restores whatever the closure drew.
    let state = hr_snapshot::RngState::save_state(&rng);
    with_rng_preserved(&mut rng, |r| (r.draw(), r.draw()));
    assert_eq!(hr_snapshot::RngState::save_state(&rng), state);
}

#[test]
fn the_budget_is_charged_and_never_renewed() {
    let mut b = Budget::start(1_000, 2_400, 2_400);
    b.charge(1_000);
    let sealed = Budget::from_bytes(&b.to_bytes()).expect("round trip");
    assert_eq!(sealed, b);
    assert_eq!(sealed.deadline_unix_s, 3_400);
    assert!(!sealed.exhausted(3_399));
    assert!(
        sealed.exhausted(3_400),
        "the deadline is absolute, not renewed by a restart"
    );
    let mut spent = sealed;
    spent.charge(1_400);
    assert!(
        spent.exhausted(0),
        "GPU seconds accumulate across allocations"
    );
}

#[test]
fn a_final_save_publishes_once_and_needs_no_receipt() {
    let w = world();
    let mut p = publisher(&w.storage, &w.run_dir, "alloc-1", &w.log);
    let published = p
        .terminal(TerminalKind::Final, 8)
        .and_then(|t| t.native_cleanup(|| Ok(())))
        .and_then(|t| t.stop_services(|| Ok(())))
        .and_then(|t| t.publish(payload(8, BUDGET)))
        .and_then(|t| t.finish())
        .expect("final");
    assert_eq!(published.step, 8);
    assert!(!w.run_dir.join(RECEIPT_FILE).exists());
    assert_eq!(p.core().reported.len(), 1);
}
