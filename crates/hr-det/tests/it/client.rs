//! The client against fake masters on loopback.

use std::{
    sync::{
        Arc,
        atomic::{AtomicUsize, Ordering},
    },
    time::Duration,
};

use axum::{
    Router,
    body::Bytes,
    extract::State,
    http::{HeaderMap, StatusCode},
    routing::{get, post},
};
use hr_det::{Client, DetError, RetryPolicy};
use serde_json::json;

async fn serve(router: Router) -> String {
    let listener = tokio::net::TcpListener::bind("127.0.0.1:0")
        .await
        .expect("bind");
    let addr = listener.local_addr().expect("addr");
    tokio::spawn(async move { axum::serve(listener, router).await.expect("serve") });
    format!("http://{addr}")
}

fn fast_retry() -> RetryPolicy {
    RetryPolicy {
        attempts: 6,
        base_delay: Duration::from_millis(5),
        max_delay: Duration::from_millis(20),
    }
}

#[derive(Default)]
struct Counters {
    calls: AtomicUsize,
    accepted: AtomicUsize,
}

#[tokio::test]
async fn a_report_after_three_503s_arrives_exactly_once() {
    let counters = Arc::new(Counters::default());
    let router = Router::new()
        .route(
            "/api/v1/trials/{t}/metrics",
            post(
                |State(c): State<Arc<Counters>>, headers: HeaderMap, body: Bytes| async move {
                    let n = c.calls.fetch_add(1, Ordering::SeqCst);
                    if n < 3 {
                        return (StatusCode::SERVICE_UNAVAILABLE, "{}".to_owned());
                    }
                    assert_eq!(headers["authorization"], "Bearer tok");
                    let v: serde_json::Value = serde_json::from_slice(&body).expect("json body");
                    assert_eq!(v["metrics"]["trialRunId"], 2);
                    c.accepted.fetch_add(1, Ordering::SeqCst);
                    (StatusCode::OK, "{}".to_owned())
                },
            ),
        )
        .with_state(counters.clone());
    let client = Client::new(&serve(router).await)
        .expect("client")
        .with_token("tok".into())
        .with_retry(fast_retry());
    client
        .report_metrics(1, 2, "training", 3, json!({"loss": 1.0}), None)
        .await
        .expect("report");
    assert_eq!(counters.calls.load(Ordering::SeqCst), 4);
    assert_eq!(counters.accepted.load(Ordering::SeqCst), 1, "exactly once");
}

#[tokio::test]
async fn retries_stop_after_the_policy_and_other_errors_are_not_retried() {
    let counters = Arc::new(Counters::default());
    let router = Router::new()
        .route(
            "/api/v1/trials/{t}/progress",
            post(|State(c): State<Arc<Counters>>| async move {
                c.calls.fetch_add(1, Ordering::SeqCst);
                (StatusCode::BAD_GATEWAY, "bad gateway")
            }),
        )
        .route(
            "/api/v1/experiments/{id}",
            get(|State(c): State<Arc<Counters>>| async move {
                c.accepted.fetch_add(1, Ordering::SeqCst);
                (
                    StatusCode::NOT_FOUND,
                    r#"{"error":{"code":5,"reason":"NotFound","error":"experiment 9 not found"}}"#,
                )
            }),
        )
        .with_state(counters.clone());
    let client = Client::new(&serve(router).await)
        .expect("client")
        .with_token("t".into())
        .with_retry(fast_retry());
    let err = client.report_progress(1, 0.5).await.expect_err("gives up");
    assert!(matches!(err, DetError::Api { status: 502, .. }), "{err}");
    assert_eq!(counters.calls.load(Ordering::SeqCst), 6);
    let err = client.get_experiment(9).await.expect_err("404");
    assert!(
        matches!(err, DetError::NotFound(ref m) if m == "experiment 9 not found"),
        "{err}"
    );
    assert_eq!(
        counters.accepted.load(Ordering::SeqCst),
        1,
        "a 404 is not retried"
    );
}

#[tokio::test]
async fn envelopes_map_to_typed_errors_and_tokens_stay_out_of_them() {
    let router = Router::new()
        .route("/api/v1/me", get(|| async { (StatusCode::UNAUTHORIZED, r#"{"error":{"code":16,"reason":"Unauthenticated","error":"invalid credentials"}}"#) }))
        .route("/api/v1/experiments/{id}/pause", post(|| async { (StatusCode::FORBIDDEN, r#"{"message":"not yours"}"#) }))
        .route("/api/v1/experiments/{id}/activate", post(|| async { (StatusCode::BAD_REQUEST, r#"{"error":{"code":9,"reason":"FailedPrecondition","error":"experiment in incompatible state"}}"#) }))
        .route("/api/v1/experiments/{id}/kill", post(|| async { (StatusCode::INTERNAL_SERVER_ERROR, "boom") }));
    let client = Client::new(&serve(router).await)
        .expect("client")
        .with_token("top-secret".into())
        .with_retry(fast_retry());
    let e = client.me().await.expect_err("401");
    assert!(
        matches!(e, DetError::Unauthenticated(ref m) if m == "invalid credentials"),
        "{e}"
    );
    let e = client
        .experiment_action(1, hr_det::ExperimentAction::Pause)
        .await
        .expect_err("403");
    assert!(
        matches!(e, DetError::Forbidden(ref m) if m == "not yours"),
        "{e}"
    );
    let e = client
        .experiment_action(1, hr_det::ExperimentAction::Activate)
        .await
        .expect_err("400");
    assert!(
        matches!(e, DetError::InvalidRequest(ref m) if m.contains("incompatible")),
        "{e}"
    );
    let e = client
        .experiment_action(1, hr_det::ExperimentAction::Kill)
        .await
        .expect_err("500");
    assert!(
        matches!(e, DetError::Api { status: 500, ref message } if message == "boom"),
        "{e}"
    );
    assert!(!format!("{e} {e:?}").contains("top-secret"));
}

#[tokio::test]
async fn connection_errors_are_retried_then_reported_without_the_token() {
    // A port nothing listens on.
    let listener = std::net::TcpListener::bind("127.0.0.1:0").expect("bind");
    let addr = listener.local_addr().expect("addr");
    drop(listener);
    let client = Client::new(&format!("http://{addr}"))
        .expect("client")
        .with_token("top-secret".into())
        .with_retry(fast_retry());
    let e = client.me().await.expect_err("refused");
    assert!(matches!(e, DetError::Transport { .. }), "{e}");
    assert!(!format!("{e:?}").contains("top-secret"));
    let no_token = Client::new(&format!("http://{addr}")).expect("client");
    assert!(matches!(no_token.me().await, Err(DetError::NoToken)));
}

#[tokio::test]
async fn the_ack_and_empty_bodies_need_no_content_type_and_preemption_long_polls() {
    let router = Router::new()
        .route(
            "/api/v1/allocations/{a}/signals/ack_preemption",
            post(|body: Bytes| async move {
                assert!(body.is_empty(), "ack has an empty body");
                "{}"
            }),
        )
        .route(
            "/api/v1/allocations/{a}/signals/preemption",
            get(|| async {
                tokio::time::sleep(Duration::from_millis(50)).await;
                r#"{"preempt":true}"#
            }),
        );
    let client = Client::new(&serve(router).await)
        .expect("client")
        .with_token("t".into());
    client.ack_preemption("1.a.1").await.expect("ack");
    assert!(client.preemption("1.a.1", 1).await.expect("poll"));
}

#[tokio::test]
async fn a_record_creating_post_whose_answer_is_lost_is_not_sent_again() {
    let counters = Arc::new(Counters::default());
    let router = Router::new()
        .route(
            "/api/v1/trials/{t}/metrics",
            post(|State(c): State<Arc<Counters>>| async move {
                c.calls.fetch_add(1, Ordering::SeqCst);
                // Applied, but the answer comes too late for the client.
                tokio::time::sleep(Duration::from_millis(500)).await;
                (StatusCode::OK, "{}".to_owned())
            }),
        )
        .route(
            "/api/v1/trials/{t}/progress",
            post(|State(c): State<Arc<Counters>>| async move {
                let n = c.accepted.fetch_add(1, Ordering::SeqCst);
                if n == 0 {
                    tokio::time::sleep(Duration::from_millis(500)).await;
                }
                (StatusCode::OK, "{}".to_owned())
            }),
        )
        .with_state(counters.clone());
    let client = Client::new(&serve(router).await)
        .expect("client")
        .with_token("tok".into())
        .with_retry(fast_retry())
        .with_timeout(Duration::from_millis(100));
    let err = client
        .report_metrics(1, 1, "training", 1, json!({"loss": 1.0}), None)
        .await
        .expect_err("no answer");
    assert!(matches!(err, DetError::Unconfirmed { .. }), "{err}");
    // Once the server has the one request, a replay would follow within the retry delays.
    while counters.calls.load(Ordering::SeqCst) == 0 {
        tokio::time::sleep(Duration::from_millis(10)).await;
    }
    tokio::time::sleep(Duration::from_millis(200)).await;
    assert_eq!(
        counters.calls.load(Ordering::SeqCst),
        1,
        "sent once, never replayed"
    );
    // Progress is a value, not a record: it is simply sent again.
    client.report_progress(1, 0.5).await.expect("retried");
    assert_eq!(counters.accepted.load(Ordering::SeqCst), 2);
}

#[test]
fn a_master_url_with_credentials_is_refused_without_echoing_them() {
    for url in [
        "https://alice:s3cret@master.example:8443",
        "http://alice@127.0.0.1:8080",
    ] {
        let err = Client::new(url).err().map(|e| e.to_string());
        let err = err.unwrap_or_else(|| panic!("{url} was accepted"));
        assert!(err.contains("DET_USER"), "{err}");
        assert!(!err.contains("s3cret") && !err.contains("alice"), "{err}");
    }
    assert!(Client::new("https://master.example:8443").is_ok());
}
