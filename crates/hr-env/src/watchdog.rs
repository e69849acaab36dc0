//! A child process group that cannot outlive the process that started it: a watchdog (`sh`)
//! joins the group and waits on a pipe only its starter writes to. When the starter ends, however
//! (a SIGKILL included, when no `Drop` runs), the kernel closes the pipe and the watchdog kills
//! the whole group: a reward function's helpers or a service's workers never linger after `train`.

use std::os::unix::process::CommandExt;
use std::process::{Child, ChildStdin, Command, Stdio};

/// The watchdog of one process group; dropping it releases the group to be killed.
#[derive(Debug)]
pub struct GroupWatchdog {
    /// The write end the watchdog waits on; never written.
    pipe: Option<ChildStdin>,
    watchdog: Child,
}

impl GroupWatchdog {
    /// Puts a watchdog into process group `group` (a running child's pid, as `process_group(0)`
    /// made it).
    pub fn spawn(group: u32) -> std::io::Result<Self> {
        let id = i32::try_from(group).map_err(std::io::Error::other)?;
        let mut watchdog = Command::new("sh")
            .args(["-c", "cat > /dev/null; kill -9 -\"$1\"", "hr-watchdog"])
            .arg(group.to_string())
            .stdin(Stdio::piped())
            .stdout(Stdio::null())
            .stderr(Stdio::null())
            .process_group(id)
            .spawn()?;
        let pipe = watchdog.stdin.take();
        Ok(Self { pipe, watchdog })
    }
}

impl Drop for GroupWatchdog {
    fn drop(&mut self) {
        // As when the starter dies: the pipe closes and the group (the watchdog with it) goes.
        drop(self.pipe.take());
        let _ = self.watchdog.wait();
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_group_is_killed_once_its_starter_lets_go_of_the_pipe() {
        let mut leader = Command::new("sleep")
            .arg("300")
            .process_group(0)
            .spawn()
            .expect("sleep");
        let pid = leader.id();
        let watchdog = GroupWatchdog::spawn(pid).expect("watchdog");
        drop(watchdog);
        let status = leader.wait().expect("reaped");
        assert_eq!(
            std::os::unix::process::ExitStatusExt::signal(&status),
            Some(9),
            "killed by the watchdog"
        );
    }
}
