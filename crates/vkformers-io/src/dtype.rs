//! Element types and their conversions to and from f32.

use half::{bf16, f16};
pub use safetensors::Dtype;

/// Bytes taken by `numel` elements of `dtype`, or `None` if they do not fill whole bytes or the
/// count overflows.
pub fn byte_size(dtype: Dtype, numel: usize) -> Option<usize> {
    let bits = numel.checked_mul(dtype.bitsize())?;
    (bits % 8 == 0).then_some(bits / 8)
}

/// Number of elements of a shape (1 for a scalar), or `None` on overflow.
pub fn numel(shape: &[usize]) -> Option<usize> {
    shape.iter().try_fold(1usize, |n, &d| n.checked_mul(d))
}

/// Whether f32 data can be converted to `dtype` when saving, and `dtype` read back as f32.
pub fn is_float(dtype: Dtype) -> bool {
    matches!(dtype, Dtype::F32 | Dtype::F16 | Dtype::BF16)
}

/// Decodes little-endian `bytes` of a float dtype to f32 (exactly: every f16/bf16 is an f32).
/// Returns `None` for other dtypes.
pub(crate) fn decode_f32(dtype: Dtype, bytes: &[u8]) -> Option<Vec<f32>> {
    Some(match dtype {
        Dtype::F32 => bytes.chunks_exact(4).map(|c| f32::from_le_bytes([c[0], c[1], c[2], c[3]])).collect(),
        Dtype::F16 => bytes.chunks_exact(2).map(|c| f16::from_le_bytes([c[0], c[1]]).to_f32()).collect(),
        Dtype::BF16 => bytes.chunks_exact(2).map(|c| bf16::from_le_bytes([c[0], c[1]]).to_f32()).collect(),
        _ => return None,
    })
}

/// Appends `data` encoded as little-endian `dtype` (F32, F16 or BF16; f16 and bf16 round to
/// nearest even, as `half` does) to `out`. Other dtypes append nothing and return `false`.
pub(crate) fn encode_f32(dtype: Dtype, data: &[f32], out: &mut Vec<u8>) -> bool {
    match dtype {
        Dtype::F32 => data.iter().for_each(|v| out.extend_from_slice(&v.to_le_bytes())),
        Dtype::F16 => data.iter().for_each(|v| out.extend_from_slice(&f16::from_f32(*v).to_le_bytes())),
        Dtype::BF16 => data.iter().for_each(|v| out.extend_from_slice(&bf16::from_f32(*v).to_le_bytes())),
        _ => return false,
    }
    true
}
