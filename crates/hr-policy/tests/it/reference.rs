//! A straightforward f64 reference of the Qwen2/Qwen3/Llama forward pass (no cache, no batching,
//! HF's formulas written out in loops) to check the Burn model against.

use std::collections::BTreeMap;

use serde_json::Value;

type Tensors = BTreeMap<String, (Vec<usize>, Vec<f32>)>;

struct Weights<'a>(&'a Tensors);

impl Weights<'_> {
    fn get(&self, name: &str) -> Vec<f64> {
        self.0[name].1.iter().map(|x| f64::from(*x)).collect()
    }

    fn has(&self, name: &str) -> bool {
        self.0.contains_key(name)
    }
}

/// `W x` for an HF weight `[out, in]`.
fn matvec(w: &[f64], x: &[f64], out: usize) -> Vec<f64> {
    let d_in = x.len();
    (0..out)
        .map(|o| (0..d_in).map(|i| w[o * d_in + i] * x[i]).sum())
        .collect()
}

fn rms_norm(x: &[f64], w: &[f64], eps: f64) -> Vec<f64> {
    let ms = x.iter().map(|v| v * v).sum::<f64>() / x.len() as f64;
    let inv = 1.0 / (ms + eps).sqrt();
    x.iter().zip(w).map(|(v, g)| v * inv * g).collect()
}

fn rope(x: &mut [f64], pos: usize, theta: f64) {
    let d = x.len();
    let half = d / 2;
    let orig = x.to_vec();
    for i in 0..d {
        let angle = pos as f64 * theta.powf(-((2 * (i % half)) as f64) / d as f64);
        let rotated = if i < half {
            -orig[i + half]
        } else {
            orig[i - half]
        };
        x[i] = orig[i] * angle.cos() + rotated * angle.sin();
    }
}

fn add(a: &mut [f64], b: &[f64]) {
    a.iter_mut().zip(b).for_each(|(x, y)| *x += y);
}

/// Logits `[len][vocab]` of one unpadded token sequence.
pub(crate) fn logits(config: &Value, tensors: &Tensors, tokens: &[u32]) -> Vec<Vec<f64>> {
    let w = Weights(tensors);
    let n = |k: &str| config[k].as_u64().expect(k) as usize;
    let (h, heads, kv_heads, layers, vocab) = (
        n("hidden_size"),
        n("num_attention_heads"),
        n("num_key_value_heads"),
        n("num_hidden_layers"),
        n("vocab_size"),
    );
    let hd = h / heads;
    let eps = config["rms_norm_eps"].as_f64().expect("eps");
    let theta = config["rope_theta"].as_f64().expect("theta");
    let inter = n("intermediate_size");
    let embed = w.get("model.embed_tokens.weight");
    let mut xs: Vec<Vec<f64>> = tokens
        .iter()
        .map(|&t| embed[t as usize * h..(t as usize + 1) * h].to_vec())
        .collect();
    for l in 0..layers {
        let p = format!("model.layers.{l}");
        let (wq, wk, wv, wo) = (
            w.get(&format!("{p}.self_attn.q_proj.weight")),
            w.get(&format!("{p}.self_attn.k_proj.weight")),
            w.get(&format!("{p}.self_attn.v_proj.weight")),
            w.get(&format!("{p}.self_attn.o_proj.weight")),
        );
        let bias = |name: &str| {
            w.has(&format!("{p}.self_attn.{name}.bias"))
                .then(|| w.get(&format!("{p}.self_attn.{name}.bias")))
        };
        let (bq, bk, bv) = (bias("q_proj"), bias("k_proj"), bias("v_proj"));
        // Qwen3: each query and key head is RMS-normalised before RoPE.
        let head_norm = |name: &str| {
            let key = format!("{p}.self_attn.{name}.weight");
            w.has(&key).then(|| w.get(&key))
        };
        let (q_norm, k_norm) = (head_norm("q_norm"), head_norm("k_norm"));
        let norm1 = w.get(&format!("{p}.input_layernorm.weight"));
        let mut qs = Vec::new();
        let mut ks = Vec::new();
        let mut vs = Vec::new();
        for (pos, x) in xs.iter().enumerate() {
            let hn = rms_norm(x, &norm1, eps);
            let mut q = matvec(&wq, &hn, heads * hd);
            let mut k = matvec(&wk, &hn, kv_heads * hd);
            let mut v = matvec(&wv, &hn, kv_heads * hd);
            if let (Some(bq), Some(bk), Some(bv)) = (&bq, &bk, &bv) {
                add(&mut q, bq);
                add(&mut k, bk);
                add(&mut v, bv);
            }
            for (heads, norm) in [(&mut q, &q_norm), (&mut k, &k_norm)] {
                for head in heads.chunks_mut(hd) {
                    if let Some(norm) = norm {
                        let normed = rms_norm(head, norm, eps);
                        head.copy_from_slice(&normed);
                    }
                    rope(head, pos, theta);
                }
            }
            qs.push(q);
            ks.push(k);
            vs.push(v);
        }
        let group = heads / kv_heads;
        for (t, x) in xs.iter_mut().enumerate() {
            let mut out = vec![0.0; heads * hd];
            for head in 0..heads {
                let kvh = head / group;
                let q = &qs[t][head * hd..(head + 1) * hd];
                let scores: Vec<f64> = (0..=t)
                    .map(|s| {
                        q.iter()
                            .zip(&ks[s][kvh * hd..(kvh + 1) * hd])
                            .map(|(a, b)| a * b)
                            .sum::<f64>()
                            / (hd as f64).sqrt()
                    })
                    .collect();
                let max = scores.iter().copied().fold(f64::NEG_INFINITY, f64::max);
                let exps: Vec<f64> = scores.iter().map(|s| (s - max).exp()).collect();
                let total: f64 = exps.iter().sum();
                for (s, e) in exps.iter().enumerate() {
                    for d in 0..hd {
                        out[head * hd + d] += e / total * vs[s][kvh * hd + d];
                    }
                }
            }
            add(x, &matvec(&wo, &out, h));
        }
        let norm2 = w.get(&format!("{p}.post_attention_layernorm.weight"));
        let (wg, wu, wd) = (
            w.get(&format!("{p}.mlp.gate_proj.weight")),
            w.get(&format!("{p}.mlp.up_proj.weight")),
            w.get(&format!("{p}.mlp.down_proj.weight")),
        );
        for x in &mut xs {
            let hn = rms_norm(x, &norm2, eps);
            let g = matvec(&wg, &hn, inter);
            let u = matvec(&wu, &hn, inter);
            let act: Vec<f64> = g
                .iter()
                .zip(&u)
                .map(|(g, u)| g / (1.0 + (-g).exp()) * u)
                .collect();
            add(x, &matvec(&wd, &act, h));
        }
    }
    let norm = w.get("model.norm.weight");
    let head = if w.has("lm_head.weight") {
        w.get("lm_head.weight")
    } else {
        embed
    };
    xs.iter()
        .map(|x| matvec(&head, &rms_norm(x, &norm, eps), vocab))
        .collect()
}
