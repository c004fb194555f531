//! Sentence embeddings from the last hidden state, as sentence-transformers' `Pooling` module
//! computes them: the mean over each row's real tokens (`pooling_mode_mean_tokens`) or the first
//! token (`pooling_mode_cls_token`), then optionally `Normalize` (unit L2 norm).

use vkformers_tensor::ops::attention::{self, AttnOptions};
use vkformers_tensor::ops::{matmul, shape};
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

/// Head width of [`mean_pool`]'s attention.
const POOL_HEAD: usize = 64;

/// Mean pooling for inference, `[B, hidden]` from hidden `[B·T, hidden]` (hidden a multiple
/// of 64, else `None`: use [`pool`]): fused attention of one all-zero query per row over that
/// row's tokens with score scale 0, hidden split in heads of 64. Every unmasked score is 0, so
/// the softmax weighs each real token 1/count: `o = Σ_t mask·h / count`, [`Pooling::Mean`]. It
/// uploads the query `[B, hidden]` and the key mask `[B, T]` where [`pool`] uploads its
/// `[B, B·T]` weights (8 MiB a batch of 128 × 128 tokens) and multiplies them in f32.
pub fn mean_pool(g: &Graph<'_>, hidden: &Tensor, mask: &[i32], (b, t): (usize, usize)) -> Result<Option<Tensor>> {
    let d = hidden.shape().get(1).copied().unwrap_or(0);
    if d % POOL_HEAD != 0 || mask.len() != b * t || hidden.shape()[0] != b * t {
        return Ok(None);
    }
    // sentence-transformers pools an all-padding row to 0; attention would divide by 0 there.
    if mask.chunks(t).any(|m| m.iter().all(|&v| v == 0)) {
        return Ok(None);
    }
    let h = d / POOL_HEAD;
    let kv = shape::reshape(g, hidden, &[b, t, h, POOL_HEAD])?;
    let q = g.constant(&vec![0.0; b * d], &[b, 1, h, POOL_HEAD])?;
    let kmask = Some(g.ints(mask, &[b, t])?);
    let opts = AttnOptions { scale: Some(0.0), causal: false, kmask, ..AttnOptions::default() };
    // In the hidden state's own type: under autocast the kernel would read 16-bit copies,
    // rounding an f32 hidden state once more before the sum.
    let autocast = g.autocast();
    g.set_autocast(None);
    let o = attention::attention(g, &q, &kv, &kv, &opts);
    g.set_autocast(autocast);
    Ok(Some(shape::reshape(g, &o?, &[b, d])?))
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
