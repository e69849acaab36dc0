//! Typed errors: the master's error envelope mapped the way the Python client maps it.

/// A failed call. Messages come from the master's envelope; tokens never appear in them.
#[derive(Debug, thiserror::Error)]
pub enum DetError {
    /// 401: log in again.
    #[error("unauthenticated: {0}")]
    Unauthenticated(String),
    /// 403: not allowed.
    #[error("forbidden: {0}")]
    Forbidden(String),
    /// 404: no such object.
    #[error("not found: {0}")]
    NotFound(String),
    /// 400: bad request (invalid argument or failed precondition).
    #[error("invalid request: {0}")]
    InvalidRequest(String),
    /// Any other status at or above 300.
    #[error("master error {status}: {message}")]
    Api {
        /// HTTP status.
        status: u16,
        /// The envelope's message.
        message: String,
    },
    /// The connection failed or timed out (after retries).
    #[error("cannot reach the master at {master}: {message}")]
    Transport {
        /// The master URL.
        master: String,
        /// What happened.
        message: String,
    },
    /// The master's TLS certificate was refused (not retried).
    #[error("cannot trust the master at {master}: {message}")]
    Tls {
        /// The master URL.
        master: String,
        /// The certificate problem and how to fix it.
        message: String,
    },
    /// A request that creates a record (metrics, a checkpoint, an experiment, a command) got no
    /// answer after it was sent (a timeout, a broken connection, a gateway's 502/504): the master
    /// may have applied it, so it is not sent again blindly. The caller confirms by reading.
    #[error("{path}: no answer ({message}); not sent again, since the master may have applied it")]
    Unconfirmed {
        /// The request path.
        path: String,
        /// What happened.
        message: String,
    },
    /// The response was not the JSON the API defines.
    #[error("unexpected response from {path}: {message}")]
    Decode {
        /// The request path.
        path: String,
        /// What did not parse.
        message: String,
    },
    /// No token: set `DET_USER_TOKEN` or log in.
    #[error("no token: set DET_USER_TOKEN or log in first")]
    NoToken,
    /// The client was configured wrongly.
    #[error("configuration: {0}")]
    Config(String),
}

impl DetError {
    /// Maps an HTTP status and body to an error, taking the message from `message`, then
    /// `error.message`, then `error.error` (the Python client's order).
    pub(crate) fn from_status(status: u16, body: &[u8]) -> Self {
        let value: serde_json::Value = serde_json::from_slice(body).unwrap_or_default();
        let message = value
            .get("message")
            .and_then(|m| m.as_str())
            .or_else(|| value.pointer("/error/message").and_then(|m| m.as_str()))
            .or_else(|| value.pointer("/error/error").and_then(|m| m.as_str()))
            .map(str::to_owned)
            .unwrap_or_else(|| String::from_utf8_lossy(body).chars().take(500).collect());
        match status {
            401 => Self::Unauthenticated(message),
            403 => Self::Forbidden(message),
            404 => Self::NotFound(message),
            400 => Self::InvalidRequest(message),
            _ => Self::Api { status, message },
        }
    }
}
