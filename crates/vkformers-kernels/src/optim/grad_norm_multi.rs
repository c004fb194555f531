//! The global gradient norm of many buffers in two dispatches, whatever their number:
//! [`sum_squares_multi`] (`optim/sum_squares_multi`) reads every buffer through a table of
//! device addresses and writes one partial sum of squares per chunk, then
//! [`norm_and_clip_coef_scaled`] sums the partials in order into the norm and the clip
//! coefficient. The per-buffer path ([`super::grad_norm_scaled`]) takes one dispatch per buffer
//! (201 for a 22-layer Llama) plus two.

use vkformers_vk::{read, write, BufferView, Recorder, Result};

use super::{chunk_groups, norm_and_clip_coef_scaled, upload_table, LossScale};
use crate::code;
use crate::code::OptimSumSquaresMultiPush;
use crate::launch::{dispatch_indirect, err, MAX_GROUPS};

/// Elements per chunk (one workgroup's share, 128 per thread): large enough that a 1.1B
/// model's ~34K partials are summed quickly by `norm_clip`'s single workgroup, small enough
/// that the chunks of one large gradient spread over the whole GPU. A constant, so the
/// reduction order (and the norm's bits) depend on the buffer sizes alone.
pub const CHUNK: u32 = 32_768;

/// Bytes of one table entry: `uvec4(address low, address high, n, first chunk)`.
const ENTRY_BYTES: u64 = 16;

/// Largest buffer (in f32) the shader's index arithmetic handles without wrapping.
const MAX_ELEMS: u64 = u32::MAX as u64 - 1024;

/// The table of `grads` (one entry per buffer, see [`ENTRY_BYTES`]) and the total chunks.
fn table(grads: &[BufferView<'_>]) -> Result<(Vec<u32>, u32)> {
    let k = &code::OPTIM_SUM_SQUARES_MULTI;
    let mut words = Vec::with_capacity(grads.len() * 4);
    let mut chunks: u64 = 0;
    for (i, g) in grads.iter().enumerate() {
        let n = g.len / 4;
        if n == 0 || !g.len.is_multiple_of(4) || n > MAX_ELEMS || !g.address().is_multiple_of(4) {
            return Err(err(k, format!("buffer {i}: view of {} bytes is not 1..2^32-1024 f32", g.len)));
        }
        let a = g.address();
        words.extend([a as u32, (a >> 32) as u32, n as u32, chunks as u32]);
        chunks += n.div_ceil(CHUNK.into());
        if chunks > u64::from(u32::MAX) {
            return Err(err(k, "more than 2^32 chunks".into()));
        }
    }
    Ok((words, chunks as u32))
}

/// Length in f32 of the scratch [`grad_norm_multi_scaled`] needs for `grads`: the table, then
/// one partial per chunk.
pub fn scratch_len(grads: &[BufferView<'_>]) -> u64 {
    let chunks: u64 = grads.iter().map(|g| (g.len / 4).div_ceil(CHUNK.into())).sum();
    grads.len() as u64 * ENTRY_BYTES / 4 + chunks.max(1)
}

/// Writes the sum of squares of every buffer of `grads`, one partial per chunk of [`CHUNK`]
/// elements (a buffer's chunks in order, buffers in order), into `partials`, with `table`
/// (`grads.len()` x 16 bytes, 16-byte aligned) written inside the batch first. Returns the
/// number of partials.
pub fn sum_squares_multi(
    rec: &mut Recorder,
    grads: &[BufferView<'_>],
    table_view: BufferView<'_>,
    partials: BufferView<'_>,
) -> Result<u32> {
    sum_squares_multi_in(rec, grads, table_view, partials, MAX_GROUPS as u32)
}

/// [`sum_squares_multi`] on at most `max_groups` workgroups (tests: the workgroups then stride
/// over the chunks, as on a large model).
#[doc(hidden)]
pub fn sum_squares_multi_in(
    rec: &mut Recorder,
    grads: &[BufferView<'_>],
    table_view: BufferView<'_>,
    partials: BufferView<'_>,
    max_groups: u32,
) -> Result<u32> {
    let k = &code::OPTIM_SUM_SQUARES_MULTI;
    if grads.is_empty() {
        return Err(err(k, "no gradient buffers".into()));
    }
    let (words, chunks) = table(grads)?;
    if partials.len < u64::from(chunks) * 4 {
        return Err(err(k, format!("partials: {} bytes, need {chunks} f32", partials.len)));
    }
    let bytes: Vec<u8> = words.iter().flat_map(|w| w.to_le_bytes()).collect();
    let table_used = upload_table(rec, k, table_view, &bytes)?;
    let out = partials.buffer.slice(partials.offset, u64::from(chunks) * 4);
    let push = OptimSumSquaresMultiPush { tensors: grads.len() as u32, chunks, chunk: CHUNK };
    let reads: Vec<_> = grads.iter().map(|g| read(*g)).collect();
    let groups = chunk_groups(chunks, max_groups);
    dispatch_indirect(rec, k, (&[read(table_used), write(out)], &reads), &push, groups)?;
    Ok(chunks)
}

/// [`super::grad_norm_scaled`] in two dispatches: `scratch` holds at least
/// [`scratch_len`]`(grads)` f32 (its start 16-byte aligned: the table, then the partials).
pub fn grad_norm_multi_scaled(
    rec: &mut Recorder,
    grads: &[BufferView<'_>],
    scratch: BufferView<'_>,
    max_norm: f32,
    norm: BufferView<'_>,
    coef: BufferView<'_>,
    ls: LossScale,
) -> Result<()> {
    let k = &code::OPTIM_SUM_SQUARES_MULTI;
    if scratch.len < scratch_len(grads) * 4 {
        return Err(err(k, format!("scratch: {} bytes, need {} f32", scratch.len, scratch_len(grads))));
    }
    let table_bytes = grads.len() as u64 * ENTRY_BYTES;
    let table_view = scratch.buffer.slice(scratch.offset, table_bytes);
    let partials = scratch.buffer.slice(scratch.offset + table_bytes, scratch.len - table_bytes);
    let chunks = sum_squares_multi(rec, grads, table_view, partials)?;
    let used = partials.buffer.slice(partials.offset, u64::from(chunks) * 4);
    norm_and_clip_coef_scaled(rec, used, chunks, max_norm, norm, coef, ls)
}
