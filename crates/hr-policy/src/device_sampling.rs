//! Choosing the next token on the device, so a decode step reads back two numbers per row (the
//! token and its log-probability) instead of a row of logits: for greedy decoding and for plain
//! temperature sampling, the GRPO default. Everything else (top-k, top-p, min-p, the repetition
//! penalty) stays on the host (`sampling.rs`).
//!
//! The draw is the host sampler's inverse CDF with the same uniform numbers from [`PolicyRng`]
//! (one per live row, in row order), computed in f32: `u · Σp` is located first among blocks of
//! the vocabulary (a cumulative sum over the block sums), then within the chosen block. Burn's
//! cumulative sum costs O(n²) per row on a GPU (every element adds its whole prefix), so two
//! levels of `√vocab` each keep it small: for SmolLM2's 49,152 tokens, 192 blocks of 256. A
//! token drawn here is the host sampler's token unless `u` falls within f32 rounding of a
//! boundary between two tokens.

use burn::tensor::backend::Backend;
use burn::tensor::{Int, Tensor, TensorData};

/// Which draw a step makes on the device.
pub(crate) enum DeviceDraw {
    /// The likeliest token (ties: as the backend's `argmax` breaks them, over the blocks and
    /// within the block).
    Greedy,
    /// Sampling at `temperature` with one uniform number in `[0, 1)` per row.
    Sample {
        temperature: f64,
        uniforms: Vec<f64>,
    },
}

/// The rows' next tokens and their log-probabilities under `softmax(logits / temperature)`
/// (`temperature` 1 when greedy), as `[rows, 2]` f32: token ids are exact in f32 below 2²⁴.
///
/// Every reduction over the vocabulary runs in two levels over `[rows, blocks, width]` (the
/// vocabulary padded with a value whose weight is 0): without autotune, cubecl reduces with one
/// thread per row, which for a few rows of 151,936 logits would leave the GPU nearly idle.
pub(crate) fn draw<B: Backend>(logits: Tensor<B, 2>, how: &DeviceDraw) -> Tensor<B, 2> {
    let [rows, vocab] = logits.dims();
    let device = logits.device();
    let scaled = match how {
        DeviceDraw::Sample { temperature, .. } if *temperature != 1.0 => {
            logits.div_scalar(*temperature)
        }
        _ => logits,
    };
    let width = block_width(vocab);
    let blocks = vocab.div_ceil(width);
    let blocked = if blocks * width > vocab {
        let pad = Tensor::full([rows, blocks * width - vocab], PAD_LOGIT, &device);
        Tensor::cat(vec![scaled, pad], 1)
    } else {
        scaled
    }
    .reshape([rows, blocks, width]);
    let block_max = blocked.clone().max_dim(2);
    let max = block_max.clone().max_dim(1);
    let weights = (blocked.clone() - max.clone()).exp();
    let sums = weights.clone().sum_dim(2).reshape([rows, blocks]);
    let total = sums.clone().sum_dim(1);
    let token = match how {
        DeviceDraw::Greedy => {
            // The block holding the maximum, then the maximum within it.
            let block = block_max.argmax(1);
            let offset = row_of_block(blocked.clone(), block.clone().reshape([rows, 1])).argmax(1);
            block.reshape([rows, 1]).mul_scalar(width as i64) + offset
        }
        DeviceDraw::Sample { uniforms, .. } => {
            let u = TensorData::new(uniforms.iter().map(|u| *u as f32).collect(), [rows, 1]);
            let target = Tensor::from_data(u, &device) * total.clone();
            inverse_cdf(weights, sums, target).clamp_max(vocab as i64 - 1)
        }
    };
    // log softmax at the token: x − max − ln Σ exp(x − max).
    let chosen = blocked
        .reshape([rows, blocks * width])
        .gather(1, token.clone())
        - max.reshape([rows, 1])
        - total.log();
    Tensor::cat(vec![token.float(), chosen], 1)
}

/// The logit the vocabulary is padded with to whole blocks: far below any real one, so its weight
/// `exp(pad − max)` is 0 and it is never the maximum, yet finite (no `−∞ − −∞`).
const PAD_LOGIT: f32 = -1e30;

/// Block width of the two-level search for a vocabulary of `vocab`: the power of two at or
/// above `√vocab`.
fn block_width(vocab: usize) -> usize {
    vocab.isqrt().max(1).next_power_of_two()
}

/// Row `block[r]` of each `values[r]` (`[rows, blocks, width]`), as `[rows, width]`.
fn row_of_block<B: Backend>(values: Tensor<B, 3>, block: Tensor<B, 2, Int>) -> Tensor<B, 2> {
    let [rows, _, width] = values.dims();
    values
        .gather(1, block.reshape([rows, 1, 1]).expand([rows, 1, width]))
        .reshape([rows, width])
}

/// For each row of `weights` `[rows, blocks, width]` (unnormalised probabilities; `sums` their
/// block sums `[rows, blocks]`), the first token whose cumulative weight exceeds `target`
/// `[rows, 1]` (past the last token when rounding leaves none), `[rows, 1]`.
fn inverse_cdf<B: Backend>(
    weights: Tensor<B, 3>,
    sums: Tensor<B, 2>,
    target: Tensor<B, 2>,
) -> Tensor<B, 2, Int> {
    let [_, blocks, width] = weights.dims();
    let through = sums.clone().cumsum(1);
    // The block: how many blocks end at or below the target.
    let block = count_at_or_below(through.clone(), target.clone()).clamp_max(blocks as i64 - 1);
    let before = (through - sums).gather(1, block.clone());
    let within = row_of_block(weights, block.clone()).cumsum(1) + before;
    let offset = count_at_or_below(within, target).clamp_max(width as i64 - 1);
    block.mul_scalar(width as i64) + offset
}

/// How many entries of each row of `cumulative` `[rows, n]` are at or below the row's `target`
/// `[rows, 1]`, as `[rows, 1]`.
fn count_at_or_below<B: Backend>(
    cumulative: Tensor<B, 2>,
    target: Tensor<B, 2>,
) -> Tensor<B, 2, Int> {
    let shape = cumulative.dims();
    cumulative
        .lower_equal(target.expand(shape))
        .int()
        .sum_dim(1)
}

#[cfg(test)]
mod tests {
    use burn::backend::Flex;

    use super::*;
    use crate::PolicyRng;
    use crate::sampling::{one_token_at, prepare};

    fn rows(values: &[Vec<f32>]) -> Tensor<Flex, 2> {
        let vocab = values[0].len();
        let data: Vec<f32> = values.concat();
        Tensor::from_data(
            TensorData::new(data, [values.len(), vocab]),
            &Default::default(),
        )
    }

    fn read(t: Tensor<Flex, 2>) -> Vec<f32> {
        t.into_data().to_vec::<f32>().expect("f32")
    }

    #[test]
    fn block_widths_cover_the_vocabulary_in_about_root_n_blocks() {
        assert_eq!(block_width(1), 1);
        assert_eq!(block_width(4), 2);
        assert_eq!(block_width(49_152), 256);
        assert_eq!(block_width(151_936), 512);
    }

    #[test]
    fn the_draw_is_the_host_samplers_on_the_same_uniform_numbers() {
        // 1,000 rows of a 300-token vocabulary (two levels of 32: the last block padded), the
        // host sampler's rule applied to the same numbers from the same stream.
        let vocab = 300;
        let mut source = PolicyRng::from_seed(11);
        let logits: Vec<Vec<f32>> = (0..1000)
            .map(|_| {
                (0..vocab)
                    .map(|_| (source.next_f64() * 8.0 - 4.0) as f32)
                    .collect()
            })
            .collect();
        let config = one_token_at(0.7);
        let mut host_rng = PolicyRng::from_seed(5);
        let host: Vec<(u32, f64)> = logits
            .iter()
            .map(|row| prepare(row, &[], &config).pick(&mut host_rng))
            .collect();
        let mut rng = PolicyRng::from_seed(5);
        let uniforms = (0..logits.len()).map(|_| rng.next_f64()).collect();
        let how = DeviceDraw::Sample {
            temperature: 0.7,
            uniforms,
        };
        let out = read(draw(rows(&logits), &how));
        let mut same = 0;
        for (row, (token, logp)) in host.iter().enumerate() {
            let (t, l) = (out[2 * row], out[2 * row + 1]);
            if t as u32 == *token {
                same += 1;
                assert!(
                    (f64::from(l) - logp).abs() < 1e-4,
                    "row {row}: {l} vs {logp}"
                );
            } else {
                // Only a boundary within f32 rounding may move the token, to a neighbour.
                assert_eq!((t as i64 - i64::from(*token)).abs(), 1, "row {row}");
            }
        }
        assert!(same >= 998, "{same} of 1000 rows drew the host's token");
        assert_eq!(rng, host_rng, "the same numbers were consumed");
    }

    #[test]
    fn greedy_takes_the_likeliest_token_with_its_log_probability() {
        let out = read(draw(
            rows(&[vec![0.0, 2.0, 1.0], vec![5.0, -1.0, 4.0]]),
            &DeviceDraw::Greedy,
        ));
        let lse = |v: [f64; 3]| v.iter().map(|x| x.exp()).sum::<f64>().ln();
        assert_eq!((out[0], out[2]), (1.0, 0.0));
        assert!((f64::from(out[1]) - (2.0 - lse([0.0, 2.0, 1.0]))).abs() < 1e-6);
        assert!((f64::from(out[3]) - (5.0 - lse([5.0, -1.0, 4.0]))).abs() < 1e-6);
    }

    #[test]
    fn extreme_uniform_numbers_stay_inside_the_vocabulary() {
        let logits = rows(&[vec![0.0; 5], vec![0.0; 5]]);
        let how = DeviceDraw::Sample {
            temperature: 1.0,
            uniforms: vec![0.0, 1.0 - f64::EPSILON],
        };
        let out = read(draw(logits, &how));
        assert_eq!((out[0], out[2]), (0.0, 4.0));
    }
}
