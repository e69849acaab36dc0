//! What every request passes before a handler sees it, and what every answer passes after:
//! the master fails closed once its state could not be persisted (every request, including the
//! one whose change was lost, gets 503), a `Host` other than this loopback master is refused (a
//! DNS-rebinding page cannot reach it), a body declared as anything but JSON is refused (a
//! browser's form or `text/plain` post cannot create an experiment; `det` itself sends its JSON
//! bodies undeclared), a body is read only for a signed-in caller (or a login), whole within
//! [`BODY_READ_TIMEOUT`] and up to its route's size, so a trickled or unauthenticated huge
//! body holds neither a connection nor memory. Every refusal is Determined's error envelope.

use std::{sync::Arc, time::Duration};

use axum::{
    extract::{Request, State},
    http::{StatusCode, header},
    middleware::Next,
    response::{IntoResponse, Response},
};
use serde_json::json;

use crate::error::{ApiError, ApiResult};
use crate::master::Master;

/// How long a request's whole body may take to arrive once its head has.
pub(crate) const BODY_READ_TIMEOUT: Duration = Duration::from_secs(60);

/// The largest body of a route other than experiment creation (axum's default limit).
const DEFAULT_BODY_BYTES: usize = 2 << 20;

/// A refusal with `status` in Determined's envelope, its gRPC code chosen as grpc-gateway maps
/// `status` back.
pub(crate) fn refuse(status: StatusCode, message: &str) -> Response {
    let (code, reason) = match status {
        StatusCode::UNAUTHORIZED => (16, "Unauthenticated"),
        StatusCode::FORBIDDEN => (7, "PermissionDenied"),
        StatusCode::NOT_FOUND => (5, "NotFound"),
        StatusCode::METHOD_NOT_ALLOWED => (12, "Unimplemented"),
        StatusCode::REQUEST_TIMEOUT => (4, "DeadlineExceeded"),
        StatusCode::PAYLOAD_TOO_LARGE => (8, "ResourceExhausted"),
        StatusCode::SERVICE_UNAVAILABLE => (14, "Unavailable"),
        s if s.is_server_error() => (13, "Internal"),
        _ => (3, "InvalidArgument"),
    };
    (
        status,
        axum::Json(json!({"error": {"code": code, "reason": reason, "error": message}})),
    )
        .into_response()
}

/// The body length a request declares (`Content-Length`).
fn declared_length(req: &Request) -> Option<u64> {
    req.headers()
        .get(header::CONTENT_LENGTH)
        .and_then(|v| v.to_str().ok())
        .and_then(|v| v.trim().parse().ok())
}

/// Whether a request declares a body (a non-zero length, or a chunked one).
fn declares_body(req: &Request) -> bool {
    declared_length(req).is_some_and(|n| n > 0)
        || req.headers().contains_key(header::TRANSFER_ENCODING)
}

/// The largest body `req`'s route takes: a model definition rides in experiment creation.
fn body_limit(req: &Request) -> usize {
    if req.method() == axum::http::Method::POST && req.uri().path() == "/api/v1/experiments" {
        crate::context::MAX_REQUEST_BYTES
    } else {
        DEFAULT_BODY_BYTES
    }
}

/// The token of a request, from `Authorization: Bearer <token>` (or `x-user-token`).
pub(crate) fn token(headers: &axum::http::HeaderMap) -> ApiResult<&str> {
    headers
        .get(header::AUTHORIZATION)
        .and_then(|v| v.to_str().ok())
        .and_then(|v| v.strip_prefix("Bearer "))
        .or_else(|| headers.get("x-user-token").and_then(|v| v.to_str().ok()))
        .ok_or_else(|| ApiError::Unauthenticated("missing authorization token".into()))
}

/// Whether `req` carries the token of a live session (the handler still checks what it may do).
fn signed_in(master: &Master, req: &Request) -> bool {
    token(req.headers()).is_ok_and(|t| master.state().session(t).is_some())
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
    let req = if declares_body(&req) {
        // Only a login is read from a caller without a session.
        if req.uri().path() != "/api/v1/auth/login" && !signed_in(&master, &req) {
            return refuse(
                StatusCode::UNAUTHORIZED,
                "invalid or expired credentials (a body is read only from a signed-in caller)",
            );
        }
        let limit = body_limit(&req);
        if declared_length(&req).is_some_and(|n| n > limit as u64) {
            return refuse(
                StatusCode::PAYLOAD_TOO_LARGE,
                &format!("the request body is larger than {limit} bytes"),
            );
        }
        let (parts, body) = req.into_parts();
        match tokio::time::timeout(BODY_READ_TIMEOUT, axum::body::to_bytes(body, limit)).await {
            Err(_) => {
                return refuse(
                    StatusCode::REQUEST_TIMEOUT,
                    &format!(
                        "the request body did not arrive within {} s",
                        BODY_READ_TIMEOUT.as_secs()
                    ),
                );
            }
            Ok(Err(_)) => {
                return refuse(
                    StatusCode::PAYLOAD_TOO_LARGE,
                    &format!("the request body is larger than {limit} bytes, or was cut off"),
                );
            }
            Ok(Ok(bytes)) => Request::from_parts(parts, axum::body::Body::from(bytes)),
        }
    } else {
        req
    };
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
