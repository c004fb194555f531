//! f64 CPU reference of the embedding gather and its scatter-add backward. `w [vocab, dim]`
//! row-major, `ids [N]`; an id outside `[0, vocab)` gives a zero row and no gradient.

fn row(id: i32, vocab: usize) -> Option<usize> {
    usize::try_from(id).ok().filter(|&r| r < vocab)
}

/// Forward: `out [N, dim]` with `out[n, :] = w[ids[n], :]`.
pub fn embedding(w: &[f64], ids: &[i32], vocab: usize, dim: usize) -> Vec<f64> {
    let mut out = vec![0.0; ids.len() * dim];
    for (n, &id) in ids.iter().enumerate() {
        if let Some(r) = row(id, vocab) {
            out[n * dim..][..dim].copy_from_slice(&w[r * dim..][..dim]);
        }
    }
    out
}

/// Backward: the gradient `dw [vocab, dim]` with `dw[ids[n], :] += dout[n, :]`.
pub fn embedding_backward(dout: &[f64], ids: &[i32], vocab: usize, dim: usize) -> Vec<f64> {
    embedding_backward_padded(dout, ids, vocab, dim, None)
}

/// Backward with torch's `padding_idx`: as [`embedding_backward`], but row `padding_idx` gets no
/// gradient (`dw[padding_idx, :] = 0`).
pub fn embedding_backward_padded(
    dout: &[f64],
    ids: &[i32],
    vocab: usize,
    dim: usize,
    padding_idx: Option<usize>,
) -> Vec<f64> {
    let mut dw = vec![0.0; vocab * dim];
    for (n, &id) in ids.iter().enumerate() {
        if let Some(r) = row(id, vocab).filter(|&r| Some(r) != padding_idx) {
            for d in 0..dim {
                dw[r * dim + d] += dout[n * dim + d];
            }
        }
    }
    dw
}
