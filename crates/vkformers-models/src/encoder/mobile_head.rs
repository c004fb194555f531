//! MobileBERT's parameters (names, shapes, init) and its masked-LM decoder, whose `[H, V]`
//! matrix is the tied word table's transpose `[E, V]` stacked on `cls.predictions.dense.weight
//! [H − E, V]`: logits = x[:, :E] · wordᵀ + x[:, E:] · dense + bias.

use vkformers_tensor::ops::{broadcast, embedding, matmul, shape};
use vkformers_tensor::{Graph, Tensor};

use super::mobile::MobileSpec;
use crate::decoder::Weights;
use crate::error::Result;
use crate::init::{linear, norm_params, Init, Planned};
use crate::spec::{layer_name, ModelSpec, Norm};

/// The extra decoder rows of the masked-LM head.
pub(crate) const MLM_DENSE: &str = "cls.predictions.dense";

/// Everything but the word table and the head: embeddings and layers (see `mobile`).
pub(super) fn plan(
    out: &mut Vec<Planned>,
    spec: &ModelSpec,
    m: &MobileSpec,
    e: usize,
    max_positions: usize,
    types: usize,
) {
    let (h, c, f) = (m.hidden, m.inner, m.intermediate);
    let norm = |out: &mut Vec<Planned>, name: &str, width: usize| {
        norm_params(out, name, &Norm::Layer { eps: 1e-5, bias: true }, width)
    };
    let emb = &m.embeddings;
    for (name, rows) in [("position_embeddings", max_positions), ("token_type_embeddings", types)] {
        out.push(Planned { name: format!("{emb}.{name}.weight"), shape: vec![rows, h], init: Init::Normal });
    }
    if m.trigram || e != h {
        linear(out, &format!("{emb}.embedding_transformation"), h, if m.trigram { 3 * e } else { e }, true);
    }
    norm(out, &format!("{emb}.LayerNorm"), h);
    for i in 0..spec.layers.len() {
        let p = layer_name(&m.layer, i);
        let v_in = if m.bottleneck_attention { c } else { h };
        for (name, rows, cols) in [("query", c, c), ("key", c, c), ("value", c, v_in)] {
            linear(out, &format!("{p}.attention.self.{name}"), rows, cols, true);
        }
        linear(out, &format!("{p}.attention.output.dense"), c, c, true);
        norm(out, &format!("{p}.attention.output.LayerNorm"), c);
        linear(out, &format!("{p}.intermediate.dense"), f, c, true);
        linear(out, &format!("{p}.output.dense"), c, f, true);
        norm(out, &format!("{p}.output.LayerNorm"), c);
        if m.bottleneck {
            linear(out, &format!("{p}.output.bottleneck.dense"), h, c, true);
            norm(out, &format!("{p}.output.bottleneck.LayerNorm"), h);
            let parts = if m.shared_qk { &["input", "attention"][..] } else { &["input"][..] };
            for b in parts {
                linear(out, &format!("{p}.bottleneck.{b}.dense"), c, h, true);
                norm(out, &format!("{p}.bottleneck.{b}.LayerNorm"), c);
            }
        }
        for j in 0..m.ffns.saturating_sub(1) {
            linear(out, &format!("{p}.ffn.{j}.intermediate.dense"), f, c, true);
            linear(out, &format!("{p}.ffn.{j}.output.dense"), c, f, true);
            norm(out, &format!("{p}.ffn.{j}.output.LayerNorm"), c);
        }
    }
}

/// `x [N, H]` (after the head's transform) to logits `[N, V]`.
pub(super) fn mlm_logits(g: &Graph<'_>, spec: &ModelSpec, w: &Weights, x: &Tensor, bias: &Tensor) -> Result<Tensor> {
    let word = w.get(&format!("{}.weight", spec.embed_name))?;
    let (n, h, e) = (x.shape()[0], x.shape()[1], word.shape()[1]);
    // Column slices as gathers of the flattened rows (the backward scatters into them).
    let flat = shape::reshape(g, x, &[n * h, 1])?;
    let cols = |lo: usize, hi: usize| -> Result<Tensor> {
        let idx: Vec<i32> = (0..n).flat_map(|r| (lo..hi).map(move |c| (r * h + c) as i32)).collect();
        let y = embedding::embedding(g, &flat, &g.ints(&idx, &[idx.len()])?)?;
        Ok(shape::reshape(g, &y, &[n, hi - lo])?)
    };
    let head =
        crate::lora::linear(g, &cols(0, e)?, word, Some(bias), w.lora(), &format!("{}.weight", spec.embed_name))?;
    if h == e {
        return Ok(head);
    }
    let rest = matmul::matmul(g, &cols(e, h)?, w.get(&format!("{MLM_DENSE}.weight"))?)?;
    Ok(broadcast::add(g, &head, &rest)?)
}
