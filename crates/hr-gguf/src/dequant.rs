//! ggml storage types and their dequantization to f32 (block layouts from ggml's `ggml-common.h`).

use half::{bf16, f16};

/// A ggml tensor storage type this crate can read.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum GgmlType {
    /// 32-bit float.
    F32,
    /// IEEE half.
    F16,
    /// bfloat16.
    BF16,
    /// Blocks of 32: f16 scale `d`, 16 bytes of nibbles; `x = (q − 8)·d`.
    Q4_0,
    /// Blocks of 32: f16 `d`, f16 `m`, 16 bytes of nibbles; `x = q·d + m`.
    Q4_1,
    /// Blocks of 32: f16 `d`, 32 signed bytes; `x = q·d`.
    Q8_0,
}

impl GgmlType {
    /// The type for ggml's numeric id.
    pub fn from_id(id: u32) -> Option<Self> {
        Some(match id {
            0 => Self::F32,
            1 => Self::F16,
            2 => Self::Q4_0,
            3 => Self::Q4_1,
            8 => Self::Q8_0,
            30 => Self::BF16,
            _ => return None,
        })
    }

    /// Bytes needed to store `count` values; `None` when `count` is not a whole number of blocks
    /// or the size does not fit in a `u64`.
    pub fn storage_bytes(self, count: u64) -> Option<u64> {
        let (block, bytes) = match self {
            Self::F32 => (1, 4),
            Self::F16 | Self::BF16 => (1, 2),
            Self::Q4_0 => (32, 18),
            Self::Q4_1 => (32, 20),
            Self::Q8_0 => (32, 34),
        };
        count
            .is_multiple_of(block)
            .then(|| (count / block).checked_mul(bytes))
            .flatten()
    }
}

fn half_at(b: &[u8], i: usize) -> f32 {
    f16::from_le_bytes([b[i], b[i + 1]]).to_f32()
}

/// Dequantizes stored bytes (as returned by `Gguf::tensor_bytes`) to f32 values in storage order.
pub fn dequantize(ggml_type: GgmlType, bytes: &[u8]) -> Vec<f32> {
    match ggml_type {
        GgmlType::F32 => bytes
            .chunks_exact(4)
            .map(|c| f32::from_le_bytes([c[0], c[1], c[2], c[3]]))
            .collect(),
        GgmlType::F16 => bytes
            .chunks_exact(2)
            .map(|c| f16::from_le_bytes([c[0], c[1]]).to_f32())
            .collect(),
        GgmlType::BF16 => bytes
            .chunks_exact(2)
            .map(|c| bf16::from_le_bytes([c[0], c[1]]).to_f32())
            .collect(),
        GgmlType::Q4_0 => nibble_blocks(bytes, 18, 2, |b, q| (f32::from(q) - 8.0) * half_at(b, 0)),
        GgmlType::Q4_1 => nibble_blocks(bytes, 20, 4, |b, q| {
            f32::from(q) * half_at(b, 0) + half_at(b, 2)
        }),
        GgmlType::Q8_0 => bytes
            .chunks_exact(34)
            .flat_map(|b| {
                let d = half_at(b, 0);
                b[2..34].iter().map(move |q| f32::from(*q as i8) * d)
            })
            .collect(),
    }
}

/// 4-bit blocks of 32 values after a `header`: low nibbles are values 0..16 of the block and high
/// nibbles values 16..32; `value(block, q)` dequantizes one.
fn nibble_blocks(
    bytes: &[u8],
    block: usize,
    header: usize,
    value: impl Fn(&[u8], u8) -> f32,
) -> Vec<f32> {
    let mut out = Vec::with_capacity(bytes.len() / block * 32);
    for b in bytes.chunks_exact(block) {
        let qs = &b[header..header + 16];
        out.extend(qs.iter().map(|q| value(b, q & 0x0F)));
        out.extend(qs.iter().map(|q| value(b, q >> 4)));
    }
    out
}
