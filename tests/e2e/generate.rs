//! `hessian-recipes generate` on a tiny random model: the same seed in two processes gives the
//! same tokens and log-probs bit for bit; bad input is refused with the reason.

use anyhow::Result;
use hr_tests::tiny_model::{TinySpec, write_tiny_model};
use hr_tests::{Scratch, text};

fn generate(s: &Scratch, seed: &str) -> Result<Vec<serde_json::Value>> {
    let out = s.run(&[
        "generate",
        "--model",
        "model",
        "--prompt",
        "the answer is",
        "--prompt",
        "hi",
        "--temperature",
        "1.0",
        "--top-p",
        "0.95",
        "--max-new-tokens",
        "16",
        "--seed",
        seed,
        "--json",
    ]);
    let (stdout, stderr) = text(&out);
    assert!(out.status.success(), "{stdout}\n{stderr}");
    assert!(stderr.contains("tokens/s"), "progress line: {stderr}");
    Ok(stdout
        .lines()
        .map(serde_json::from_str)
        .collect::<Result<_, _>>()?)
}

#[test]
fn the_same_seed_in_two_processes_gives_identical_tokens_and_logprobs() -> Result<()> {
    let s = Scratch::new();
    write_tiny_model(
        &s.path().join("model"),
        &TinySpec {
            model_type: "qwen2",
            ..TinySpec::default()
        },
    );
    let first = generate(&s, "7")?;
    let second = generate(&s, "7")?;
    assert_eq!(first.len(), 2);
    // serde_json keeps the shortest round-trip form of every f64: equal text = equal bits.
    assert_eq!(
        serde_json::to_string(&first)?,
        serde_json::to_string(&second)?
    );
    assert!(
        first
            .iter()
            .all(|row| !row["tokens"].as_array().is_none_or(Vec::is_empty))
    );
    assert_ne!(
        first,
        generate(&s, "8")?,
        "another seed samples other tokens"
    );
    Ok(())
}

#[test]
fn generate_refuses_a_missing_or_unsupported_model_or_an_unavailable_device() {
    let s = Scratch::new();
    let out = s.run(&["generate", "--model", "./nowhere", "--prompt", "x"]);
    let (_, stderr) = text(&out);
    assert_eq!(out.status.code(), Some(2), "{stderr}");
    assert!(
        stderr.contains("--model: no model folder at ./nowhere: give a Hugging Face model folder"),
        "{stderr}"
    );
    // A name spelled as a Hub id is looked up in the Hugging Face cache (here, an empty one).
    let out = std::process::Command::new(hr_tests::binary())
        .args(["generate", "--model", "nowhere", "--prompt", "x"])
        .env("HF_HUB_CACHE", s.path().join("empty-cache"))
        .current_dir(s.path())
        .output()
        .expect("run hessian-recipes");
    let (_, stderr) = text(&out);
    assert_eq!(out.status.code(), Some(2), "{stderr}");
    assert!(
        stderr.contains("`nowhere` is not in the Hugging Face cache"),
        "{stderr}"
    );

    write_tiny_model(&s.path().join("model"), &TinySpec::default());
    // An unsupported family or RoPE type names the field and what is supported.
    let config_path = s.path().join("model/config.json");
    let config = std::fs::read_to_string(&config_path).expect("config");
    for (from, to, expected) in [
        (
            "\"llama\"",
            "\"gpt2\"",
            "`model_type`: `gpt2` is not supported; use a `llama`, `mistral`, `qwen2`, `qwen3`, `gemma2`, `gemma3_text` or `phi3`",
        ),
        (
            "\"rope_scaling\": null",
            "\"rope_scaling\": {\"rope_type\": \"yarn\", \"factor\": 4.0}",
            "`rope_scaling.rope_type`: `yarn` is not supported; use `default`, `linear` or `llama3`",
        ),
    ] {
        assert!(config.contains(from), "{config}");
        std::fs::write(&config_path, config.replace(from, to)).expect("write config");
        let out = s.run(&["generate", "--model", "model", "--prompt", "x"]);
        let (_, stderr) = text(&out);
        assert_eq!(out.status.code(), Some(2), "{stderr}");
        assert!(stderr.contains(expected), "{stderr}");
    }
    std::fs::write(&config_path, config).expect("restore config");
    let out = s.run(&[
        "generate", "--model", "model", "--prompt", "x", "--device", "cuda",
    ]);
    let (_, stderr) = text(&out);
    // Without a GPU this is refused before any device exists, whatever the build.
    assert_eq!(out.status.code(), Some(2), "{stderr}");
    assert!(stderr.contains("--device cpu"), "{stderr}");

    let out = s.run(&[
        "generate", "--model", "model", "--prompt", "x", "--top-p", "0",
    ]);
    let (_, stderr) = text(&out);
    assert_eq!(out.status.code(), Some(2), "{stderr}");
    assert!(stderr.contains("top_p must be in (0, 1]"), "{stderr}");
}
