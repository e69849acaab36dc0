//! Rebuilds an HF `tokenizer.json` (byte-level BPE) from GGUF's `tokenizer.ggml.*` metadata.

use serde_json::{Map, Value as Json, json};

use crate::{Gguf, GgufError, Value};

/// llama.cpp's token type for control tokens (`<|im_start|>` and friends).
const CONTROL: u64 = 3;
/// llama.cpp's token type for user-defined tokens, also matched whole in text.
const USER_DEFINED: u64 = 4;

fn strings(gguf: &Gguf, key: &str) -> Result<Vec<String>, GgufError> {
    match gguf.meta(key)? {
        Value::Array(items) => items
            .iter()
            .map(|v| v.as_str().map(str::to_owned))
            .collect::<Option<Vec<_>>>()
            .ok_or_else(|| GgufError::Metadata {
                key: key.to_owned(),
                message: "must be an array of strings".to_owned(),
            }),
        _ => Err(GgufError::Metadata {
            key: key.to_owned(),
            message: "must be an array".to_owned(),
        }),
    }
}

/// The `tokenizer_config.json` of a GGUF that carries a chat template
/// (`tokenizer.chat_template`): the template and its BOS and EOS tokens, as `transformers` writes
/// them; `None` without a template.
pub(crate) fn tokenizer_config_json(gguf: &Gguf) -> Result<Option<Json>, GgufError> {
    let Some(template) = gguf
        .metadata
        .get("tokenizer.chat_template")
        .and_then(Value::as_str)
    else {
        return Ok(None);
    };
    let tokens = strings(gguf, "tokenizer.ggml.tokens")?;
    let token = |key: &str| {
        gguf.metadata
            .get(key)
            .and_then(Value::as_u64)
            .and_then(|id| tokens.get(usize::try_from(id).ok()?))
            .cloned()
    };
    Ok(Some(json!({
        "chat_template": template,
        "bos_token": token("tokenizer.ggml.bos_token_id"),
        "eos_token": token("tokenizer.ggml.eos_token_id"),
    })))
}

/// The `tokenizer.json` for a GGUF with `tokenizer.ggml.model = gpt2`.
pub(crate) fn tokenizer_json(gguf: &Gguf) -> Result<Json, GgufError> {
    let model = gguf.meta_str("tokenizer.ggml.model")?;
    if model != "gpt2" {
        return Err(GgufError::Metadata {
            key: "tokenizer.ggml.model".to_owned(),
            message: format!(
                "`{model}` is not supported; only byte-level BPE (`gpt2`) tokenizers convert"
            ),
        });
    }
    let tokens = strings(gguf, "tokenizer.ggml.tokens")?;
    let merges = strings(gguf, "tokenizer.ggml.merges")?;
    let types: Vec<u64> = match gguf.metadata.get("tokenizer.ggml.token_type") {
        Some(Value::Array(items)) => items.iter().map(|v| v.as_u64().unwrap_or(1)).collect(),
        _ => vec![1; tokens.len()],
    };
    let mut vocab = Map::new();
    let mut added = Vec::new();
    for (id, token) in tokens.iter().enumerate() {
        vocab.insert(token.clone(), json!(id));
        let kind = types.get(id).copied().unwrap_or(1);
        if kind == CONTROL || kind == USER_DEFINED {
            added.push(json!({
                "id": id, "content": token, "single_word": false, "lstrip": false, "rstrip": false,
                "normalized": false, "special": kind == CONTROL,
            }));
        }
    }
    let byte_level = json!({"type": "ByteLevel", "add_prefix_space": false, "trim_offsets": true, "use_regex": true});
    // SmolLM's tokenizer splits digits one by one before the byte-level split.
    let pre_tokenizer = match gguf
        .metadata
        .get("tokenizer.ggml.pre")
        .and_then(Value::as_str)
    {
        Some("smollm") => json!({"type": "Sequence", "pretokenizers": [
            {"type": "Digits", "individual_digits": true}, byte_level,
        ]}),
        _ => byte_level,
    };
    Ok(json!({
        "version": "1.0",
        "truncation": null,
        "padding": null,
        "added_tokens": added,
        "normalizer": null,
        "pre_tokenizer": pre_tokenizer,
        "post_processor": null,
        "decoder": {"type": "ByteLevel", "add_prefix_space": true, "trim_offsets": true, "use_regex": true},
        "model": {
            "type": "BPE", "dropout": null, "unk_token": null, "continuing_subword_prefix": null,
            "end_of_word_suffix": null, "fuse_unk": false, "byte_fallback": false, "ignore_merges": false,
            "vocab": vocab, "merges": merges,
        },
    }))
}
