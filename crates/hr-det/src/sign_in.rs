//! Where a client's master and credentials come from, as the `det` CLI finds them: the master URL
//! canonicalised as `det` does (`host:port` means `http://host:port`; a scheme without a port
//! gets its default), and the token cache `det user login` writes (`auth.json` under
//! `$DET_DEBUG_CONFIG_PATH`, `$XDG_CONFIG_HOME/determined` or `~/.config/determined`), keyed by
//! that canonical URL.

use std::path::{Path, PathBuf};

use serde::Deserialize;
use std::collections::BTreeMap;

use crate::DetError;

/// `url` in `det`'s canonical form (`canonicalize_master_url`): an explicit scheme (`http` when
/// none is given) and port (8080 without a scheme, else 80 or 443), no trailing slash; a URL
/// with credentials, a query or a fragment, or without a host, is refused.
pub fn canonical_master_url(url: &str) -> Result<String, DetError> {
    let (url, default_port) = if url.starts_with("https://") {
        (url.to_owned(), 443)
    } else if url.starts_with("http://") {
        (url.to_owned(), 80)
    } else {
        (format!("http://{url}"), 8080)
    };
    let parsed = reqwest::Url::parse(&url)
        .map_err(|e| DetError::Config(format!("master URL {url:?}: {e}")))?;
    let host = parsed
        .host_str()
        .filter(|h| !h.is_empty())
        .ok_or_else(|| DetError::Config(format!("master URL {url:?} names no host")))?;
    if !parsed.username().is_empty() || parsed.password().is_some() {
        return Err(DetError::Config(
            "the master URL carries credentials (user:password@): remove them and sign in with \
             DET_USER and DET_PASS, or DET_USER_TOKEN"
                .to_owned(),
        ));
    }
    if parsed.query().is_some() || parsed.fragment().is_some() {
        return Err(DetError::Config(format!(
            "master URL {url:?} must not carry a query or a fragment"
        )));
    }
    let port = parsed.port().unwrap_or(default_port);
    let path = parsed.path().trim_end_matches('/');
    Ok(format!("{}://{host}:{port}{path}", parsed.scheme()))
}

/// The folder the `det` CLI keeps its configuration in, from this environment.
pub(crate) fn det_config_dir(var: impl Fn(&str) -> Option<String>) -> Option<PathBuf> {
    if let Some(p) = var("DET_DEBUG_CONFIG_PATH") {
        return Some(PathBuf::from(p));
    }
    let base = match var("XDG_CONFIG_HOME") {
        Some(x) => PathBuf::from(x),
        None => PathBuf::from(var("HOME")?).join(".config"),
    };
    Some(base.join("determined"))
}

#[derive(Deserialize)]
struct Store {
    #[serde(default)]
    masters: BTreeMap<String, Master>,
}

#[derive(Deserialize)]
struct Master {
    active_user: Option<String>,
    #[serde(default)]
    tokens: BTreeMap<String, String>,
}

/// A token `det user login` cached for `master` (canonical) in `cache` (an `auth.json`): `user`'s
/// when one is named, else the active user's. `None` when there is none; a cache that does not
/// parse is `None` too (the CLI deletes such a file; it is not ours to touch).
pub(crate) fn cached_token(
    cache: &Path,
    master: &str,
    user: Option<&str>,
) -> Option<(String, String)> {
    let text = std::fs::read_to_string(cache).ok()?;
    let store: Store = serde_json::from_str(&text).ok()?;
    let entry = store.masters.get(master)?;
    let user = user
        .map(str::to_owned)
        .or_else(|| entry.active_user.clone())?;
    let token = entry.tokens.get(&user)?.clone();
    Some((user, token))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn urls_are_canonical_as_det_makes_them() {
        for (given, canonical) in [
            ("localhost:8080", "http://localhost:8080"),
            ("localhost", "http://localhost:8080"),
            ("http://localhost", "http://localhost:80"),
            ("https://master.example", "https://master.example:443"),
            (
                "https://master.example:8443/",
                "https://master.example:8443",
            ),
            (
                "http://10.0.0.1:8080/prefix/",
                "http://10.0.0.1:8080/prefix",
            ),
        ] {
            assert_eq!(
                canonical_master_url(given).as_deref().ok(),
                Some(canonical),
                "{given}"
            );
        }
        for refused in [
            "http://u:p@host:8080",
            "http://host:8080/?q=1",
            "http://host:8080/#f",
            "http://",
        ] {
            assert!(canonical_master_url(refused).is_err(), "{refused}");
        }
    }

    #[test]
    fn the_cache_det_writes_gives_the_named_or_active_users_token() {
        let dir = tempfile::tempdir().expect("tmp");
        let cache = dir.path().join("auth.json");
        // As `det user login` writes it (TokenStore v2).
        std::fs::write(
            &cache,
            r#"{"masters": {"http://localhost:8080": {"active_user": "alice",
                "tokens": {"alice": "t-alice", "bob": "t-bob"}}}, "version": 2}"#,
        )
        .expect("write");
        let get = |master: &str, user: Option<&str>| cached_token(&cache, master, user);
        assert_eq!(
            get("http://localhost:8080", None),
            Some(("alice".into(), "t-alice".into()))
        );
        assert_eq!(
            get("http://localhost:8080", Some("bob")),
            Some(("bob".into(), "t-bob".into()))
        );
        assert_eq!(get("http://localhost:8080", Some("carol")), None);
        assert_eq!(get("http://other:8080", None), None);
        std::fs::write(&cache, "not json").expect("write");
        assert_eq!(get("http://localhost:8080", None), None);
    }

    /// A master whose `/api/v1/me` accepts only `good` and whose login hands out `fresh`,
    /// counting logins; its canonical URL.
    async fn master(logins: std::sync::Arc<std::sync::atomic::AtomicUsize>) -> String {
        use axum::http::{HeaderMap, StatusCode};
        use axum::routing::{get, post};
        let router = axum::Router::new()
            .route(
                "/api/v1/me",
                get(|headers: HeaderMap| async move {
                    match headers.get("authorization").and_then(|v| v.to_str().ok()) {
                        Some("Bearer good") => (StatusCode::OK, r#"{"user":{"id":1,"username":"alice","admin":true,"active":true}}"#),
                        _ => (StatusCode::UNAUTHORIZED, r#"{"error":{"code":16,"reason":"Unauthenticated","error":"invalid credentials"}}"#),
                    }
                }),
            )
            .route(
                "/api/v1/auth/login",
                post(move || async move {
                    logins.fetch_add(1, std::sync::atomic::Ordering::SeqCst);
                    r#"{"token":"fresh","user":{"id":1,"username":"alice","admin":true,"active":true}}"#
                }),
            );
        let listener = tokio::net::TcpListener::bind("127.0.0.1:0")
            .await
            .expect("bind");
        let addr = listener.local_addr().expect("addr");
        tokio::spawn(async move { axum::serve(listener, router).await.expect("serve") });
        // Scheme-less, as DET_MASTER may say it.
        addr.to_string()
    }

    #[tokio::test]
    async fn sign_in_takes_the_env_token_then_a_live_cached_one_then_the_password() {
        use std::sync::atomic::{AtomicUsize, Ordering};
        let logins = std::sync::Arc::new(AtomicUsize::new(0));
        let given = master(logins.clone()).await;
        let canonical = canonical_master_url(&given).expect("url");
        assert!(canonical.starts_with("http://127.0.0.1:"), "{canonical}");
        let dir = tempfile::tempdir().expect("tmp");
        let cache = dir.path().join("auth.json");
        let write = |token: &str| {
            let store = serde_json::json!({"version": 2, "masters": {&canonical:
                {"active_user": "alice", "tokens": {"alice": token}}}});
            std::fs::write(&cache, store.to_string()).expect("write");
        };
        let sign_in = |env: &'static [(&'static str, &'static str)]| {
            let (given, cache) = (given.clone(), cache.clone());
            async move {
                let mut client = crate::Client::new(&given).expect("client");
                let var = |k: &str| {
                    env.iter()
                        .find(|(n, _)| *n == k)
                        .map(|(_, v)| (*v).to_owned())
                };
                client
                    .sign_in_with(var, Some(&cache))
                    .await
                    .expect("signed in");
                client
            }
        };
        // DET_USER_TOKEN first: nothing asked of the master.
        write("good");
        let c = sign_in(&[("DET_USER_TOKEN", "from-env")]).await;
        assert_eq!(c.master(), canonical);
        assert_eq!(logins.load(Ordering::SeqCst), 0);
        // The cached token, checked live: no login.
        sign_in(&[])
            .await
            .me()
            .await
            .expect("the cached token works");
        assert_eq!(logins.load(Ordering::SeqCst), 0);
        // A revoked cached token: the password login, as det falls back.
        write("revoked");
        let c = sign_in(&[("DET_USER", "alice")]).await;
        assert_eq!(logins.load(Ordering::SeqCst), 1);
        assert!(c.has_token());
    }

    #[test]
    fn the_config_folder_is_found_where_det_looks() {
        let env = |pairs: &'static [(&'static str, &'static str)]| {
            move |k: &str| {
                pairs
                    .iter()
                    .find(|(n, _)| *n == k)
                    .map(|(_, v)| (*v).to_owned())
            }
        };
        assert_eq!(
            det_config_dir(env(&[("HOME", "/h")])),
            Some(PathBuf::from("/h/.config/determined"))
        );
        assert_eq!(
            det_config_dir(env(&[("HOME", "/h"), ("XDG_CONFIG_HOME", "/x")])),
            Some(PathBuf::from("/x/determined"))
        );
        assert_eq!(
            det_config_dir(env(&[("DET_DEBUG_CONFIG_PATH", "/d"), ("HOME", "/h")])),
            Some(PathBuf::from("/d"))
        );
    }
}
