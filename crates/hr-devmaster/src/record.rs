//! `--record-requests`: every request the guard let through, one JSON line each, with no
//! credential in it. A JSON body keeps its shape with every credential-named field (at any
//! depth) replaced by `"<redacted>"`; a body that is not a JSON object or array (a form, a bare
//! string, malformed JSON) is not written at all, only its length; the query string's
//! credential-named parameters are redacted the same way. The file is created 0600 and never
//! opened through a symbolic link.

use std::io::Write;
use std::os::unix::fs::{OpenOptionsExt, PermissionsExt};
use std::path::Path;

use serde_json::{Value, json};

/// What stands where a credential was.
const REDACTED: &str = "<redacted>";

/// Whether a field or parameter named `name` holds a credential: it ends in `password`,
/// `passwd`, `token`, `secret`, `apikey`, `authorization`, `cookie` or `credential(s)`, whatever
/// its case, separators or percent-escapes (`user_token`, `API-Key`, `pass%77ord`), so
/// `max_tokens` or `tokenizer` are kept.
fn is_credential(name: &str) -> bool {
    let name: String = percent_decoded(name)
        .chars()
        .filter(char::is_ascii_alphanumeric)
        .collect::<String>()
        .to_ascii_lowercase();
    [
        "password",
        "passwd",
        "token",
        "secret",
        "apikey",
        "authorization",
        "cookie",
        "credential",
        "credentials",
    ]
    .iter()
    .any(|word| name.ends_with(word))
}

/// `text` with each `%XX` escape decoded (an escape that is not one stays as written).
fn percent_decoded(text: &str) -> String {
    let bytes = text.as_bytes();
    let mut out = Vec::with_capacity(bytes.len());
    let mut i = 0;
    while i < bytes.len() {
        let escaped = (bytes[i] == b'%')
            .then(|| bytes.get(i + 1..i + 3))
            .flatten()
            .and_then(|hex| std::str::from_utf8(hex).ok())
            .and_then(|hex| u8::from_str_radix(hex, 16).ok());
        match escaped {
            Some(b) => {
                out.push(b);
                i += 3;
            }
            None => {
                out.push(bytes[i]);
                i += 1;
            }
        }
    }
    String::from_utf8_lossy(&out).into_owned()
}

fn redact(value: &mut Value) {
    match value {
        Value::Object(map) => {
            for (key, field) in map.iter_mut() {
                if is_credential(key) {
                    *field = json!(REDACTED);
                } else {
                    redact(field);
                }
            }
        }
        Value::Array(items) => items.iter_mut().for_each(redact),
        _ => {}
    }
}

/// The path and query of `uri`, each credential-named query parameter's value redacted.
fn redacted_target(uri: &axum::http::Uri) -> String {
    let Some(query) = uri.query() else {
        return uri.path().to_owned();
    };
    let pairs: Vec<String> = query
        .split('&')
        .map(|pair| match pair.split_once('=') {
            Some((key, _)) if is_credential(key) => format!("{key}={REDACTED}"),
            None if is_credential(pair) => REDACTED.to_owned(),
            _ => pair.to_owned(),
        })
        .collect();
    format!("{}?{}", uri.path(), pairs.join("&"))
}

/// The line recorded for a request (with its newline).
pub(crate) fn redacted_line(method: &str, uri: &axum::http::Uri, body: &[u8]) -> String {
    let body = if body.is_empty() {
        Value::Null
    } else {
        match serde_json::from_slice::<Value>(body) {
            Ok(mut v @ (Value::Object(_) | Value::Array(_))) => {
                redact(&mut v);
                v
            }
            _ => json!(format!(
                "<{} bytes not recorded: not a JSON object or array>",
                body.len()
            )),
        }
    };
    let mut line =
        json!({"method": method, "path": redacted_target(uri), "body": body}).to_string();
    line.push('\n');
    line
}

/// Appends `line` to the recording at `path` (created 0600; a symbolic link is refused).
pub(crate) fn append(path: &Path, line: &str) {
    let opened = std::fs::OpenOptions::new()
        .create(true)
        .append(true)
        .mode(0o600)
        .custom_flags(rustix::fs::OFlags::NOFOLLOW.bits().cast_signed())
        .open(path);
    match opened {
        // One write per line: an O_APPEND write is not interleaved with another request's.
        Ok(mut f) => {
            let _ = f.write_all(line.as_bytes());
        }
        Err(e) => tracing::warn!(
            "devmaster: cannot record the request to {}: {e}",
            path.display()
        ),
    }
}

/// Refuses a recording file that exists as a symbolic link or that others may read or write: a
/// new file is created 0600, an existing one is appended to only when it is already private.
pub(crate) fn check_recording(path: &Path) -> std::io::Result<()> {
    let refused = |why: String| {
        std::io::Error::new(
            std::io::ErrorKind::InvalidInput,
            format!("--record-requests {}: {why}", path.display()),
        )
    };
    match std::fs::symlink_metadata(path) {
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => Ok(()),
        Err(e) => Err(e),
        Ok(meta) if meta.file_type().is_symlink() => Err(refused(
            "is a symbolic link; name the file itself".to_owned(),
        )),
        Ok(meta) if !meta.is_file() => Err(refused("is not a regular file".to_owned())),
        Ok(meta) if meta.permissions().mode() & 0o077 != 0 => Err(refused(format!(
            "others may read it (mode {:o}); `chmod 600` it or name a new file",
            meta.permissions().mode() & 0o777
        ))),
        Ok(_) => Ok(()),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn line(uri: &str, body: &str) -> String {
        redacted_line("POST", &uri.parse().expect("uri"), body.as_bytes())
    }

    #[test]
    fn no_credential_is_written_in_any_body_format_or_the_query() {
        let secret = "hunter2-s3cret";
        for (uri, body) in [
            (
                "/api/v1/auth/login",
                r#"{"username": "a", "password": "hunter2-s3cret"}"#,
            ),
            (
                "/x",
                r#"{"nested": [{"API_KEY": "hunter2-s3cret", "user_token": "hunter2-s3cret"}]}"#,
            ),
            ("/api/v1/auth/login", "username=a&password=hunter2-s3cret"),
            ("/api/v1/auth/login", r#""hunter2-s3cret""#),
            ("/api/v1/auth/login", r#"{"password": "hunter2-s3cret""#),
            ("/api/v1/auth/login?password=hunter2-s3cret&x=1", ""),
            ("/api/v1/auth/login?token", ""),
            ("/api/v1/auth/login?pass%77ord=hunter2-s3cret", ""),
        ] {
            let recorded = line(uri, body);
            assert!(!recorded.contains(secret), "{uri} {body}: {recorded}");
            let _: Value = serde_json::from_str(&recorded).expect("one JSON line");
        }
        let kept = line(
            "/api/v1/trials/1/metrics?x=1",
            r#"{"metrics": {"loss": 0.5}, "max_tokens": 8, "tokenizer": "t"}"#,
        );
        assert!(
            kept.contains(r#""loss":0.5"#)
                && kept.contains(r#""max_tokens":8"#)
                && kept.contains(r#""tokenizer":"t""#)
                && kept.contains("?x=1"),
            "{kept}"
        );
        assert!(line("/api/v1/auth/login", r#"{"password": "p"}"#).contains(REDACTED));
    }

    #[test]
    fn a_recording_that_others_may_read_or_a_link_is_refused() {
        let dir = tempfile::tempdir().expect("tmp");
        let file = dir.path().join("requests.jsonl");
        assert!(check_recording(&file).is_ok(), "a new file");
        std::fs::write(&file, "").expect("write");
        std::fs::set_permissions(&file, std::fs::Permissions::from_mode(0o644)).expect("chmod");
        let err = check_recording(&file).expect_err("0644");
        assert!(err.to_string().contains("chmod 600"), "{err}");
        std::fs::set_permissions(&file, std::fs::Permissions::from_mode(0o600)).expect("chmod");
        assert!(check_recording(&file).is_ok());
        let link = dir.path().join("link.jsonl");
        std::os::unix::fs::symlink(&file, &link).expect("link");
        let err = check_recording(&link).expect_err("a link");
        assert!(err.to_string().contains("symbolic link"), "{err}");
        // And a request is never appended through one.
        append(&link, "x\n");
        assert_eq!(std::fs::read_to_string(&file).expect("read"), "");
    }
}
