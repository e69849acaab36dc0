//! The error every environment reports: each failure names the service (`fixture` for the
//! built-in tasks) and, where a service is at fault, carries the tail of its log.

use std::path::PathBuf;

/// A service or protocol failure.
#[derive(Debug, thiserror::Error)]
pub enum EnvError {
    /// The program could not be started.
    #[error("{service}: cannot start {program}: {source}")]
    Spawn {
        /// Service name.
        service: String,
        /// The interpreter or program.
        program: PathBuf,
        /// Why.
        source: std::io::Error,
    },
    /// Every attempt to start the service exited before it became ready.
    #[error(
        "{service}: exited before it was ready ({status}) after {attempts} attempt(s); log tail:\n{log_tail}"
    )]
    EarlyExit {
        /// Service name.
        service: String,
        /// Its exit status.
        status: String,
        /// How many ports were tried.
        attempts: u32,
        /// The end of its log.
        log_tail: String,
    },
    /// The service did not become ready in time.
    #[error("{service}: not ready after {waited_s} s; log tail:\n{log_tail}")]
    NotReady {
        /// Service name.
        service: String,
        /// Seconds waited.
        waited_s: u64,
        /// The end of its log.
        log_tail: String,
    },
    /// The service died while in use.
    #[error("{service}: died ({status}); log tail:\n{log_tail}")]
    Died {
        /// Service name.
        service: String,
        /// Its exit status.
        status: String,
        /// The end of its log.
        log_tail: String,
    },
    /// A request failed at the transport level.
    #[error("{service}: {message}")]
    Transport {
        /// Service name.
        service: String,
        /// What happened.
        message: String,
    },
    /// The service reported an error (its code, e.g. `CAPACITY_REACHED`, and message).
    #[error("{service}: {code}: {message}")]
    Service {
        /// Service name.
        service: String,
        /// The service's error code.
        code: String,
        /// Its message.
        message: String,
    },
    /// The service answered something the protocol does not allow.
    #[error("{service}: malformed reply: {message}")]
    Malformed {
        /// Service name.
        service: String,
        /// What was wrong.
        message: String,
    },
    /// A local file operation failed.
    #[error(transparent)]
    Io(#[from] hr_files::IoError),
}
