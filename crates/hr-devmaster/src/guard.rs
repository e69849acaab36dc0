//! What every request passes before a handler sees it, and what every answer passes after:
//! the master fails closed once its state could not be persisted (every request, including the
//! one whose change was lost, gets 503), a `Host` other than this loopback master is refused (a
//! DNS-rebinding page cannot reach it), and a body declared as anything but JSON is refused (a
//! browser's form or `text/plain` post cannot create an experiment; `det` itself sends its JSON
//! bodies undeclared).

use std::sync::Arc;

use axum::{
    extract::{Request, State},
    http::{StatusCode, header},
    middleware::Next,
    response::{IntoResponse, Response},
};
use serde_json::json;

use crate::master::Master;

fn refuse(status: StatusCode, message: &str) -> Response {
    (status, axum::Json(json!({"error": {"error": message}}))).into_response()
}

fn stopped(master: &Master) -> Option<Response> {
    master.failure().map(|why| {
        refuse(
            StatusCode::SERVICE_UNAVAILABLE,
            &format!("the devmaster stopped: {why}"),
        )
    })
}

/// Whether `host` (a `Host` header value) names this master, with this port when it gives one:
/// `localhost` or a loopback IP, and any IP literal when it listens beyond loopback (with a
/// password). Never another name: a DNS-rebinding page reaches the port under its own name.
fn host_is_ours(host: &str, port: u16, listen: std::net::IpAddr) -> bool {
    let (name, given) = match host.strip_prefix('[') {
        // `[::1]` or `[::1]:8080`
        Some(rest) => match rest.split_once(']') {
            Some((inner, tail)) => (inner, tail.strip_prefix(':')),
            None => return false,
        },
        None => match host.rsplit_once(':') {
            Some((name, p)) => (name, Some(p)),
            None => (host, None),
        },
    };
    given.is_none_or(|p| p.parse::<u16>() == Ok(port))
        && (name == "localhost"
            || name
                .parse::<std::net::IpAddr>()
                .is_ok_and(|ip| ip.is_loopback() || !listen.is_loopback()))
}

/// The guard layer.
pub(crate) async fn guard(State(master): State<Arc<Master>>, req: Request, next: Next) -> Response {
    if let Some(answer) = stopped(&master) {
        return answer;
    }
    let host = req
        .headers()
        .get(header::HOST)
        .and_then(|h| h.to_str().ok())
        .unwrap_or("");
    if !host_is_ours(host, master.port(), master.config.listen.ip()) {
        return refuse(
            StatusCode::MISDIRECTED_REQUEST,
            &format!("Host `{host}` is not this loopback master"),
        );
    }
    // Browsers always declare the type of a body they send (`text/plain` for a string, form
    // types for forms); `det` and the Python client send JSON, with or without declaring it.
    let declared = req
        .headers()
        .get(header::CONTENT_TYPE)
        .map(|v| v.to_str().unwrap_or("").trim_start().to_ascii_lowercase());
    if declared.is_some_and(|t| !t.starts_with("application/json")) {
        return refuse(
            StatusCode::UNSUPPORTED_MEDIA_TYPE,
            "a request body is JSON: send it as Content-Type: application/json (or undeclared)",
        );
    }
    let response = next.run(req).await;
    // The change this request made may not have reached the disk: do not report success.
    stopped(&master).unwrap_or(response)
}

#[cfg(test)]
mod tests {
    use super::host_is_ours;

    const LOOPBACK: std::net::IpAddr = std::net::IpAddr::V4(std::net::Ipv4Addr::LOCALHOST);

    #[test]
    fn a_master_beyond_loopback_answers_to_ip_literals_but_never_to_names() {
        for listen in ["10.1.2.3", "0.0.0.0"] {
            let listen: std::net::IpAddr = listen.parse().expect("ip");
            assert!(host_is_ours("10.1.2.3:8080", 8080, listen));
            assert!(host_is_ours("[fd00::1]:8080", 8080, listen));
            assert!(host_is_ours("127.0.0.1:8080", 8080, listen));
            assert!(!host_is_ours("10.1.2.3:9090", 8080, listen));
            assert!(!host_is_ours("evil.example:8080", 8080, listen));
        }
        // A loopback master refuses other addresses.
        assert!(!host_is_ours("10.1.2.3:8080", 8080, LOOPBACK));
    }

    #[test]
    fn only_loopback_names_with_our_port_are_ours() {
        for ok in [
            "127.0.0.1:8080",
            "localhost:8080",
            "[::1]:8080",
            "[::1]",
            "127.0.0.1",
            "localhost",
        ] {
            assert!(host_is_ours(ok, 8080, LOOPBACK), "{ok}");
        }
        for bad in [
            "evil.example:8080",
            "127.0.0.1:9090",
            "",
            "127.0.0.1.evil.example:8080",
            "[::1",
        ] {
            assert!(!host_is_ours(bad, 8080, LOOPBACK), "{bad}");
        }
    }
}
