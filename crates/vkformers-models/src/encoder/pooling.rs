//! Sentence embeddings from the last hidden state, as sentence-transformers' `Pooling` module
//! computes them: the mean over each row's real tokens (`pooling_mode_mean_tokens`) or the first
//! token (`pooling_mode_cls_token`), then optionally `Normalize` (unit L2 norm).

use vkformers_tensor::ops::matmul;
use vkformers_tensor::{Graph, Tensor};

use crate::error::{ModelError, Result};

/// Which tokens make a sentence's embedding.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Pooling {
    /// `sum_t mask[b,t]·h[b,t] / max(sum_t mask[b,t], 1e-9)`.
    Mean,
    /// `h[b, 0]`.
    Cls,
}

/// Pooled embeddings `[B, hidden]` of hidden `[B·T, hidden]` under the attention mask `[B·T]`:
/// one product `P [B, B·T] · hidden`, with P's row b holding the pooling weights of row b's
/// positions (differentiable, so a pooled loss trains the encoder).
pub fn pool(g: &Graph<'_>, hidden: &Tensor, mask: &[i32], (b, t): (usize, usize), how: Pooling) -> Result<Tensor> {
    if mask.len() != b * t || hidden.shape().first() != Some(&(b * t)) {
        return Err(ModelError::Config(format!("pooling {b}x{t} with hidden {:?}", hidden.shape())));
    }
    let mut p = vec![0f32; b * b * t];
    for row in 0..b {
        let m = &mask[row * t..(row + 1) * t];
        let weights = &mut p[row * b * t + row * t..row * b * t + (row + 1) * t];
        match how {
            Pooling::Mean => {
                // sentence-transformers clamps the count at 1e-9 (an all-padding row pools to 0).
                let count = (m.iter().filter(|&&v| v != 0).count() as f32).max(1e-9);
                for (w, &v) in weights.iter_mut().zip(m) {
                    *w = if v != 0 { 1.0 / count } else { 0.0 };
                }
            }
            Pooling::Cls => weights[0] = 1.0,
        }
    }
    Ok(matmul::matmul(g, &g.constant(&p, &[b, b * t])?, hidden)?)
}

/// A decoder's final hidden states `[B·T, hidden]` (after its final norm: `AutoModel`'s
/// `last_hidden_state`) on rows `ids`, `mask` `[B·T]`, for a decoder embedding model's pooling.
/// Right padding: with causal attention the real tokens never see the padding, and RoPE's
/// scores depend only on distances, so the last real token's state equals the left-padded one
/// sentence-transformers computes.
pub fn decoder_hidden_states(
    g: &Graph<'_>,
    spec: &crate::spec::ModelSpec,
    w: &crate::decoder::Weights,
    ids: &[i32],
    mask: &[i32],
    (b, t): (usize, usize),
) -> Result<Tensor> {
    if spec.encoder.is_some() || spec.seq2seq.is_some() {
        return Err(ModelError::Unsupported(format!("`{}` is not a decoder-only model", spec.model_type)));
    }
    let batch = crate::decoder::Batch { ids, mask, batch: b, seq: t };
    Ok(crate::decoder::hidden_with_aux(g, spec, w, &batch)?.0)
}

/// Each row of `v [rows, dim]` scaled to unit L2 norm (torch's `normalize`: divided by
/// `max(norm, 1e-12)`), on the host.
pub fn normalize_rows(v: &mut [f32], dim: usize) {
    for row in v.chunks_mut(dim) {
        let norm = row.iter().map(|x| f64::from(*x) * f64::from(*x)).sum::<f64>().sqrt().max(1e-12);
        row.iter_mut().for_each(|x| *x = (f64::from(*x) / norm) as f32);
    }
}
