//! Cross-entropy of a head applied to hidden states, a chunk of rows at a time, so the logits
//! `[N, V]` and their gradient never exist whole (the LM head of a training step: N = B·T
//! tokens, V = vocabulary; 4096 x 32000 f32 logits are 0.5 GB, and their gradient as much).
//!
//! Forward, per chunk of rows `r0..r0 + n`: `logits_c = head(x[r0..][..n])` (`[n, V]`), then
//! the cross-entropy kernel writes `loss_rows[r0..][..n]` and the f32 log-sum-exp `lse[r0..]`;
//! `logits_c` is dropped before the next chunk (the allocator hands its buffer on). The mean
//! over all counted rows is then taken as `loss::cross_entropy` does (same kernels, same
//! order: the loss bits do not depend on the chunking when `head` is row-wise exact).
//!
//! Backward, per chunk: `head` runs again on the chunk (its nodes on the tape), the kernel
//! writes `dlogits_c = (softmax − onehot) · dL / count` from the saved lse, and the chunk's
//! tape segment is run at once: the head's parameters accumulate their gradient, and the
//! chunk's `dx_c` is copied into its rows of `dX [N, H]`. Costs one more head product (the
//! recompute) for never holding more than one chunk's logits and their gradient.

use vkformers_kernels::elementwise;
use vkformers_kernels::loss::{self as k, CrossEntropy};
use vkformers_vk::{BufferView, VkError};

use crate::{Graph, Result, Tensor};

/// The head of [`chunked_cross_entropy`]: rows `[n, H]` to logits `[n, V]`, from
/// differentiable ops; it captures its parameters (their gradients accumulate as usual).
pub type Head = dyn Fn(&Graph<'_>, &Tensor) -> Result<Tensor>;

/// Mean cross-entropy `[1]` of `head(x)` (`x [N, H]` f32) against int32 `labels [N]`
/// (-100, or any label outside `[0, V)`, is ignored), `chunk_rows` rows at a time.
/// Equals `loss::cross_entropy(g, &head(g, x)?, labels)` and its gradients.
pub fn chunked_cross_entropy(
    g: &Graph<'_>,
    x: &Tensor,
    labels: &Tensor,
    chunk_rows: usize,
    head: Box<Head>,
) -> Result<Tensor> {
    let rows = x.rows();
    if labels.numel() != rows || x.shape().len() != 2 || rows == 0 || chunk_rows == 0 {
        return Err(bad(format!("x {:?}, {} labels, chunks of {chunk_rows} rows", x.shape(), labels.numel())));
    }
    let track = g.grad_enabled() && !g.discarding_nodes();
    let (loss_rows, lse) = (g.empty(&[rows])?, g.empty(&[rows])?);
    let count = g.empty(&[1])?;
    let mut needs_grad = false;
    let x16 = half_rows_source(g, x);
    for (r0, n) in chunks(rows, chunk_rows) {
        let xc = chunk_input(g, (x, x16.as_ref()), r0, n)?;
        // A training forward whose nodes are dropped (as a checkpointed block's): the same
        // kernels as the backward's recompute, and the output says whether gradients flow.
        let mark = g.tape_mark();
        let logits = if track { g.with_grad(true, || head(g, &xc))? } else { head(g, &xc)? };
        g.drop_casts_since(&mark);
        needs_grad |= logits.requires_grad();
        let ce = operands(&logits, labels, r0)?;
        g.record(|rec| {
            if r0 == 0 {
                k::count_labels(rec, labels.view(), ce.vocab, count.view())?;
            }
            k::forward(rec, &ce, part(&loss_rows, r0, n), part(&lse, r0, n))
        })?;
    }
    let loss = g.output_with_grad(&[1], track && needs_grad)?;
    g.record(|rec| k::mean_loss(rec, loss_rows.view(), count.view(), loss.view()))?;
    let (xs, lb) = (x.clone(), labels.clone());
    g.push_node(
        &loss,
        vec![x.clone(), labels.clone()],
        Box::new(move |g, dloss| {
            let dx = backward(g, (&xs, x16.as_ref()), &lb, chunk_rows, &*head, (&lse, &count, dloss))?;
            Ok(vec![dx, None])
        }),
    );
    Ok(loss)
}

/// dX `[N, H]` (None when `x` needs none), accumulating the head's parameter gradients.
fn backward(
    g: &Graph<'_>,
    (x, x16): (&Tensor, Option<&Tensor>),
    labels: &Tensor,
    chunk_rows: usize,
    head: &Head,
    (lse, count, dloss): (&Tensor, &Tensor, &Tensor),
) -> Result<Option<Tensor>> {
    let rows = x.rows();
    let dx = if x.requires_grad() { Some(g.empty(x.shape())?) } else { None };
    for (r0, n) in chunks(rows, chunk_rows) {
        let plain = chunk_input(g, (x, x16), r0, n)?;
        let xc = if dx.is_some() { g.detach(&plain) } else { plain };
        // A 16-bit chunk stands for f32 rows: the head's product hands dxc back in f32 (a no-op
        // on an f32 chunk).
        crate::ops::cast::takes_wide_grad(g, &xc);
        let mark = g.tape_mark();
        let logits = g.with_grad(false, || head(g, &xc))?;
        let ce = operands(&logits, labels, r0)?;
        // In 16 bits under autocast when the head's product takes it so (no cast after).
        let dlogits = crate::ops::loss::backward(g, &ce, &logits, (part(lse, r0, n), count.view(), dloss.view()))?;
        let mut grads = g.backward_segment(&logits, &dlogits, &mark)?;
        if let Some(dx) = &dx {
            let cols = x.last_dim();
            let rows_view = dx.0.buf.slice(dx.0.offset + (r0 * cols * 4) as u64, (n * cols * 4) as u64);
            match grads.remove(&xc.id()) {
                Some(dxc) => g.record(|rec| elementwise::copy(rec, dxc.view(), rows_view))?,
                None => g.record(|rec| elementwise::fill(rec, rows_view, 0.0))?,
            }
        }
    }
    Ok(dx)
}

/// `(first row, rows)` of each chunk.
fn chunks(rows: usize, chunk_rows: usize) -> impl Iterator<Item = (usize, usize)> {
    (0..rows).step_by(chunk_rows).map(move |r0| (r0, chunk_rows.min(rows - r0)))
}

/// The kept 16-bit copy of `x` (under autocast, the twin the final norm wrote) whose row
/// blocks the head's product reads in place of f32 row copies and their casts (the same bits:
/// the twin is the cast's rounding); None without one, or with `VKFORMERS_WIDE_OUTPUTS=1`.
fn half_rows_source(g: &Graph<'_>, x: &Tensor) -> Option<Tensor> {
    let dt = g.autocast().filter(|_| crate::ops::cast::half_outputs_on())?;
    // Row blocks must start on whole 4-byte words.
    g.cached_cast(x, dt).filter(|_| x.last_dim().is_multiple_of(2))
}

/// The head's input for rows `r0..r0 + n`: a view of those rows of `x16` (no copy, no cast)
/// where the head's product runs the GEMM on them, else an f32 copy of those rows of `x` (a
/// few rows take the GEMV, which reads f32).
fn chunk_input(g: &Graph<'_>, (x, x16): (&Tensor, Option<&Tensor>), r0: usize, n: usize) -> Result<Tensor> {
    let caps = g.ctx().caps();
    let gemm_rows = u32::try_from(n).is_ok_and(|m| !vkformers_kernels::matmul::gemv::gemv_applies(m, caps));
    match x16 {
        Some(t) if gemm_rows => g.view_rows(t, r0, n),
        _ => rows_of(g, x, r0, n),
    }
}

/// Rows `r0..r0 + n` of `x [N, H]` f32 as a new `[n, H]` tensor (a copy: tensors start at
/// their buffer's first byte), carrying no gradient.
fn rows_of(g: &Graph<'_>, x: &Tensor, r0: usize, n: usize) -> Result<Tensor> {
    let cols = x.last_dim();
    let out = g.empty(&[n, cols])?;
    let src = x.0.buf.slice(x.0.offset + (r0 * cols * 4) as u64, (n * cols * 4) as u64);
    g.record(|rec| elementwise::copy(rec, src, out.view()))?;
    Ok(out)
}

/// Elements `r0..r0 + n` of an f32 or int32 vector.
fn part(v: &Tensor, r0: usize, n: usize) -> BufferView<'_> {
    v.0.buf.slice(v.0.offset + r0 as u64 * 4, n as u64 * 4)
}

/// The kernels' view of one chunk: its logits and its rows of the labels.
fn operands<'a>(logits: &'a Tensor, labels: &'a Tensor, r0: usize) -> Result<CrossEntropy<'a>> {
    if logits.shape().len() != 2 {
        return Err(bad(format!("the head gave logits {:?}, expected [rows, vocab]", logits.shape())));
    }
    Ok(CrossEntropy {
        logits: logits.view(),
        labels: part(labels, r0, logits.rows()),
        rows: logits.rows() as u32,
        vocab: logits.last_dim() as u32,
        dtype: logits.dtype(),
    })
}

fn bad(message: String) -> VkError {
    VkError::Kernel { kernel: "chunked_cross_entropy".into(), message }
}
