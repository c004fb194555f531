//! Launch helpers shared by every kernel family's launcher: the kernel variant of a storage
//! type, element counts of views, error construction, push parameters, grid sizes.

use vkformers_vk::{BufferView, KernelCode, Recorder, Result, VkError};

use crate::dtype::DType;

/// Threads per workgroup of these families' shaders (their `local_size_x`).
pub(crate) const LOCAL: u64 = 256;
/// Workgroups per dispatch at most: grid-stride and group-stride loops cover the rest. Also
/// within lavapipe's x limit of 65535.
pub(crate) const MAX_GROUPS: u64 = 65_535;

/// A `VkError::Kernel` naming `k`.
pub(crate) fn err(k: &KernelCode, message: String) -> VkError {
    err_named(k.name, message)
}

/// A `VkError::Kernel` naming the kernel `name` (families that name a kernel before choosing its
/// variant).
pub(crate) fn err_named(name: &str, message: String) -> VkError {
    VkError::Kernel { kernel: name.into(), message }
}

/// A `VkError::Kernel` naming `k` without its `:f32` suffix: families whose f32 variant kept the
/// plain name from before they had 16-bit variants.
pub(crate) fn err_plain(k: &KernelCode, message: String) -> VkError {
    err_named(k.name.strip_suffix(":f32").unwrap_or(k.name), message)
}

/// The variant of a kernel for storage type `dt`, from `[f32, f16, bf16]`.
pub(crate) fn variant(dt: DType, k: [&'static KernelCode; 3]) -> &'static KernelCode {
    match dt {
        DType::F32 => k[0],
        DType::F16 => k[1],
        DType::BF16 => k[2],
    }
}

/// [`variant`], and an error naming it when the device cannot run it (see [`check_storage`]).
pub(crate) fn pick(rec: &Recorder, dt: DType, k: [&'static KernelCode; 3]) -> Result<&'static KernelCode> {
    let code = variant(dt, k);
    check_storage(rec, code, dt)?;
    Ok(code)
}

/// An error naming `k` when `dt` is 16-bit and the device lacks 16-bit storage (`caps().fp16`).
pub(crate) fn check_storage(rec: &Recorder, k: &KernelCode, dt: DType) -> Result<()> {
    if dt != DType::F32 && !rec.caps().fp16 {
        return Err(err(k, format!("{} storage needs 16-bit storage buffers and shaderInt16", dt.suffix())));
    }
    Ok(())
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

/// Number of `dt` elements in `v`; an error when it is not whole or not below 2^32.
pub(crate) fn elements(k: &KernelCode, what: &str, v: &BufferView<'_>, dt: DType) -> Result<u64> {
    let n = v.len / dt.bytes();
    if !v.len.is_multiple_of(dt.bytes()) || n > u64::from(u32::MAX) {
        return Err(err(
            k,
            format!("{what}: view of {} bytes is not a whole number of {} below 2^32", v.len, dt.suffix()),
        ));
    }
    Ok(n)
}

/// Checks that `v` holds exactly `n` elements of `dt`.
pub(crate) fn expect_len(k: &KernelCode, what: &str, v: &BufferView<'_>, n: u64, dt: DType) -> Result<()> {
    let want = n * dt.bytes();
    if v.len != want {
        return Err(err(k, format!("{what}: view of {} bytes, expected {n} {} ({want} bytes)", v.len, dt.suffix())));
    }
    Ok(())
}

/// Checks that `v` holds exactly `elems` values of `size` bytes (also the 4-byte integers of ids,
/// labels and positions, which [`DType`] does not name); errors name `k` as [`err_plain`] does.
pub(crate) fn expect_values(k: &KernelCode, what: &str, v: &BufferView<'_>, elems: u64, size: u64) -> Result<()> {
    let bytes = elems * size;
    if v.len != bytes {
        let message = format!("{what}: view of {} bytes, expected {elems} {size}-byte values ({bytes} bytes)", v.len);
        return Err(err_plain(k, message));
    }
    Ok(())
}

/// Checks that `v` holds exactly `elems` values of `size` bytes, in the words of the loss and
/// optimizer launchers; errors name `k` as [`err_plain`] does.
pub(crate) fn expect_bytes(k: &KernelCode, what: &str, v: &BufferView<'_>, elems: u64, size: u64) -> Result<()> {
    if v.len != elems * size {
        return Err(err_plain(k, format!("{what}: view of {} bytes, expected {elems} x {size} bytes", v.len)));
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

/// The part of `v` starting `elems` elements of `dt` later (same end).
pub(crate) fn skip<'a>(v: BufferView<'a>, elems: u64, dt: DType) -> BufferView<'a> {
    let off = (elems * dt.bytes()).min(v.len);
    BufferView { buffer: v.buffer, offset: v.offset + off, len: v.len - off }
}
