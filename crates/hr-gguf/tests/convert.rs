//! GGUF files written by the tests (`hr_tests::gguf`): parsing, dequantization and conversion
//! to HF.

use half::f16;
use hr_gguf::{GgmlType, Gguf, GgufError, convert_to_hf, dequantize};
use hr_tests::gguf::{Writer, f32_bytes, permute_rows};
use safetensors::SafeTensors;

#[test]
fn quantized_blocks_dequantize_as_ggml_defines_them() {
    // Q8_0: d = 0.5, q = -16..16.
    let mut q8 = f16::from_f32(0.5).to_le_bytes().to_vec();
    q8.extend((-16i8..16).map(|q| q as u8));
    let expected: Vec<f32> = (-16..16).map(|q| q as f32 * 0.5).collect();
    assert_eq!(dequantize(GgmlType::Q8_0, &q8), expected);

    // Q4_1: d = 0.25, m = -1; byte j holds value j (low nibble) and value j+16 (high nibble).
    let mut q41 = f16::from_f32(0.25).to_le_bytes().to_vec();
    q41.extend(f16::from_f32(-1.0).to_le_bytes());
    q41.extend((0u8..16).map(|j| j | ((15 - j) << 4)));
    let mut expected: Vec<f32> = (0..16).map(|j| j as f32 * 0.25 - 1.0).collect();
    expected.extend((0..16).map(|j| (15 - j) as f32 * 0.25 - 1.0));
    assert_eq!(dequantize(GgmlType::Q4_1, &q41), expected);

    // Q4_0: d = 2, x = (q − 8)·d.
    let mut q40 = f16::from_f32(2.0).to_le_bytes().to_vec();
    q40.extend([0x80u8; 16]);
    let mut expected = vec![-16.0f32; 16];
    expected.extend(vec![0.0f32; 16]);
    assert_eq!(dequantize(GgmlType::Q4_0, &q40), expected);
}

#[test]
fn a_llama_gguf_converts_to_hf_names_shapes_and_unpermuted_q_k() -> anyhow::Result<()> {
    let (hidden, heads, kv_heads, ffn) = (8usize, 2usize, 1usize, 32usize);
    let hd = hidden / heads;
    let q_hf: Vec<f32> = (0..hidden * hidden).map(|i| i as f32).collect();
    // llama.cpp permutes Q rows per head: GGUF row h·d + 2i + j holds HF row h·d + j·d/2 + i.
    let q_gguf = permute_rows(&q_hf, heads, hidden);
    let tokens = [
        "<|endoftext|>",
        "<|im_start|>",
        "<|im_end|>",
        "a",
        "b",
        "ab",
    ];
    let mut w = Writer::default();
    w.str("general.architecture", "llama");
    w.u32("llama.block_count", 1);
    w.u32("llama.embedding_length", hidden as u32);
    w.u32("llama.feed_forward_length", ffn as u32);
    w.u32("llama.attention.head_count", heads as u32);
    w.u32("llama.attention.head_count_kv", kv_heads as u32);
    w.f32("llama.rope.freq_base", 100_000.0);
    w.f32("llama.attention.layer_norm_rms_epsilon", 1e-5);
    w.u32("llama.context_length", 2048);
    w.str("tokenizer.ggml.model", "gpt2");
    w.str("tokenizer.ggml.pre", "smollm");
    w.strs("tokenizer.ggml.tokens", &tokens);
    w.strs("tokenizer.ggml.merges", &["a b"]);
    w.i32s("tokenizer.ggml.token_type", &[3, 3, 3, 1, 1, 1]);
    w.u32("tokenizer.ggml.bos_token_id", 1);
    w.u32("tokenizer.ggml.eos_token_id", 2);
    let ones = vec![1.0f32; hidden];
    // Q8_0 embedding: 6 rows × 32 values, d = 1, q = row index.
    let mut embd = Vec::new();
    for row in 0..tokens.len() {
        embd.extend(f16::from_f32(1.0).to_le_bytes());
        embd.extend(std::iter::repeat_n(row as u8, 32));
    }
    w.tensor("token_embd.weight", &[32, tokens.len() as u64], 8, &embd);
    w.tensor(
        "blk.0.attn_norm.weight",
        &[hidden as u64],
        0,
        &f32_bytes(&ones),
    );
    w.tensor(
        "blk.0.attn_q.weight",
        &[hidden as u64, hidden as u64],
        0,
        &f32_bytes(&q_gguf),
    );
    w.tensor(
        "blk.0.attn_k.weight",
        &[hidden as u64, (kv_heads * hd) as u64],
        0,
        &f32_bytes(&vec![0.5; hidden * kv_heads * hd]),
    );
    w.tensor("output_norm.weight", &[hidden as u64], 0, &f32_bytes(&ones));
    let dir = tempfile::tempdir()?;
    let gguf_path = dir.path().join("m.gguf");
    std::fs::write(&gguf_path, w.finish())?;

    let gguf = Gguf::parse(std::fs::read(&gguf_path)?)?;
    let out = dir.path().join("hf");
    let converted = convert_to_hf(&gguf, &out)?;
    assert_eq!(
        (converted.architecture.as_str(), converted.tensors),
        ("llama", 5)
    );
    let bytes = std::fs::read(out.join("model.safetensors"))?;
    let st = SafeTensors::deserialize(&bytes)?;
    let q = st.tensor("model.layers.0.self_attn.q_proj.weight")?;
    assert_eq!(q.shape(), [hidden, hidden]);
    let q_values: Vec<f32> = q
        .data()
        .chunks_exact(4)
        .map(|c| f32::from_le_bytes([c[0], c[1], c[2], c[3]]))
        .collect();
    assert_eq!(q_values, q_hf, "Q rows are back in HF's rotate-half order");
    let embed = st.tensor("model.embed_tokens.weight")?;
    assert_eq!(embed.shape(), [tokens.len(), 32]);
    assert_eq!(
        f32::from_le_bytes(embed.data()[32 * 4 * 5..32 * 4 * 5 + 4].try_into()?),
        5.0
    );

    let config: serde_json::Value =
        serde_json::from_slice(&std::fs::read(out.join("config.json"))?)?;
    assert_eq!(config["num_key_value_heads"], 1);
    assert_eq!(config["tie_word_embeddings"], true);
    assert_eq!(config["eos_token_id"], 2);
    assert_eq!(config["rope_theta"], 100_000.0);
    let tok: serde_json::Value =
        serde_json::from_slice(&std::fs::read(out.join("tokenizer.json"))?)?;
    assert_eq!(tok["added_tokens"].as_array().map(Vec::len), Some(3));
    assert_eq!(tok["model"]["vocab"]["ab"], 5);
    assert_eq!(tok["pre_tokenizer"]["pretokenizers"][0]["type"], "Digits");
    Ok(())
}

#[test]
fn malformed_files_give_typed_errors() {
    assert!(matches!(
        Gguf::parse(b"GGML....".to_vec()),
        Err(GgufError::Malformed { offset: 0, .. })
    ));
    let mut w = Writer::default();
    w.tensor("token_embd.weight", &[32, 4], 8, &[0u8; 10]);
    let err = Gguf::parse(w.finish()).expect_err("truncated data");
    assert!(err.to_string().contains("token_embd.weight"), "{err}");
    let mut w = Writer::default();
    w.tensor("x", &[4], 12, &[0u8; 16]);
    let err = Gguf::parse(w.finish()).expect_err("unsupported type");
    assert!(err.to_string().contains("ggml type 12"), "{err}");
    let mut bytes = b"GGUF".to_vec();
    bytes.extend(3u32.to_le_bytes());
    bytes.extend(u64::MAX.to_le_bytes());
    assert!(matches!(
        Gguf::parse(bytes),
        Err(GgufError::Malformed { .. })
    ));
}

/// A small valid file: metadata of several kinds and two tensors.
fn sample() -> Vec<u8> {
    let mut w = Writer::default();
    w.u32("llama.block_count", 1);
    w.f32("llama.rope.freq_base", 10000.0);
    w.str("general.architecture", "llama");
    w.strs("tokenizer.ggml.tokens", &["a", "b"]);
    w.i32s("tokenizer.ggml.token_type", &[1, 1]);
    w.tensor("a.weight", &[2, 2], 0, &f32_bytes(&[1.0, 2.0, 3.0, 4.0]));
    w.tensor("b.weight", &[32], 8, &[0u8; 34]);
    w.finish()
}

#[test]
fn sizes_and_offsets_that_overflow_are_typed_errors() {
    for (dims, offset) in [(vec![1u64 << 40, 1 << 40], 0u64), (vec![4], u64::MAX - 8)] {
        let mut w = Writer::default();
        w.tensor("t", &dims, 0, &[0u8; 16]);
        let mut bytes = w.finish();
        // Patch the tensor's offset (the last 8 bytes of its info, just before the padding).
        if offset != 0 {
            let info_end = 4 + 4 + 8 + 8 + (8 + 1) + 4 + 8 * dims.len() + 4 + 8;
            bytes[info_end - 8..info_end].copy_from_slice(&offset.to_le_bytes());
        }
        match Gguf::parse(bytes) {
            Err(GgufError::Tensor { .. }) => {}
            other => panic!("dims {dims:?} offset {offset}: {other:?}"),
        }
    }
}

proptest::proptest! {
    #![proptest_config(proptest::prelude::ProptestConfig::with_cases(2000))]
    /// Mutated files (bytes flipped, inserted, removed, or the file cut short) never panic the
    /// parser: they parse or fail with a typed error.
    #[test]
    fn any_mutation_of_a_file_parses_or_fails_cleanly(
        edits in proptest::collection::vec(proptest::prelude::any::<(u8, usize, u8)>(), 1..6)
    ) {
        let mut bytes = sample();
        proptest::prop_assert!(Gguf::parse(bytes.clone()).is_ok(), "the sample itself parses");
        hr_tests::mutate::mutate(&mut bytes, &edits);
        if let Ok(gguf) = Gguf::parse(bytes) {
            for (name, info) in &gguf.tensors {
                let stored = gguf.tensor_bytes(name, info).expect("checked at parse");
                dequantize(info.ggml_type, stored);
            }
        }
    }
}
