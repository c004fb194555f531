//! Elementwise f32 kernels: fill, copy, add, mul. Views are byte ranges holding f32 values.

use vkformers_vk::{read, write, BufferView, Recorder, Result, VkError};

use crate::code;
use crate::launch::MAX_GROUPS;

/// Threads per workgroup of the elementwise shaders (their `local_size_x`).
const LOCAL: u64 = 256;

fn groups_for(n: u64) -> [u32; 3] {
    [n.div_ceil(LOCAL).clamp(1, MAX_GROUPS) as u32, 1, 1]
}

fn elements(kernel: &str, v: &BufferView<'_>) -> Result<u32> {
    let n = v.len / 4;
    if !v.len.is_multiple_of(4) || n > u64::from(u32::MAX) {
        return Err(VkError::Kernel {
            kernel: kernel.into(),
            message: format!("view of {} bytes is not a whole number of f32 below 2^32", v.len),
        });
    }
    Ok(n as u32)
}

fn same_len(kernel: &str, a: &BufferView<'_>, b: &BufferView<'_>) -> Result<()> {
    if a.len != b.len {
        return Err(VkError::Kernel {
            kernel: kernel.into(),
            message: format!("operands of {} and {} bytes", a.len, b.len),
        });
    }
    Ok(())
}

fn params(words: &[u32]) -> Vec<u8> {
    words.iter().flat_map(|w| w.to_le_bytes()).collect()
}

/// `out[i] = value`.
pub fn fill(rec: &mut Recorder, out: BufferView<'_>, value: f32) -> Result<()> {
    let n = elements(code::ELEMENTWISE_FILL.name, &out)?;
    rec.dispatch(&code::ELEMENTWISE_FILL, &[], &[write(out)], &params(&[n, value.to_bits()]), groups_for(n.into()))
}

/// `out[i] = x[i]`.
pub fn copy(rec: &mut Recorder, x: BufferView<'_>, out: BufferView<'_>) -> Result<()> {
    let k = &code::ELEMENTWISE_COPY;
    same_len(k.name, &x, &out)?;
    let n = elements(k.name, &out)?;
    rec.dispatch(k, &[], &[read(x), write(out)], &params(&[n]), groups_for(n.into()))
}

fn binary(
    k: &vkformers_vk::KernelCode,
    rec: &mut Recorder,
    x: BufferView<'_>,
    y: BufferView<'_>,
    out: BufferView<'_>,
) -> Result<()> {
    same_len(k.name, &x, &out)?;
    same_len(k.name, &y, &out)?;
    let n = elements(k.name, &out)?;
    rec.dispatch(k, &[], &[read(x), read(y), write(out)], &params(&[n]), groups_for(n.into()))
}

/// `out[i] = x[i] + y[i]`.
pub fn add(rec: &mut Recorder, x: BufferView<'_>, y: BufferView<'_>, out: BufferView<'_>) -> Result<()> {
    binary(&code::ELEMENTWISE_BINARY_ADD, rec, x, y, out)
}

/// `out[i] = x[i] * y[i]`.
pub fn mul(rec: &mut Recorder, x: BufferView<'_>, y: BufferView<'_>, out: BufferView<'_>) -> Result<()> {
    binary(&code::ELEMENTWISE_BINARY_MUL, rec, x, y, out)
}
