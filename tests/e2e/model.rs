//! `model fetch` against a Hub on loopback: a server the test runs that answers the Hub's file
//! API (`/api/models/ID/revision/REV`, `/ID/resolve/REV/FILE` with byte ranges, the
//! `X-Repo-Commit` and `X-Linked-Etag` headers) for a tiny model the test writes.

use std::collections::BTreeMap;
use std::io::{BufRead, BufReader, Write};
use std::net::{TcpListener, TcpStream};
use std::path::{Path, PathBuf};
use std::process::{Command, Output};
use std::sync::{Arc, Mutex};

use hr_tests::tiny_model::{TinySpec, write_tiny_model};
use hr_tests::{Scratch, binary, listing, text};
use serde_json::json;

const ID: &str = "tiny-org/tiny-llama";
const COMMIT: &str = "0123456789abcdef0123456789abcdef01234567";
const TOKEN: &str = "hf_test_token_not_a_secret";

/// One request the Hub saw: its path and whether it carried the token.
#[derive(Debug, Clone)]
struct Seen {
    path: String,
    authorised: bool,
}

/// A Hub on loopback serving `files` of [`ID`] at [`COMMIT`]; `corrupt` names a file served
/// with one byte changed (under the digest of the true bytes).
struct Hub {
    endpoint: String,
    seen: Arc<Mutex<Vec<Seen>>>,
}

impl Hub {
    fn start(files: BTreeMap<String, Vec<u8>>, corrupt: Option<&str>) -> Self {
        let listener = TcpListener::bind("127.0.0.1:0").expect("bind loopback");
        let endpoint = format!("http://{}", listener.local_addr().expect("address"));
        let seen = Arc::new(Mutex::new(Vec::new()));
        let log = seen.clone();
        let corrupt = corrupt.map(str::to_owned);
        std::thread::spawn(move || {
            for stream in listener.incoming().flatten() {
                answer(stream, &files, corrupt.as_deref(), &log);
            }
        });
        Self { endpoint, seen }
    }

    fn seen(&self) -> Vec<Seen> {
        self.seen.lock().expect("log").clone()
    }
}

fn answer(
    stream: TcpStream,
    files: &BTreeMap<String, Vec<u8>>,
    corrupt: Option<&str>,
    seen: &Mutex<Vec<Seen>>,
) {
    let mut reader = BufReader::new(stream.try_clone().expect("clone"));
    let mut head = String::new();
    let mut headers = BTreeMap::new();
    if reader.read_line(&mut head).is_err() {
        return;
    }
    loop {
        let mut line = String::new();
        if reader.read_line(&mut line).unwrap_or(0) == 0 || line.trim().is_empty() {
            break;
        }
        if let Some((k, v)) = line.split_once(':') {
            headers.insert(k.trim().to_ascii_lowercase(), v.trim().to_owned());
        }
    }
    let path = head.split_whitespace().nth(1).unwrap_or("").to_owned();
    seen.lock().expect("log").push(Seen {
        path: path.clone(),
        authorised: headers.get("authorization") == Some(&format!("Bearer {TOKEN}")),
    });
    let info = format!("/api/models/{ID}/revision/main");
    // Files are fetched at the commit the revision names.
    let resolve = format!("/{ID}/resolve/{COMMIT}/");
    let (status, extra, body): (&str, Vec<String>, Vec<u8>) = if path == info {
        let siblings: Vec<_> = files.keys().map(|f| json!({"rfilename": f})).collect();
        (
            "200 OK",
            vec!["Content-Type: application/json".to_owned()],
            json!({"sha": COMMIT, "siblings": siblings})
                .to_string()
                .into_bytes(),
        )
    } else if let Some(bytes) = path.strip_prefix(&resolve).and_then(|f| files.get(f)) {
        let file = &path[resolve.len()..];
        let digest = hr_seal::sha256_hex(bytes);
        // LFS files are named by their sha256 (`X-Linked-Etag`); others by a git blob id.
        let etag = if file.ends_with(".safetensors") {
            format!("X-Linked-Etag: \"{digest}\"")
        } else {
            format!("ETag: \"{}\"", &digest[..40])
        };
        let mut served = bytes.clone();
        if corrupt == Some(file) {
            served[bytes.len() / 2] ^= 1;
        }
        let (start, end) = headers
            .get("range")
            .and_then(|r| r.strip_prefix("bytes="))
            .and_then(|r| r.split_once('-'))
            .and_then(|(a, b)| Some((a.parse::<usize>().ok()?, b.parse::<usize>().ok()?)))
            .unwrap_or((0, served.len() - 1));
        let end = end.min(served.len() - 1);
        (
            "206 Partial Content",
            vec![
                format!("X-Repo-Commit: {COMMIT}"),
                etag,
                format!("Content-Range: bytes {start}-{end}/{}", served.len()),
            ],
            served[start..=end].to_vec(),
        )
    } else {
        (
            "404 Not Found",
            Vec::new(),
            b"Repository not found".to_vec(),
        )
    };
    let mut out = stream;
    let mut response = format!(
        "HTTP/1.1 {status}\r\nContent-Length: {}\r\nConnection: close\r\n",
        body.len()
    );
    for h in extra {
        response.push_str(&h);
        response.push_str("\r\n");
    }
    response.push_str("\r\n");
    let _ = out.write_all(response.as_bytes());
    let _ = out.write_all(&body);
}

/// The tiny model's files, with two a model folder does not need.
fn model_files(s: &Scratch) -> BTreeMap<String, Vec<u8>> {
    let dir = s.path().join("source");
    write_tiny_model(&dir, &TinySpec::default());
    let mut files: BTreeMap<String, Vec<u8>> = std::fs::read_dir(&dir)
        .expect("model folder")
        .flatten()
        .map(|e| {
            let name = e.file_name().to_string_lossy().into_owned();
            (name, std::fs::read(e.path()).expect("file"))
        })
        .collect();
    files.insert("README.md".to_owned(), b"# tiny".to_vec());
    files.insert("pytorch_model.bin".to_owned(), vec![0; 64]);
    files
}

/// The binary with the Hub at `endpoint` and the cache `cache`, no proxy, online.
fn run(s: &Scratch, endpoint: &str, cache: &Path, args: &[&str]) -> Output {
    Command::new(binary())
        .args(args)
        .env("HF_ENDPOINT", endpoint)
        .env("HF_HUB_CACHE", cache)
        .env("HF_TOKEN", TOKEN)
        .env("NO_PROXY", "127.0.0.1,localhost")
        .env_remove("HF_HUB_OFFLINE")
        .env_remove("HTTP_PROXY")
        .env_remove("HTTPS_PROXY")
        .env_remove("ALL_PROXY")
        .env_remove("http_proxy")
        .env_remove("https_proxy")
        .current_dir(s.path())
        .output()
        .expect("run hessian-recipes")
}

#[test]
fn model_fetch_downloads_into_the_cache_that_generate_reads_by_hub_id() {
    let s = Scratch::new();
    let hub = Hub::start(model_files(&s), None);
    let cache = s.path().join("cache");
    let out = run(&s, &hub.endpoint, &cache, &["model", "fetch", ID]);
    let (stdout, stderr) = text(&out);
    assert!(out.status.success(), "{stderr}");
    let snapshot = PathBuf::from(stdout.trim());
    assert_eq!(
        snapshot,
        cache.join(format!("models--tiny-org--tiny-llama/snapshots/{COMMIT}"))
    );
    // Only what a model folder needs, with the bytes the Hub holds; the token went with each
    // request and never to the output.
    assert_eq!(
        listing(&snapshot),
        ["config.json", "model.safetensors", "tokenizer.json"]
    );
    let source = s.path().join("source");
    for file in listing(&snapshot) {
        assert_eq!(
            std::fs::read(snapshot.join(&file)).expect("fetched"),
            std::fs::read(source.join(&file)).expect("source"),
            "{file}"
        );
    }
    let seen = hub.seen();
    assert!(seen.iter().all(|r| r.authorised), "{seen:?}");
    assert!(!stdout.contains(TOKEN) && !stderr.contains(TOKEN));
    // `generate` reads it by its Hub id, as it reads the model folder itself.
    let generate = |model: &str| {
        let args = [
            "generate", "--raw", "--json", "--prompt", "the", "--model", model,
        ];
        run(&s, &hub.endpoint, &cache, &args)
    };
    let by_id = generate(ID);
    assert!(by_id.status.success(), "{}", text(&by_id).1);
    assert_eq!(by_id.stdout, generate("source").stdout);
    // A second fetch finds every file in the cache and downloads none.
    let before = hub.seen().len();
    let again = run(&s, &hub.endpoint, &cache, &["model", "fetch", ID]);
    assert!(again.status.success(), "{}", text(&again).1);
    let resolved = hub.seen()[before..]
        .iter()
        .filter(|r| r.path.contains("/resolve/"))
        .count();
    assert_eq!(resolved, 0);
}

#[test]
fn model_fetch_refuses_offline_unknown_models_and_corrupt_downloads() {
    let s = Scratch::new();
    let hub = Hub::start(model_files(&s), Some("model.safetensors"));
    let cache = s.path().join("cache");
    // HF_HUB_OFFLINE=1, the cluster's default: refused naming it, nothing asked of the Hub.
    let out = Command::new(binary())
        .args(["model", "fetch", ID])
        .env("HF_ENDPOINT", &hub.endpoint)
        .env("HF_HUB_CACHE", &cache)
        .env("HF_HUB_OFFLINE", "1")
        .current_dir(s.path())
        .output()
        .expect("run");
    let (_, stderr) = text(&out);
    assert_eq!(out.status.code(), Some(2), "{stderr}");
    assert!(stderr.contains("HF_HUB_OFFLINE=0"), "{stderr}");
    assert!(hub.seen().is_empty());
    assert!(!cache.exists());
    // A model the Hub does not have: bad input.
    let out = run(
        &s,
        &hub.endpoint,
        &cache,
        &["model", "fetch", "tiny-org/absent"],
    );
    let (_, stderr) = text(&out);
    assert_eq!(out.status.code(), Some(2), "{stderr}");
    assert!(stderr.contains("not found (HTTP 404)"), "{stderr}");
    // Weights whose bytes are not the ones their sha256 names: refused and removed.
    let out = run(&s, &hub.endpoint, &cache, &["model", "fetch", ID]);
    let (_, stderr) = text(&out);
    assert!(!out.status.success(), "{stderr}");
    assert!(stderr.contains("sha256"), "{stderr}");
    let repo = cache.join("models--tiny-org--tiny-llama");
    assert!(
        !repo
            .join(format!("snapshots/{COMMIT}/model.safetensors"))
            .exists()
    );
    assert!(
        listing(&repo.join("blobs"))
            .iter()
            .all(|b| b.len() != 64 || b.ends_with(".lock")),
        "{:?}",
        listing(&repo.join("blobs"))
    );
}
