//! Choosing the next token on the device, so that a generation step reads back only the chosen
//! ids `[B]` (4 bytes per row) instead of the logits `[B, V]`.
//! - [`argmax_last`]: greedy, the largest logit of each row's last column.

pub mod reference;

use vkformers_vk::{read, write, BufferView, Recorder, Result};

use crate::activation::util::{count, err, expect_len, groups_per_item, params};
use crate::code;
use crate::dtype::DType;

/// What [`argmax_last`] writes for a row whose logits are all NaN.
pub const NO_TOKEN: u32 = u32::MAX;

/// `ids[b] = argmax(logits[b t + t - 1, :])` for b < rows: logits f32 `[rows * t, v]`, ids u32
/// `[rows]`. The first index on ties, NaN skipped (as `vkformers_generate::argmax`); [`NO_TOKEN`]
/// for a row of only NaN.
pub fn argmax_last(
    rec: &mut Recorder,
    logits: BufferView<'_>,
    ids: BufferView<'_>,
    rows: usize,
    t: usize,
    v: usize,
) -> Result<()> {
    let k = &code::SAMPLE_ARGMAX;
    if t == 0 || v == 0 {
        return Err(err(k, format!("argmax over logits [{rows} x {t}, {v}]: t and v must be at least 1")));
    }
    let n = count(k, &[rows, t, v])?;
    expect_len(k, "logits", &logits, n.into(), DType::F32)?;
    expect_len(k, "ids", &ids, rows as u64, DType::F32)?;
    let p = params(&[rows as u32, t as u32, v as u32]);
    rec.dispatch(k, &[], &[read(logits), write(ids)], &p, groups_per_item(rows as u64))
}
