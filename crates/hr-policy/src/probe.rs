//! How fast this device multiplies f32 matrices with the kernels the model uses: the yardstick a
//! step's FLOP rate ([`crate::FlopCount`]) is held against. Square `[n, n] × [n, n]` products,
//! one untimed warm-up, then the best of a few timed ones (each waits for the device).

use std::time::Instant;

use burn::tensor::backend::Backend;
use burn::tensor::{Tensor, TensorData};

use crate::PolicyError;

/// A measured matrix-product rate.
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct GemmRate {
    /// The matrices' side.
    pub size: usize,
    /// The fastest product's wall time, seconds.
    pub seconds: f64,
    /// `2·n³` operations over that time.
    pub flops_per_second: f64,
}

/// Times `[size, size] × [size, size]` f32 products on `device`: one warm-up, then `repeats`
/// (at least one), keeping the fastest.
pub fn gemm_rate<B: Backend>(
    device: &B::Device,
    size: usize,
    repeats: usize,
) -> Result<GemmRate, PolicyError> {
    if size == 0 {
        return Err(PolicyError::Request(
            "the GEMM size must be at least 1".to_owned(),
        ));
    }
    let matrix = |salt: usize| -> Tensor<B, 2> {
        let values = (0..size * size)
            .map(|i| ((i * 7919 + salt) % 2003) as f32 / 2003.0 - 0.5)
            .collect();
        Tensor::from_data(TensorData::new(values, [size, size]), device)
    };
    let (a, b) = (matrix(1), matrix(2));
    let sync = || B::sync(device).map_err(|e| PolicyError::Request(format!("device: {e:?}")));
    let product = || -> Result<f64, PolicyError> {
        sync()?;
        let started = Instant::now();
        let c = a.clone().matmul(b.clone());
        sync()?;
        let seconds = started.elapsed().as_secs_f64();
        drop(c);
        Ok(seconds)
    };
    product()?;
    let mut best = f64::INFINITY;
    for _ in 0..repeats.max(1) {
        best = best.min(product()?);
    }
    let operations = 2.0 * (size as f64).powi(3);
    Ok(GemmRate {
        size,
        seconds: best,
        flops_per_second: operations / best.max(1e-12),
    })
}
