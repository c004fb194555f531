//! Launch helpers shared by this crate's activation, glu, broadcast, reduce and softmax
//! launchers: f32 element counts of views, error construction, push parameters, grid sizes.

use vkformers_vk::{BufferView, KernelCode, Result, VkError};

/// Threads per workgroup of these families' shaders (their `local_size_x`).
pub(crate) const LOCAL: u64 = 256;
/// Workgroups per dispatch at most: grid-stride and group-stride loops cover the rest. Also
/// within lavapipe's x limit of 65535.
pub(crate) const MAX_GROUPS: u64 = 65_535;

/// A `VkError::Kernel` naming `k`.
pub(crate) fn err(k: &KernelCode, message: String) -> VkError {
    VkError::Kernel { kernel: k.name.into(), message }
}

/// Grid of a one-thread-per-element kernel over `n` elements.
pub(crate) fn groups_for(n: u64) -> [u32; 3] {
    [n.div_ceil(LOCAL).clamp(1, MAX_GROUPS) as u32, 1, 1]
}

/// Grid of a one-workgroup-per-item kernel over `n` items (rows, outputs).
pub(crate) fn groups_per_item(n: u64) -> [u32; 3] {
    [n.clamp(1, MAX_GROUPS) as u32, 1, 1]
}

/// Push parameters from 4-byte words.
pub(crate) fn params(words: &[u32]) -> Vec<u8> {
    words.iter().flat_map(|w| w.to_le_bytes()).collect()
}

/// Number of f32 in `v`; an error when it is not whole or not below 2^32.
pub(crate) fn elements(k: &KernelCode, what: &str, v: &BufferView<'_>) -> Result<u64> {
    let n = v.len / 4;
    if !v.len.is_multiple_of(4) || n > u64::from(u32::MAX) {
        return Err(err(k, format!("{what}: view of {} bytes is not a whole number of f32 below 2^32", v.len)));
    }
    Ok(n)
}

/// Checks that `v` holds exactly `n` f32.
pub(crate) fn expect_len(k: &KernelCode, what: &str, v: &BufferView<'_>, n: u64) -> Result<()> {
    if v.len != n * 4 {
        return Err(err(k, format!("{what}: view of {} bytes, expected {n} f32 ({} bytes)", v.len, n * 4)));
    }
    Ok(())
}

/// `a * b` as a u32 element count, or an error naming the kernel.
pub(crate) fn count(k: &KernelCode, dims: &[usize]) -> Result<u32> {
    let n = dims.iter().try_fold(1u64, |acc, &d| acc.checked_mul(d as u64));
    match n {
        Some(n) if n <= u64::from(u32::MAX) => Ok(n as u32),
        _ => Err(err(k, format!("shape {dims:?} has 2^32 elements or more"))),
    }
}

/// The part of `v` starting `elems` f32 later (same end).
pub(crate) fn skip<'a>(v: BufferView<'a>, elems: u64) -> BufferView<'a> {
    let off = (elems * 4).min(v.len);
    BufferView { buffer: v.buffer, offset: v.offset + off, len: v.len - off }
}
