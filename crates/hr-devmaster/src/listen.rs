//! The accept loop, with the limits that keep a connection flood from taking the master down:
//! at most [`connection_cap`] connections are served at once (the rest wait, unaccepted, in the
//! kernel's backlog, so they hold no file descriptor of ours), and a connection that has not sent
//! a whole request head within [`HEADER_READ_TIMEOUT`] (a new one, or an idle keep-alive one) is
//! closed. Half the open-file limit always stays free for the state files and trial processes.

use std::{sync::Arc, time::Duration};

use hyper_util::{
    rt::{TokioIo, TokioTimer},
    service::TowerToHyperService,
};
use tokio::{net::TcpListener, sync::Semaphore};

/// How long a connection may take to send a request head (or sit idle between requests).
pub(crate) const HEADER_READ_TIMEOUT: Duration = Duration::from_secs(10);
/// The most connections served at once, whatever the open-file limit.
pub(crate) const MAX_CONNECTIONS: usize = 4096;

/// Half the process's open-file limit (`RLIMIT_NOFILE`, soft), at most [`MAX_CONNECTIONS`] and at
/// least 8.
pub(crate) fn connection_cap() -> usize {
    let limit = rustix::process::getrlimit(rustix::process::Resource::Nofile).current;
    let half = limit.map_or(MAX_CONNECTIONS, |l| {
        usize::try_from(l / 2).unwrap_or(MAX_CONNECTIONS)
    });
    half.clamp(8, MAX_CONNECTIONS)
}

/// Serves `router` on `listener` (through TLS when `tls` is given) until the task is aborted.
pub(crate) async fn serve(
    listener: TcpListener,
    router: axum::Router,
    tls: Option<tokio_rustls::TlsAcceptor>,
) {
    let permits = Arc::new(Semaphore::new(connection_cap()));
    let mut http = hyper::server::conn::http1::Builder::new();
    http.timer(TokioTimer::new())
        .header_read_timeout(HEADER_READ_TIMEOUT);
    loop {
        let Ok(permit) = permits.clone().acquire_owned().await else {
            return; // never closed
        };
        let stream = match listener.accept().await {
            Ok((stream, _)) => stream,
            Err(e) if is_connection_error(&e) => continue,
            Err(e) => {
                // Out of file descriptors despite the cap (trial processes hold some): wait for
                // some to close rather than spin.
                tracing::error!("devmaster: accepting a connection: {e}");
                tokio::time::sleep(Duration::from_secs(1)).await;
                continue;
            }
        };
        let (http, service) = (http.clone(), TowerToHyperService::new(router.clone()));
        let tls = tls.clone();
        tokio::spawn(async move {
            // A client that goes away, times out or fails its handshake is that connection's
            // business only.
            match tls {
                None => {
                    let _ = http.serve_connection(TokioIo::new(stream), service).await;
                }
                Some(tls) => {
                    // The handshake is bounded like a request head.
                    let accepted =
                        tokio::time::timeout(HEADER_READ_TIMEOUT, tls.accept(stream)).await;
                    if let Ok(Ok(stream)) = accepted {
                        let _ = http.serve_connection(TokioIo::new(stream), service).await;
                    }
                }
            }
            drop(permit);
        });
    }
}

/// Errors that concern one connection (the peer reset it before it was accepted), not the
/// listener.
fn is_connection_error(e: &std::io::Error) -> bool {
    matches!(
        e.kind(),
        std::io::ErrorKind::ConnectionRefused
            | std::io::ErrorKind::ConnectionAborted
            | std::io::ErrorKind::ConnectionReset
    )
}
