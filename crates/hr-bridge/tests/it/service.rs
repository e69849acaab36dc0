//! The service supervisor with a real child process (a small Python stand-in): readiness, port
//! collisions, early exits, a service that never becomes ready, a death while in use, and that
//! shutdown and drop leave no process of the group behind.

use std::{path::PathBuf, time::Duration};

use hr_bridge::{OwnedService, ServiceSpec};
use hr_env::EnvError;

fn spec(dir: &std::path::Path, mode: &str) -> ServiceSpec {
    ServiceSpec {
        name: format!("stand-in-{mode}"),
        program: PathBuf::from("python3"),
        args: vec![
            PathBuf::from(env!("CARGO_MANIFEST_DIR"))
                .join("test_data/service.py")
                .display()
                .to_string(),
            mode.to_owned(),
            "{port}".to_owned(),
        ],
        cwd: dir.to_owned(),
        env: vec![("PYTHONUNBUFFERED".into(), "1".into())],
        log_path: dir.join("logs/service.log"),
        ready_path: "/health".into(),
        // A bound on a broken start, generous for a loaded machine.
        ready_timeout: Duration::from_secs(120),
        grace: Duration::from_secs(5),
        attempts: 3,
        first_port: None,
    }
}

/// Whether `done` holds within a minute (a killed process vanishes once the kernel has run its
/// exit, which a loaded machine may delay; no test relies on how soon).
fn ends(done: impl Fn() -> bool) -> bool {
    (0..3000).any(|_| {
        done() || {
            std::thread::sleep(Duration::from_millis(20));
            false
        }
    })
}

fn alive(pid: u32) -> bool {
    // A reaped or killed process has no /proc entry (zombies report state Z).
    std::fs::read_to_string(format!("/proc/{pid}/stat")).is_ok_and(|s| {
        s.rsplit(')')
            .next()
            .is_some_and(|rest| !rest.trim_start().starts_with('Z'))
    })
}

fn grandchild_pid(log: &std::path::Path) -> Option<u32> {
    std::fs::read_to_string(log)
        .ok()?
        .lines()
        .find_map(|l| l.strip_prefix("grandchild ")?.trim().parse().ok())
}

#[test]
fn a_ready_service_answers_and_shutdown_leaves_no_process_of_its_group() {
    let tmp = tempfile::tempdir().expect("tmp");
    let s = spec(tmp.path(), "grandchild");
    let service = OwnedService::start(&s).expect("ready");
    assert!(service.base_url().starts_with("http://127.0.0.1:"));
    let pid = service.pid().expect("pid");
    let grandchild = grandchild_pid(&s.log_path).expect("grandchild started");
    assert!(alive(pid) && alive(grandchild));
    service.shutdown().expect("a TERM stop is clean");
    assert!(ends(|| !alive(pid)), "leader gone");
    assert!(
        ends(|| !alive(grandchild)),
        "the whole process group is gone"
    );
}

#[test]
fn dropping_a_service_kills_its_group() {
    let tmp = tempfile::tempdir().expect("tmp");
    let s = spec(tmp.path(), "grandchild");
    let service = OwnedService::start(&s).expect("ready");
    let grandchild = grandchild_pid(&s.log_path).expect("grandchild started");
    drop(service);
    assert!(ends(|| !alive(grandchild)));
}

#[test]
fn a_port_already_taken_is_retried_on_a_fresh_port() {
    let tmp = tempfile::tempdir().expect("tmp");
    let taken = std::net::TcpListener::bind("127.0.0.1:0").expect("bind");
    let mut s = spec(tmp.path(), "ok");
    s.first_port = Some(taken.local_addr().expect("addr").port());
    let service = OwnedService::start(&s).expect("ready on the second port");
    assert_ne!(Some(service.port()), s.first_port);
    let log = std::fs::read_to_string(&s.log_path).expect("log");
    assert!(log.contains("Address already in use"), "{log}");
    service.shutdown().expect("stop");
}

#[test]
fn a_service_that_keeps_exiting_early_reports_its_log_tail() {
    let tmp = tempfile::tempdir().expect("tmp");
    let err = OwnedService::start(&spec(tmp.path(), "exit-early")).expect_err("never starts");
    let EnvError::EarlyExit {
        service,
        status,
        attempts,
        log_tail,
    } = &err
    else {
        panic!("{err}")
    };
    assert_eq!(
        (service.as_str(), status.as_str(), *attempts),
        ("stand-in-exit-early", "exit code 3", 3)
    );
    assert!(log_tail.contains("fatal: configuration broken"), "{err}");
}

#[test]
fn a_service_that_never_becomes_ready_times_out_with_its_log_and_is_killed() {
    let tmp = tempfile::tempdir().expect("tmp");
    let mut s = spec(tmp.path(), "never-ready");
    s.ready_timeout = Duration::from_secs(2);
    let err = OwnedService::start(&s).expect_err("times out");
    assert!(
        matches!(err, EnvError::NotReady { ref log_tail, .. } if log_tail.contains("service starting: never-ready")),
        "{err}"
    );
    // Nothing of it is left: no python process runs service.py never-ready (only this test runs
    // that mode).
    let leftovers = || {
        std::fs::read_dir("/proc")
            .expect("proc")
            .filter_map(|e| e.ok())
            .filter_map(|e| std::fs::read(e.path().join("cmdline")).ok())
            .map(|c| String::from_utf8_lossy(&c).replace('\0', " "))
            .filter(|c| c.contains("service.py") && c.contains("never-ready"))
            .count()
    };
    assert!(
        ends(|| leftovers() == 0),
        "a never-ready service was left running"
    );
}

#[test]
fn a_service_that_dies_in_use_is_reported_with_its_log_tail() {
    let tmp = tempfile::tempdir().expect("tmp");
    let s = spec(tmp.path(), "ok");
    let mut service = OwnedService::start(&s).expect("ready");
    service.check_alive().expect("alive");
    // Ask it to exit, as a crash mid-episode would.
    let _ = std::net::TcpStream::connect(("127.0.0.1", service.port())).map(|mut c| {
        use std::io::Write;
        let _ = c.write_all(b"GET /exit HTTP/1.1\r\nHost: x\r\n\r\n");
    });
    let mut died = None;
    for _ in 0..1200 {
        if let Err(e) = service.check_alive() {
            died = Some(e);
            break;
        }
        std::thread::sleep(Duration::from_millis(50));
    }
    let err = died.expect("the death is noticed");
    assert!(
        matches!(err, EnvError::Died { ref status, ref log_tail, .. } if status == "exit code 7" && log_tail.contains("exiting on request")),
        "{err}"
    );
    assert!(err.to_string().starts_with("stand-in-ok: died"));
}
