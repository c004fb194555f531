//! Dropout with a counter-based RNG (Philox4x32-10): the mask of element `i` is a pure function
//! of `(seed, offset + i)`, so the backward recomputes it (replay) instead of storing it.
//!
//! Stream: element index `idx` (64-bit) of `seed` draws word `idx & 3` of
//! `philox4x32_10(counter = [lo(idx >> 2), hi(idx >> 2), 0, 0], key = [lo(seed), hi(seed)])`;
//! `uniform = (word >> 8) · 2^-24 ∈ [0, 1)`; an element is kept iff `uniform >= p`. Successive
//! dropout layers of one step should use disjoint `[offset, offset + n)` ranges (or seeds).
//! Tensors are stored as `DType` (f32, f16 or bf16; the mask is the same for every type).

pub mod reference;
pub mod rows;

use vkformers_vk::{read, write, BufferView, KernelCode, Recorder, Result};

use crate::code::{self, DropoutDropoutPush, DropoutRandomBitsPush};
use crate::dtype::DType;
use crate::launch::{dispatch, err, pick, Push, MAX_GROUPS};

/// Number of `bytes`-byte values in `v`: an error unless whole and in 1..2^32.
fn elements(k: &KernelCode, what: &str, v: &BufferView<'_>, bytes: u64) -> Result<u32> {
    let n = v.len / bytes;
    if n == 0 || !v.len.is_multiple_of(bytes) || n > u64::from(u32::MAX) {
        return Err(err(k, format!("{what}: view of {} bytes is not 1..2^32 {bytes}-byte values", v.len)));
    }
    Ok(n as u32)
}

/// Workgroups covering the 4-aligned blocks of `[offset, offset + n)` (each thread draws one
/// 4-word Philox block per loop iteration).
fn groups(n: u32, offset: u64) -> [u32; 3] {
    let blocks = ((offset & 3) + u64::from(n)).div_ceil(4);
    // dropout.comp and random_bits.comp: one workgroup size (checked at compile time).
    const LOCAL: u32 = <DropoutDropoutPush as Push>::LOCAL_X;
    const { assert!(LOCAL > 0 && LOCAL == <DropoutRandomBitsPush as Push>::LOCAL_X) };
    [blocks.div_ceil(u64::from(LOCAL)).clamp(1, MAX_GROUPS) as u32, 1, 1]
}

/// The low and high words of `x`.
fn lo_hi(x: u64) -> (u32, u32) {
    (x as u32, (x >> 32) as u32)
}

/// `1 / (1 - p)` rounded to f32 (0 when `p == 1`: everything is dropped).
pub fn keep_scale(p: f32) -> f32 {
    if p >= 1.0 {
        0.0
    } else {
        (1.0 / (1.0 - f64::from(p))) as f32
    }
}

fn apply(
    rec: &mut Recorder,
    x: BufferView<'_>,
    y: BufferView<'_>,
    p: f32,
    (seed, offset): (u64, u64),
    dt: DType,
) -> Result<()> {
    let k = pick(rec, dt, [&code::DROPOUT_DROPOUT_F32, &code::DROPOUT_DROPOUT_F16, &code::DROPOUT_DROPOUT_BF16])?;
    if !(0.0..=1.0).contains(&p) {
        return Err(err(k, format!("dropout probability {p} outside [0, 1]")));
    }
    let n = elements(k, "x", &x, dt.bytes())?;
    if y.len != x.len {
        return Err(err(k, format!("output of {} bytes for an input of {} bytes", y.len, x.len)));
    }
    let ((seed_lo, seed_hi), (offset_lo, offset_hi)) = (lo_hi(seed), lo_hi(offset));
    let push = DropoutDropoutPush { n, seed_lo, seed_hi, offset_lo, offset_hi, p, scale: keep_scale(p) };
    dispatch(rec, k, &[], &[read(x), write(y)], &push, groups(n, offset))
}

/// Forward: `y[i] = x[i] · mask[i] / (1 − p)` with `mask[i] = uniform(seed, offset + i) >= p`;
/// `x`, `y` `[n]` of storage type `dt` (dropped elements are written as 0, even where `x` is not
/// finite).
pub fn forward(
    rec: &mut Recorder,
    x: BufferView<'_>,
    y: BufferView<'_>,
    p: f32,
    seed: u64,
    offset: u64,
    dt: DType,
) -> Result<()> {
    apply(rec, x, y, p, (seed, offset), dt)
}

/// Backward: `dx[i] = dy[i] · mask[i] / (1 − p)`, replaying the forward's mask from the same
/// `(seed, offset, p)`; `dy`, `dx` `[n]` of storage type `dt`.
pub fn backward(
    rec: &mut Recorder,
    dy: BufferView<'_>,
    dx: BufferView<'_>,
    p: f32,
    seed: u64,
    offset: u64,
    dt: DType,
) -> Result<()> {
    apply(rec, dy, dx, p, (seed, offset), dt)
}

/// `out[i]` = the raw Philox word of element `offset + i` of `seed`'s stream; `out [n]` u32.
pub fn random_bits(rec: &mut Recorder, out: BufferView<'_>, seed: u64, offset: u64) -> Result<()> {
    let k = &code::DROPOUT_RANDOM_BITS;
    let n = elements(k, "out", &out, 4)?;
    let ((seed_lo, seed_hi), (offset_lo, offset_hi)) = (lo_hi(seed), lo_hi(offset));
    let push = DropoutRandomBitsPush { n, seed_lo, seed_hi, offset_lo, offset_hi };
    dispatch(rec, k, &[], &[write(out)], &push, groups(n, offset))
}
