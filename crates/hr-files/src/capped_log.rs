//! A child process's output appended to a log that stops growing at a bound: what a service or
//! a reward function writes is copied from its pipe by a thread, until the log file holds the
//! bound; past it one line says so and the rest is read and dropped (the child never blocks on
//! a full pipe, and a chatty process cannot fill the disk).

use std::io::{Read, Write};
use std::path::Path;
use std::sync::mpsc::{Receiver, RecvTimeoutError, channel};
use std::time::Duration;

/// The largest a run's `service.log` grows.
pub const MAX_SERVICE_LOG_BYTES: u64 = 64 << 20;

/// One pipe being copied into a log.
#[derive(Debug)]
pub struct CappedLog {
    done: Receiver<()>,
}

impl CappedLog {
    /// Copies everything `from` yields into the log at `path` (appended; created if absent)
    /// while the file holds at most `cap` bytes.
    pub fn spawn(from: impl Read + Send + 'static, path: &Path, cap: u64) -> std::io::Result<Self> {
        let mut log = std::fs::OpenOptions::new()
            .create(true)
            .append(true)
            .open(path)?;
        let (finished, done) = channel();
        std::thread::spawn(move || {
            copy_capped(from, &mut log, cap);
            let _ = finished.send(());
        });
        Ok(Self { done })
    }

    /// Waits, at most `limit`, until the pipe has closed and all it held is in the log; whether
    /// it has.
    pub fn finish(&self, limit: Duration) -> bool {
        !matches!(
            self.done.recv_timeout(limit),
            Err(RecvTimeoutError::Timeout)
        )
    }
}

fn copy_capped(mut from: impl Read, log: &mut std::fs::File, cap: u64) {
    let mut buf = vec![0u8; 64 << 10];
    let mut full = false;
    loop {
        let n = match from.read(&mut buf) {
            Ok(0) | Err(_) => return,
            Ok(n) => n,
        };
        if full {
            continue;
        }
        let size = log.metadata().map_or(0, |m| m.len());
        let room = usize::try_from(cap.saturating_sub(size)).unwrap_or(usize::MAX);
        if n <= room {
            let _ = log.write_all(&buf[..n]);
        } else {
            full = true;
            let _ = log.write_all(&buf[..room]);
            let _ = writeln!(
                log,
                "\n[hessian-recipes: this log reached {} MiB; later output is dropped]",
                cap >> 20
            );
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_log_stops_at_its_bound_and_says_so_while_the_pipe_is_read_to_its_end() {
        let dir = tempfile::tempdir().expect("tmp");
        let path = dir.path().join("service.log");
        std::fs::write(&path, "earlier\n").expect("write");
        let output = vec![b'x'; 3 << 20];
        let log = CappedLog::spawn(std::io::Cursor::new(output), &path, 1 << 20).expect("spawn");
        assert!(
            log.finish(Duration::from_secs(60)),
            "the copy ends with its input"
        );
        let text = std::fs::read_to_string(&path).expect("read");
        assert!(text.starts_with("earlier\nxxx"), "appended");
        let (kept, note) = text.split_at(1 << 20);
        assert!(kept.bytes().skip(8).all(|b| b == b'x'));
        assert!(
            note.contains("reached 1 MiB; later output is dropped"),
            "{note}"
        );
        assert!(text.len() < (1 << 20) + 200, "{}", text.len());
    }
}
