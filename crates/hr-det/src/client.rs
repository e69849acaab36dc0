//! The HTTP core: base URL, bearer token (redacted from `Debug`), bounded timeouts, and retries
//! with jittered exponential backoff on 502/503/504 and connection errors.

use std::time::Duration;

use reqwest::{Method, StatusCode};
use serde::{Serialize, de::DeserializeOwned};

use crate::{DetError, MasterTrust};

/// When and how often to retry.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct RetryPolicy {
    /// Attempts in total (1 = no retry).
    pub attempts: u32,
    /// First backoff; doubles per attempt, with up to 50% jitter added.
    pub base_delay: Duration,
    /// Largest backoff.
    pub max_delay: Duration,
}

impl Default for RetryPolicy {
    fn default() -> Self {
        Self {
            attempts: 6,
            base_delay: Duration::from_millis(200),
            max_delay: Duration::from_secs(10),
        }
    }
}

impl RetryPolicy {
    fn delay(&self, attempt: u32) -> Duration {
        let exp = self
            .base_delay
            .saturating_mul(1 << attempt.min(16))
            .min(self.max_delay);
        // Jitter from the clock's sub-second noise: spreads retries of many clients; it does not
        // touch any training randomness.
        let nanos = std::time::SystemTime::now()
            .duration_since(std::time::UNIX_EPOCH)
            .map_or(0, |d| d.subsec_nanos());
        exp + exp.mul_f64(f64::from(nanos % 1000) / 2000.0)
    }
}

/// A client of one master.
#[derive(Clone)]
pub struct Client {
    master: String,
    /// Where requests go: `master`, or the same with the certificate name as host.
    endpoint: String,
    trust: MasterTrust,
    http: reqwest::Client,
    token: Option<String>,
    retry: RetryPolicy,
    timeout: Duration,
}

impl std::fmt::Debug for Client {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Client")
            .field("master", &self.master)
            .field("trust", &self.trust)
            .field("token", &self.token.as_ref().map(|_| "<redacted>"))
            .field("retry", &self.retry)
            .finish()
    }
}

/// A request body: JSON, a bare value, or nothing at all.
pub(crate) enum Body<'a, T: Serialize + ?Sized> {
    None,
    Json(&'a T),
}

impl Client {
    /// A client of the master at `master` (e.g. `http://127.0.0.1:8080`), without a token,
    /// trusting its certificate as `det` would from this environment ([`MasterTrust::from_env`]).
    pub fn new(master: &str) -> Result<Self, DetError> {
        let canonical = crate::canonical_master_url(master)?;
        Self::with_trust(&canonical, MasterTrust::from_env(&canonical)?)
    }

    /// A client of the master at `master`, trusting its certificate as `trust` says.
    pub fn with_trust(master: &str, trust: MasterTrust) -> Result<Self, DetError> {
        // As `det` reads DET_MASTER (`host:port` is http); credentials in the URL would travel
        // into every error message and log line, so they are refused.
        let master = crate::canonical_master_url(master)?;
        let builder = reqwest::Client::builder()
            .connect_timeout(Duration::from_secs(10))
            // Drop an idle pooled connection before a master closes it (the devmaster closes one
            // idle for 10 s), so a request never races the server's close.
            .pool_idle_timeout(Duration::from_secs(5));
        let (builder, endpoint) = trust.apply(builder, &master)?;
        let http = builder
            .build()
            .map_err(|e| DetError::Config(e.to_string()))?;
        Ok(Self {
            master,
            endpoint,
            trust,
            http,
            token: None,
            retry: RetryPolicy::default(),
            timeout: Duration::from_secs(60),
        })
    }

    /// `DET_MASTER` and `DET_USER_TOKEN` from the environment.
    pub fn from_env() -> Result<Self, DetError> {
        let master = std::env::var(crate::task_info::env::MASTER)
            .map_err(|_| DetError::Config("DET_MASTER is not set".into()))?;
        let mut client = Self::new(&master)?;
        client.token = std::env::var(crate::task_info::env::USER_TOKEN)
            .ok()
            .filter(|t| !t.is_empty());
        Ok(client)
    }

    /// Uses `token` as the bearer token.
    pub fn with_token(mut self, token: String) -> Self {
        self.token = Some(token);
        self
    }

    /// Replaces the retry policy.
    pub fn with_retry(mut self, retry: RetryPolicy) -> Self {
        self.retry = retry;
        self
    }

    /// Replaces the per-request timeout (default 60 s).
    pub fn with_timeout(mut self, timeout: Duration) -> Self {
        self.timeout = timeout;
        self
    }

    /// The master URL.
    pub fn master(&self) -> &str {
        &self.master
    }

    /// Whether a token is set.
    pub fn has_token(&self) -> bool {
        self.token.is_some()
    }

    pub(crate) fn set_token(&mut self, token: String) {
        self.token = Some(token);
    }

    pub(crate) fn clear_token(&mut self) {
        self.token = None;
    }

    /// Sends one request with retries and decodes the JSON response.
    pub(crate) async fn call<B: Serialize + ?Sized, T: DeserializeOwned>(
        &self,
        method: Method,
        path: &str,
        body: Body<'_, B>,
        auth: bool,
        timeout: Option<Duration>,
    ) -> Result<T, DetError> {
        let bytes = self.send(method, path, body, auth, timeout).await?;
        let bytes = if bytes.is_empty() {
            b"{}".to_vec()
        } else {
            bytes
        };
        serde_json::from_slice(&bytes).map_err(|e| DetError::Decode {
            path: path.to_owned(),
            message: e.to_string(),
        })
    }

    /// Sends one request with retries; returns the body of a 2xx response.
    pub(crate) async fn send<B: Serialize + ?Sized>(
        &self,
        method: Method,
        path: &str,
        body: Body<'_, B>,
        auth: bool,
        timeout: Option<Duration>,
    ) -> Result<Vec<u8>, DetError> {
        let url = format!("{}/{}", self.endpoint, path.trim_start_matches('/'));
        let payload = match body {
            Body::None => None,
            Body::Json(v) => {
                Some(serde_json::to_vec(v).map_err(|e| DetError::Config(e.to_string()))?)
            }
        };
        let replay_safe = replay_safe(&method, path);
        let mut attempt = 0;
        loop {
            let mut req = self
                .http
                .request(method.clone(), &url)
                .timeout(timeout.unwrap_or(self.timeout));
            if auth {
                let token = self.token.as_ref().ok_or(DetError::NoToken)?;
                req = req.bearer_auth(token);
            }
            if let Some(p) = &payload {
                req = req
                    .header(reqwest::header::CONTENT_TYPE, "application/json")
                    .body(p.clone());
            }
            let retryable = match req.send().await {
                Ok(resp) => {
                    let status = resp.status();
                    let bytes = resp.bytes().await.map(|b| b.to_vec()).unwrap_or_default();
                    tracing::debug!(%method, path, status = status.as_u16(), attempt, "master answered");
                    if status.is_success() {
                        return Ok(bytes);
                    }
                    // 503 is the master refusing before doing anything; a gateway's 502/504
                    // may come after the master applied the request.
                    let unconfirmed = matches!(
                        status,
                        StatusCode::BAD_GATEWAY | StatusCode::GATEWAY_TIMEOUT
                    );
                    if unconfirmed && !replay_safe {
                        return Err(DetError::Unconfirmed {
                            path: path.to_owned(),
                            message: format!("HTTP {}", status.as_u16()),
                        });
                    }
                    if !unconfirmed && status != StatusCode::SERVICE_UNAVAILABLE {
                        return Err(DetError::from_status(status.as_u16(), &bytes));
                    }
                    DetError::from_status(status.as_u16(), &bytes)
                }
                // A refused certificate is refused again: say why, at once.
                Err(ref e) if let Some(problem) = crate::tls::certificate_problem(e) => {
                    return Err(DetError::Tls {
                        master: self.master.clone(),
                        message: self.trust.advice(problem),
                    });
                }
                // Never connected: nothing was sent, so it is always safe to try again.
                Err(e) if e.is_connect() => DetError::Transport {
                    master: self.master.clone(),
                    message: without_url(&e),
                },
                Err(e) if !replay_safe && (e.is_timeout() || e.is_request()) => {
                    return Err(DetError::Unconfirmed {
                        path: path.to_owned(),
                        message: without_url(&e),
                    });
                }
                Err(e) if e.is_timeout() || e.is_request() => DetError::Transport {
                    master: self.master.clone(),
                    message: without_url(&e),
                },
                Err(e) => {
                    return Err(DetError::Transport {
                        master: self.master.clone(),
                        message: without_url(&e),
                    });
                }
            };
            attempt += 1;
            if attempt >= self.retry.attempts {
                return Err(retryable);
            }
            tokio::time::sleep(self.retry.delay(attempt - 1)).await;
        }
    }
}

/// Whether a request may be sent again after its answer was lost. POSTs that create a record
/// (metrics, checkpoint reports, experiments, commands) may not: the master may have applied
/// them already.
fn replay_safe(method: &Method, path: &str) -> bool {
    let path = path.trim_start_matches('/');
    *method != Method::POST
        || !(matches!(
            path,
            "api/v1/checkpoints" | "api/v1/experiments" | "api/v1/commands"
        ) || (path.starts_with("api/v1/trials/") && path.ends_with("/metrics")))
}

/// A reqwest error's text without the URL (query strings could carry secrets).
fn without_url(e: &reqwest::Error) -> String {
    let kind = if e.is_timeout() {
        "timed out"
    } else if e.is_connect() {
        "connection failed"
    } else {
        "request failed"
    };
    let mut source = std::error::Error::source(e);
    let mut detail = String::new();
    while let Some(s) = source {
        detail = s.to_string();
        source = s.source();
    }
    if detail.is_empty() {
        kind.to_owned()
    } else {
        format!("{kind}: {detail}")
    }
}
