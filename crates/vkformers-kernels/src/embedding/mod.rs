//! Token embedding: a gather `out [N, D] = W[ids, :]` from a table `W [V, D]` with int32
//! `ids [N]`, and its backward, a deterministic scatter-add `dW[ids[n], :] += dout[n, :]`.
//!
//! An id outside `[0, V)` reads nothing: its output row is zeros and it adds no gradient.
//! The backward sorts the token positions by id with a stable counting sort on the GPU
//! (integer atomics for the histogram, a one-workgroup scan and a one-workgroup stable
//! scatter), then adds each id's rows of `dout` in increasing position order: O(N D + V),
//! no float atomics, bitwise reproducible.
//!
//! With `padding_idx` set, the backward adds nothing to that row (torch's `padding_idx`); the
//! forward still reads it.
//!
//! `W`, `out` and `dout` are stored in [`Embedding::dtype`] (f32, f16 or bf16); the gradient
//! `dW` and its sums are f32.

pub mod reference;

use vkformers_vk::{read, read_write, write, BufferView, KernelCode, Recorder, Result};

use crate::code::{
    EmbeddingAccumulatePush, EmbeddingGatherPush, EmbeddingHistogramPush, EmbeddingScanPush, EmbeddingScatterPush,
};
use crate::dtype::DType;
use crate::launch::{dispatch, dispatch_elems, err_plain as err, expect_values as check_len_of, variant as pick};
use crate::{code, elementwise};

/// Threads per workgroup of the embedding kernels.
/// Shape of an embedding lookup: table `[vocab, dim]`, `tokens` ids.
#[derive(Clone, Copy, Debug)]
pub struct Embedding {
    pub vocab: u32,
    pub dim: u32,
    pub tokens: u32,
    /// Storage type of the table `W`, the gathered `out` and the incoming gradient `dout`
    /// (`dW` is always f32).
    pub dtype: DType,
    /// A row the backward leaves untouched (no gradient), as `nn.Embedding(padding_idx=..)`.
    pub padding_idx: Option<u32>,
}

/// Checks that `v` holds `elems` 4-byte values.
fn check_len(kernel: &KernelCode, what: &str, v: &BufferView<'_>, elems: u64) -> Result<()> {
    check_len_of(kernel, what, v, elems, 4)
}

/// Checks the shape (indices must fit in 32 bits) and the ids view.
fn check_shape(kernel: &KernelCode, p: &Embedding, ids: &BufferView<'_>) -> Result<()> {
    let (v, d, n) = (u64::from(p.vocab), u64::from(p.dim), u64::from(p.tokens));
    if v == 0 || d == 0 || n == 0 || v * d > u64::from(u32::MAX) || n * d > u64::from(u32::MAX) {
        return Err(err(
            kernel,
            format!("shape vocab {v}, dim {d}, tokens {n}: need non-empty, V * D and N * D < 2^32"),
        ));
    }
    check_len(kernel, "ids", ids, n)
}

/// Forward: `out[n, :] = w[ids[n], :]` (zeros for an out-of-range id).
/// `w [vocab, dim]` and `out [tokens, dim]` in `p.dtype`, `ids [tokens]` i32.
pub fn embedding_forward(
    rec: &mut Recorder,
    p: &Embedding,
    w: BufferView<'_>,
    ids: BufferView<'_>,
    out: BufferView<'_>,
) -> Result<()> {
    let k = pick(p.dtype, [&code::EMBEDDING_GATHER_F32, &code::EMBEDDING_GATHER_F16, &code::EMBEDDING_GATHER_BF16]);
    gather(rec, k, p, (w, ids, out), p.dtype.bytes())
}

/// The gather `k` with `out` of `out_bytes` an element (the table's type, or f32 for `_wide`).
fn gather(
    rec: &mut Recorder,
    k: &'static KernelCode,
    p: &Embedding,
    (w, ids, out): (BufferView<'_>, BufferView<'_>, BufferView<'_>),
    out_bytes: u64,
) -> Result<()> {
    check_shape(k, p, &ids)?;
    check_len_of(k, "w", &w, u64::from(p.vocab) * u64::from(p.dim), p.dtype.bytes())?;
    let n = u64::from(p.tokens) * u64::from(p.dim);
    check_len_of(k, "out", &out, n, out_bytes)?;
    let params = EmbeddingGatherPush { n_tokens: p.tokens, vocab: p.vocab, D: p.dim };
    dispatch_elems(rec, k, &[read(w), read(ids), write(out)], &params, n)
}

/// Forward of a 16-bit table into f32 rows: `out[n, :] = w[ids[n], :]` widened (exact), `w
/// [vocab, dim]` in `p.dtype` (f16 or bf16), `out [tokens, dim]` f32, `ids [tokens]` i32: an
/// inference table kept in the model's type feeds the f32 residual stream with no cast.
pub fn embedding_forward_wide(
    rec: &mut Recorder,
    p: &Embedding,
    w: BufferView<'_>,
    ids: BufferView<'_>,
    out: BufferView<'_>,
) -> Result<()> {
    let k = match p.dtype {
        DType::F16 => &code::EMBEDDING_GATHER_F16_WIDE,
        DType::BF16 => &code::EMBEDDING_GATHER_BF16_WIDE,
        DType::F32 => return embedding_forward(rec, p, w, ids, out),
    };
    gather(rec, k, p, (w, ids, out), 4)
}

/// Bytes of scratch [`embedding_backward`] needs: `counts [V]`, `offsets [V + 1]`, `perm [N]`
/// as u32.
pub fn backward_scratch_bytes(vocab: u32, tokens: u32) -> u64 {
    (2 * u64::from(vocab) + 1 + u64::from(tokens)) * 4
}

/// A stable counting sort of the positions `n < tokens` by `ids[n]` (ids outside `[0, vocab)`
/// left out), in `scratch` (at least [`backward_scratch_bytes`] bytes): returns the views
/// `offsets [vocab + 1]` (u32; id v's positions are `perm[offsets[v]..offsets[v + 1]]`) and
/// `perm [tokens]` (u32, increasing within each id). The embedding backward's grouping, also
/// the mixture-of-experts grouping of token assignments by expert.
pub fn counting_sort<'a>(
    rec: &mut Recorder,
    ids: BufferView<'_>,
    tokens: u32,
    vocab: u32,
    scratch: BufferView<'a>,
) -> Result<(BufferView<'a>, BufferView<'a>)> {
    let hist = &code::EMBEDDING_HISTOGRAM;
    check_len(hist, "ids", &ids, tokens.into())?;
    let need = backward_scratch_bytes(vocab, tokens);
    if scratch.len < need || vocab == 0 || tokens == 0 {
        return Err(err(hist, format!("scratch of {} bytes for {tokens} ids of {vocab}, need {need}", scratch.len)));
    }
    let v4 = u64::from(vocab) * 4;
    let part = |offset: u64, len: u64| BufferView { offset: scratch.offset + offset, len, ..scratch };
    let counts = part(0, v4);
    let offsets = part(v4, v4 + 4);
    let perm = part(2 * v4 + 4, u64::from(tokens) * 4);

    elementwise::fill(rec, counts, 0.0)?;
    let params = EmbeddingHistogramPush { n_tokens: tokens, vocab };
    dispatch_elems(rec, hist, &[read(ids), read_write(counts)], &params, tokens.into())?;
    let scan = &code::EMBEDDING_SCAN;
    dispatch(rec, scan, &[], &[read_write(counts), write(offsets)], &EmbeddingScanPush { vocab }, [1, 1, 1])?;
    let scatter = &code::EMBEDDING_SCATTER;
    let args = [read(ids), read(offsets), read_write(counts), write(perm)];
    dispatch(rec, scatter, &[], &args, &EmbeddingScatterPush { n_tokens: tokens, vocab }, [1, 1, 1])?;
    Ok((offsets, perm))
}

/// [`embedding_backward`] into a fresh gradient: writes every element of `dw` (rows of ids absent
/// from the batch, and `p.padding_idx`, zero), so `dw` needs no zero fill first; the same bits
/// as that fill followed by [`embedding_backward`].
pub fn embedding_backward_fresh(
    rec: &mut Recorder,
    p: &Embedding,
    ids: BufferView<'_>,
    dout: BufferView<'_>,
    dw: BufferView<'_>,
    scratch: BufferView<'_>,
) -> Result<()> {
    backward_with(rec, p, [ids, dout, dw, scratch], true)
}

/// Backward: `dw[ids[n], :] += dout[n, :]` for every valid id but `p.padding_idx`, repeated ids
/// summed in increasing `n`. `dout [tokens, dim]` in `p.dtype`; `dw [vocab, dim]` f32 is accumulated into (zero it first for a fresh gradient);
/// `scratch` holds at least [`backward_scratch_bytes`] bytes.
pub fn embedding_backward(
    rec: &mut Recorder,
    p: &Embedding,
    ids: BufferView<'_>,
    dout: BufferView<'_>,
    dw: BufferView<'_>,
    scratch: BufferView<'_>,
) -> Result<()> {
    backward_with(rec, p, [ids, dout, dw, scratch], false)
}

/// The counting sort, then the accumulation kernel: adding into `dw`, one thread per `dout`
/// element; or with `fresh` its `_write` variant, one thread per `dw` element (each writes its
/// row's sum, or zero).
fn backward_with(
    rec: &mut Recorder,
    p: &Embedding,
    [ids, dout, dw, scratch]: [BufferView<'_>; 4],
    fresh: bool,
) -> Result<()> {
    let (k, threads) = if fresh {
        let codes = [
            &code::EMBEDDING_ACCUMULATE_WRITE_F32,
            &code::EMBEDDING_ACCUMULATE_WRITE_F16,
            &code::EMBEDDING_ACCUMULATE_WRITE_BF16,
        ];
        (pick(p.dtype, codes), u64::from(p.vocab) * u64::from(p.dim))
    } else {
        let codes =
            [&code::EMBEDDING_ACCUMULATE_F32, &code::EMBEDDING_ACCUMULATE_F16, &code::EMBEDDING_ACCUMULATE_BF16];
        (pick(p.dtype, codes), u64::from(p.tokens) * u64::from(p.dim))
    };
    check_shape(k, p, &ids)?;
    check_len(k, "dw", &dw, u64::from(p.vocab) * u64::from(p.dim))?;
    let n = u64::from(p.tokens) * u64::from(p.dim);
    check_len_of(k, "dout", &dout, n, p.dtype.bytes())?;
    let need = backward_scratch_bytes(p.vocab, p.tokens);
    if scratch.len < need {
        return Err(err(k, format!("scratch of {} bytes, need {need}", scratch.len)));
    }
    let (offsets, perm) = counting_sort(rec, ids, p.tokens, p.vocab, scratch)?;
    let args = [read(ids), read(offsets), read(perm), read(dout), read_write(dw)];
    let padding = p.padding_idx.unwrap_or(u32::MAX);
    let params = EmbeddingAccumulatePush { n_tokens: p.tokens, vocab: p.vocab, D: p.dim, padding_idx: padding };
    dispatch_elems(rec, k, &args, &params, threads)
}
