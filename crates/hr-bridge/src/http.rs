//! A minimal HTTP/1.1 GET for readiness probes on loopback (no client library, no runtime).

use std::{
    io::{Read, Write},
    net::{SocketAddr, TcpStream},
    time::Duration,
};

/// The status code of `GET path` on `127.0.0.1:port`, or `None` if nothing answered.
pub(crate) fn get_status(port: u16, path: &str, timeout: Duration) -> Option<u16> {
    let addr = SocketAddr::from(([127, 0, 0, 1], port));
    let mut stream = TcpStream::connect_timeout(&addr, timeout).ok()?;
    stream.set_read_timeout(Some(timeout)).ok()?;
    stream.set_write_timeout(Some(timeout)).ok()?;
    write!(
        stream,
        "GET {path} HTTP/1.1\r\nHost: 127.0.0.1:{port}\r\nConnection: close\r\n\r\n"
    )
    .ok()?;
    let mut head = [0u8; 64];
    let n = stream.read(&mut head).ok()?;
    let text = std::str::from_utf8(&head[..n]).ok()?;
    let mut parts = text.split_whitespace();
    match (parts.next(), parts.next()) {
        (Some(v), Some(code)) if v.starts_with("HTTP/") => code.parse().ok(),
        _ => None,
    }
}

/// `GET path` on `127.0.0.1:port` returning the status and the JSON body.
pub(crate) fn get_json(
    port: u16,
    path: &str,
    timeout: Duration,
) -> Result<(u16, serde_json::Value), String> {
    let addr = SocketAddr::from(([127, 0, 0, 1], port));
    let mut stream =
        TcpStream::connect_timeout(&addr, timeout).map_err(|e| format!("connect: {e}"))?;
    stream
        .set_read_timeout(Some(timeout))
        .map_err(|e| e.to_string())?;
    write!(
        stream,
        "GET {path} HTTP/1.1\r\nHost: 127.0.0.1:{port}\r\nConnection: close\r\n\r\n"
    )
    .map_err(|e| format!("send: {e}"))?;
    let mut raw = Vec::new();
    stream
        .read_to_end(&mut raw)
        .map_err(|e| format!("receive: {e}"))?;
    let text = String::from_utf8_lossy(&raw);
    let (head, body) = text.split_once("\r\n\r\n").ok_or("no HTTP header")?;
    let status = head
        .split_whitespace()
        .nth(1)
        .and_then(|c| c.parse().ok())
        .ok_or("no status")?;
    let body = if head
        .to_ascii_lowercase()
        .contains("transfer-encoding: chunked")
    {
        dechunk(body)
    } else {
        body.to_owned()
    };
    let json =
        serde_json::from_str(&body).map_err(|e| format!("body is not JSON ({e}): {body}"))?;
    Ok((status, json))
}

fn dechunk(body: &str) -> String {
    let mut out = String::new();
    let mut rest = body;
    while let Some((size, tail)) = rest.split_once("\r\n") {
        let Ok(n) = usize::from_str_radix(size.trim(), 16) else {
            break;
        };
        if n == 0 || tail.len() < n {
            break;
        }
        out.push_str(&tail[..n]);
        rest = tail[n..].trim_start_matches("\r\n");
    }
    out
}

/// A single-threaded runtime for a blocking client of `service`.
pub(crate) fn runtime(
    service: &str,
) -> Result<std::sync::Arc<tokio::runtime::Runtime>, hr_env::EnvError> {
    tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()
        .map(std::sync::Arc::new)
        .map_err(|source| hr_files::IoError::new("start runtime for", service, source).into())
}
