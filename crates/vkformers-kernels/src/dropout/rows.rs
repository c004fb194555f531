//! Row-keyed dropout: the mask of element `(r, c)` of `x [rows, cols]` is a pure function of
//! `(seed, keys[r], c)`, so a row (a sample's token, say) draws the same mask wherever it sits
//! in a batch. `keys [rows, 3]` u32 (the callers' `(position, sample lo, sample hi)`): element
//! `(r, c)` draws word `c & 3` of `philox4x32_10(counter = [c >> 2, keys[r]], key = seed)`, kept
//! iff `uniform >= p` (see `shaders/dropout/rows.comp`).

use vkformers_vk::{read, write, BufferView, Recorder, Result};

use super::keep_scale;
use crate::code::{self, DropoutRowsPush};
use crate::dtype::DType;
use crate::launch::{dispatch, err, pick, Push, MAX_GROUPS};

/// Words of key per row.
pub const KEY_WORDS: usize = 3;

/// `y = x · mask / (1 − p)` (forward), or `dx = dy · mask / (1 − p)` (backward, the same call
/// on `dy`, `dx` replays the mask); `x`, `y` `[rows, cols]` of storage type `dt`, `keys` the
/// rows' `[rows, 3]` u32 keys.
#[allow(clippy::too_many_arguments)]
pub fn apply(
    rec: &mut Recorder,
    x: BufferView<'_>,
    keys: BufferView<'_>,
    y: BufferView<'_>,
    (rows, cols): (usize, usize),
    p: f32,
    seed: u64,
    dt: DType,
) -> Result<()> {
    let k = pick(rec, dt, [&code::DROPOUT_ROWS_F32, &code::DROPOUT_ROWS_F16, &code::DROPOUT_ROWS_BF16])?;
    if !(0.0..=1.0).contains(&p) {
        return Err(err(k, format!("dropout probability {p} outside [0, 1]")));
    }
    let blocks = (rows as u64) * (cols as u64).div_ceil(4);
    if rows == 0 || cols == 0 || blocks >= 1 << 32 || (rows as u64) * (cols as u64) >= 1 << 32 {
        return Err(err(k, format!("[{rows}, {cols}]: rows and cols must be at least 1, their product below 2^32")));
    }
    let bytes = (rows * cols) as u64 * dt.bytes();
    if x.len != bytes || y.len != bytes {
        return Err(err(k, format!("x of {} and y of {} bytes for [{rows}, {cols}] ({bytes} bytes)", x.len, y.len)));
    }
    if keys.len != (rows * KEY_WORDS * 4) as u64 {
        return Err(err(k, format!("keys of {} bytes for {rows} rows of {KEY_WORDS} u32", keys.len)));
    }
    let (seed_lo, seed_hi) = (seed as u32, (seed >> 32) as u32);
    let push = DropoutRowsPush { rows: rows as u32, cols: cols as u32, seed_lo, seed_hi, p, scale: keep_scale(p) };
    const LOCAL: u32 = <DropoutRowsPush as Push>::LOCAL_X;
    const { assert!(LOCAL > 0) };
    let local = u64::from(LOCAL);
    let groups = [blocks.div_ceil(local).clamp(1, MAX_GROUPS) as u32, 1, 1];
    dispatch(rec, k, &[], &[read(x), read(keys), write(y)], &push, groups)
}
