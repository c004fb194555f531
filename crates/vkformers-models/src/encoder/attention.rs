//! One encoder layer's bidirectional self-attention: the fused kernel under the padding mask,
//! or, with a position bias or a window (MPNet, ModernBERT's local layers), the differentiable
//! product `seq2seq::attention::biased_attention` with that additive bias.

use vkformers_tensor::ops::attention::{attention_for_product, AttnOptions};
use vkformers_tensor::ops::{rope, shape};
use vkformers_tensor::{Graph, Tensor};

use super::{encoder_of, relative};
use crate::decoder::{project, Weights};
use crate::error::{ModelError, Result};
use crate::seq2seq::attention::biased_attention;
use crate::spec::{LayerSpec, ModelSpec};

/// Bidirectional multi-head attention: q, k, v `[B, T, H, D]`, every query sees every key the
/// attention mask keeps (padded queries too: their outputs are computed, as in transformers).
#[allow(clippy::too_many_arguments)]
pub(super) fn self_attention(
    g: &Graph<'_>,
    spec: &ModelSpec,
    w: &Weights,
    layer: &LayerSpec,
    i: usize,
    h: &Tensor,
    keys: &relative::Keys,
    (b, t): (usize, usize),
) -> Result<Tensor> {
    let (n, a) = (&spec.layer_names, &layer.attn);
    let plain = a.clip_qkv.is_none() && a.q_position_scale.is_none() && a.out_norm.is_none();
    if a.alibi.is_some() || a.qk_norm.is_some() || a.softcap != 0.0 || !plain {
        return Err(ModelError::Unsupported("ALiBi, QK-normed, clipped or position-scaled encoder attention".into()));
    }
    if let (Some(d), Some(sh)) = (&encoder_of(spec)?.disentangled, &keys.disentangled) {
        let o = super::disentangled::attention(g, spec, d, w, layer, i, h, sh, (b, t))?;
        return project(g, w, &n.o, i, &o, a.out_bias);
    }
    // A windowed layer reads its window mask (ModernBERT's local layers), others the keys' bias.
    let bias = match (a.sliding_window, &keys.window, &keys.bias) {
        (None, _, bias) => bias.as_ref(),
        (Some(win), Some((w0, mask)), None) if win == *w0 => Some(mask),
        _ => return Err(ModelError::Unsupported("windows of several sizes, or a window with a position bias".into())),
    };
    let heads = |y: Tensor, count: usize| shape::reshape(g, &y, &[b, t, count, a.head_dim]);
    // Inference on a packed q/k/v weight (`crate::packed`): one product and one split.
    let names = [&n.q, &n.k, &n.v].map(|t| format!("{}.weight", crate::spec::layer_name(t, i)));
    let (q, k, v) = match crate::packed::product(g, w, h, &names)? {
        Some((y, cols)) => crate::packed::split_qkv(g, &y, &cols)?,
        None => (
            project(g, w, &n.q, i, h, a.qkv_bias)?,
            project(g, w, &n.k, i, h, a.qkv_bias)?,
            project(g, w, &n.v, i, h, a.qkv_bias)?,
        ),
    };
    let mut q = heads(q, a.heads)?;
    let mut k = heads(k, a.kv_heads)?;
    let mut v = heads(v, a.kv_heads)?;
    if let Some(r) = &a.rope {
        // Positions 0..T in every row (padding does not shift them), as RoFormer / ESM.
        let pos: Vec<i32> = (0..b * t).map(|j| (j % t) as i32).collect();
        let (pos, freq) = (g.ints(&pos, &[b, t])?, g.constant(&r.inv_freq, &[r.inv_freq.len()])?);
        let rot = |x: &Tensor| rope::rope(g, x, &pos, &freq, r.layout, r.rotary_dim, r.mscale);
        (q, k) = (rot(&q)?, rot(&k)?);
        if encoder_of(spec)?.rope_on_values {
            v = rot(&v)?;
        }
    }
    let (hd, rows) = (a.heads * a.head_dim, |x: &Tensor| shape::reshape(g, x, &[b * t, a.heads * a.head_dim]));
    let o = match bias {
        Some(bias) if a.kv_heads == a.heads => {
            let dims = (b, t, t, a.heads, a.head_dim);
            biased_attention(g, (&rows(&q)?, &rows(&k)?, &rows(&v)?), bias, dims, a.scale)?
        }
        Some(_) => return Err(ModelError::Unsupported("a relative position bias with grouped keys".into())),
        None => {
            let kmask = keys.kmask.clone();
            let opts = AttnOptions { scale: Some(a.scale), causal: false, kmask, ..AttnOptions::default() };
            // o_proj reads o: in inference under autocast, the 16-bit o the kernel writes.
            shape::reshape(g, &attention_for_product(g, &q, &k, &v, &opts)?, &[b * t, hd])?
        }
    };
    project(g, w, &n.o, i, &o, a.out_bias)
}
