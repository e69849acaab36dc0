//! Starting a machine's ranks, as Determined's launchers do: each rank gets torchrun's variables,
//! its output lines are prefixed `[rank=N]` (the WebUI's filter by rank), and when one rank fails
//! the others are killed, so the allocation fails as a whole.

use std::ffi::OsString;
use std::io::{BufRead, BufReader, Read, Write};
use std::process::{Child, Command, ExitStatus, Stdio};
use std::time::Duration;

use crate::{CollectiveError, io};

/// How often the launcher looks at its ranks (it has nothing else to do).
const POLL: Duration = Duration::from_millis(100);

/// The ranks one machine starts and where they meet.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Launch {
    /// Ranks on this machine (`LOCAL_WORLD_SIZE`).
    pub local: usize,
    /// The rank of this machine's first.
    pub first: usize,
    /// Ranks in all (`WORLD_SIZE`).
    pub world: usize,
    /// This machine's rank and the machines (`GROUP_RANK`, `GROUP_WORLD_SIZE`).
    pub group: (usize, usize),
    /// Where the chief listens (`MASTER_ADDR`).
    pub chief_addr: String,
    /// Its port (`MASTER_PORT`).
    pub port: u16,
}

impl Launch {
    /// Runs `command` once per local rank and waits for all of them. Returns the first rank to
    /// fail and its status (the others killed), or `None` when every rank succeeded.
    pub fn run(
        &self,
        command: &[OsString],
    ) -> Result<Option<(usize, ExitStatus)>, CollectiveError> {
        let (program, rest) = command.split_first().ok_or_else(|| {
            CollectiveError::Protocol("give the command each rank runs".to_owned())
        })?;
        let mut ranks: Vec<(usize, Child)> = Vec::with_capacity(self.local);
        let mut copies = Vec::new();
        for local in 0..self.local {
            let rank = self.first + local;
            let spawned = Command::new(program)
                .args(rest)
                .env("RANK", rank.to_string())
                .env("WORLD_SIZE", self.world.to_string())
                .env("LOCAL_RANK", local.to_string())
                .env("LOCAL_WORLD_SIZE", self.local.to_string())
                .env("GROUP_RANK", self.group.0.to_string())
                .env("GROUP_WORLD_SIZE", self.group.1.to_string())
                .env("MASTER_ADDR", &self.chief_addr)
                .env("MASTER_PORT", self.port.to_string())
                .stdin(Stdio::null())
                .stdout(Stdio::piped())
                .stderr(Stdio::piped())
                .spawn();
            let mut child = match spawned {
                Ok(child) => child,
                Err(e) => {
                    stop(&mut ranks);
                    return Err(io(format!("starting {}", program.to_string_lossy()))(e));
                }
            };
            if let Some(out) = child.stdout.take() {
                copies.push(std::thread::spawn(move || {
                    copy(rank, out, std::io::stdout())
                }));
            }
            if let Some(err) = child.stderr.take() {
                copies.push(std::thread::spawn(move || {
                    copy(rank, err, std::io::stderr())
                }));
            }
            ranks.push((rank, child));
        }
        let failed = wait(&mut ranks);
        for copy in copies {
            let _ = copy.join();
        }
        failed
    }
}

/// Copies a rank's output to `to`, each line prefixed with its rank.
fn copy(rank: usize, from: impl Read, mut to: impl Write) {
    let mut from = BufReader::new(from);
    let mut line = Vec::new();
    loop {
        line.clear();
        match from.read_until(b'\n', &mut line) {
            Ok(0) | Err(_) => return,
            Ok(_) => {
                let mut out = format!("[rank={rank}] ").into_bytes();
                out.extend_from_slice(&line);
                if !out.ends_with(b"\n") {
                    out.push(b'\n');
                }
                if to.write_all(&out).and_then(|()| to.flush()).is_err() {
                    return;
                }
            }
        }
    }
}

/// Waits for every rank; at the first that fails, kills the others.
fn wait(ranks: &mut [(usize, Child)]) -> Result<Option<(usize, ExitStatus)>, CollectiveError> {
    let mut running: Vec<usize> = (0..ranks.len()).collect();
    while !running.is_empty() {
        let mut still = Vec::with_capacity(running.len());
        for i in running {
            let (rank, child) = &mut ranks[i];
            let rank = *rank;
            match child.try_wait() {
                Ok(Some(status)) if !status.success() => {
                    stop(ranks);
                    return Ok(Some((rank, status)));
                }
                Ok(Some(_)) => {}
                Ok(None) => still.push(i),
                Err(e) => {
                    stop(ranks);
                    return Err(io(format!("waiting for rank {rank}"))(e));
                }
            }
        }
        running = still;
        if !running.is_empty() {
            std::thread::sleep(POLL);
        }
    }
    Ok(None)
}

/// Kills every rank still running and reaps it.
fn stop(ranks: &mut [(usize, Child)]) {
    for (_, child) in ranks.iter_mut() {
        if matches!(child.try_wait(), Ok(None)) {
            let _ = child.kill();
        }
        let _ = child.wait();
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn launch(local: usize) -> Launch {
        Launch {
            local,
            first: 2,
            world: 4,
            group: (1, 2),
            chief_addr: "127.0.0.1".to_owned(),
            port: 29400,
        }
    }

    fn sh(script: &str) -> Vec<OsString> {
        ["sh", "-c", script].iter().map(OsString::from).collect()
    }

    #[test]
    fn every_rank_gets_torchruns_variables_and_all_succeed() {
        let dir = tempfile::tempdir().expect("tempdir");
        let script = format!(
            "echo $RANK $WORLD_SIZE $LOCAL_RANK $LOCAL_WORLD_SIZE $GROUP_RANK $GROUP_WORLD_SIZE \
             $MASTER_ADDR $MASTER_PORT > {}/$RANK",
            dir.path().display()
        );
        assert_eq!(launch(2).run(&sh(&script)).expect("ran"), None);
        let read = |rank: &str| std::fs::read_to_string(dir.path().join(rank)).expect("written");
        assert_eq!(read("2"), "2 4 0 2 1 2 127.0.0.1 29400\n");
        assert_eq!(read("3"), "3 4 1 2 1 2 127.0.0.1 29400\n");
    }

    #[test]
    fn a_failing_rank_stops_the_others_and_is_reported() {
        // Rank 3 fails at once; rank 2 would wait for an hour.
        let failed = launch(2)
            .run(&sh("if [ $RANK = 3 ]; then exit 7; fi; exec sleep 3600"))
            .expect("ran");
        let (rank, status) = failed.expect("a failure");
        assert_eq!((rank, status.code()), (3, Some(7)));
    }

    #[test]
    fn a_program_that_does_not_exist_is_named() {
        let err = launch(1)
            .run(&[OsString::from("/nonexistent/rank")])
            .expect_err("refused");
        assert!(
            err.to_string().contains("starting /nonexistent/rank"),
            "{err}"
        );
    }
}
