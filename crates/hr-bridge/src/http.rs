//! Plain HTTP GETs on loopback (readiness probes, `/health`, `/schema`) through reqwest, blocking
//! on a caller's single-threaded runtime. Proxies are never used: the services are local.

use std::{sync::Arc, time::Duration};

use tokio::runtime::Runtime;

/// `GET url`: the status and the body, or why nothing was answered.
pub(crate) fn get(
    runtime: &Runtime,
    url: &str,
    timeout: Duration,
) -> Result<(u16, Vec<u8>), String> {
    runtime.block_on(async {
        let client = reqwest::Client::builder()
            .no_proxy()
            .timeout(timeout)
            .build()
            .map_err(|e| format!("HTTP client: {e}"))?;
        let response = client
            .get(url)
            .send()
            .await
            .map_err(|e| format!("GET {url}: {e}"))?;
        let status = response.status().as_u16();
        let body = response
            .bytes()
            .await
            .map_err(|e| format!("GET {url}: reading the body: {e}"))?;
        Ok((status, body.to_vec()))
    })
}

/// `GET url` whose body must be JSON.
pub(crate) fn get_json(
    runtime: &Runtime,
    url: &str,
    timeout: Duration,
) -> Result<(u16, serde_json::Value), String> {
    let (status, body) = get(runtime, url, timeout)?;
    let json = serde_json::from_slice(&body).map_err(|e| {
        format!(
            "GET {url}: the body is not JSON ({e}): {}",
            String::from_utf8_lossy(&body)
        )
    })?;
    Ok((status, json))
}

/// A single-threaded runtime for a blocking client of `service`.
pub(crate) fn runtime(service: &str) -> Result<Arc<Runtime>, hr_env::EnvError> {
    tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()
        .map(Arc::new)
        .map_err(|source| hr_files::IoError::new("start runtime for", service, source).into())
}
