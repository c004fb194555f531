//! The generic decoder graph: embeddings -> layers (pre-norm attention and MLP with residuals)
//! -> final norm -> LM head, built from a `ModelSpec` with the differentiable ops, so the same
//! code gives logits, the loss, and (through the tape) every parameter's gradient.

use std::collections::HashMap;

use vkformers_tensor::ops::attention::{attention, AttnOptions};
use vkformers_tensor::ops::{broadcast, embedding, glu, loss, matmul, norm, rope, shape};
use vkformers_tensor::{Graph, Tensor};

use crate::error::{ModelError, Result};
use crate::spec::{layer_name, AttnSpec, LayerSpec, MlpSpec, ModelSpec, Norm};

/// Parameters by Hugging Face name (`model.layers.0.self_attn.q_proj.weight`).
#[derive(Default)]
pub struct Weights {
    map: HashMap<String, Tensor>,
}

impl Weights {
    pub fn insert(&mut self, name: String, t: Tensor) {
        self.map.insert(name, t);
    }

    /// The parameter `name`, or an error naming it.
    pub fn get(&self, name: &str) -> Result<&Tensor> {
        self.map.get(name).ok_or_else(|| ModelError::Weights(format!("missing tensor `{name}`")))
    }

    /// The parameter `name` if present (optional biases and norms).
    pub fn opt(&self, name: &str) -> Option<&Tensor> {
        self.map.get(name)
    }

    /// All parameters, sorted by name.
    pub fn iter(&self) -> impl Iterator<Item = (&String, &Tensor)> {
        let mut v: Vec<_> = self.map.iter().collect();
        v.sort_by(|a, b| a.0.cmp(b.0));
        v.into_iter()
    }

    pub fn len(&self) -> usize {
        self.map.len()
    }

    pub fn is_empty(&self) -> bool {
        self.map.is_empty()
    }
}

/// One batch of token ids `[B, T]` with its attention mask (1 real, 0 padding).
pub struct Batch<'a> {
    pub ids: &'a [i32],
    pub mask: &'a [i32],
    pub batch: usize,
    pub seq: usize,
}

/// Per-call device inputs shared by all layers.
struct Inputs {
    ids: Tensor,
    kmask: Tensor,
    pos: Tensor,
}

/// Logits `[B·T, V]` of a batch.
pub fn forward(g: &Graph<'_>, spec: &ModelSpec, w: &Weights, batch: &Batch<'_>) -> Result<Tensor> {
    let (b, t) = (batch.batch, batch.seq);
    let pos: Vec<i32> = (0..b * t).map(|i| (i % t) as i32).collect();
    let inputs =
        Inputs { ids: g.ints(batch.ids, &[b, t])?, kmask: g.ints(batch.mask, &[b, t])?, pos: g.ints(&pos, &[b, t])? };
    let embed = w.get(&format!("{}.weight", spec.embed_name))?;
    let mut x = shape::reshape(g, &embedding::embedding(g, embed, &inputs.ids)?, &[b * t, spec.hidden])?;
    if spec.embed_scale != 1.0 {
        x = broadcast::scale(g, &x, spec.embed_scale)?;
    }
    if let Some(wpe) = &spec.position_embedding {
        let table = w.get(&format!("{wpe}.weight"))?;
        let p = shape::reshape(g, &embedding::embedding(g, table, &inputs.pos)?, &[b * t, spec.hidden])?;
        x = broadcast::add(g, &x, &p)?;
    }
    for (i, layer) in spec.layers.iter().enumerate() {
        x = decoder_layer(g, spec, w, layer, i, &x, &inputs, (b, t))?;
    }
    let x = apply_norm(g, &spec.final_norm, w, &spec.final_norm_name, &x)?;
    let head = if spec.tied_head { embed } else { w.get(&format!("{}.weight", spec.head_name))? };
    Ok(matmul::linear(g, &x, head, None)?)
}

/// The causal-LM loss of transformers: logits at position t predict `labels[t + 1]`; -100 (and
/// the last position) are ignored; mean over counted tokens.
pub fn causal_lm_loss(g: &Graph<'_>, logits: &Tensor, labels: &[i32], batch: usize, seq: usize) -> Result<Tensor> {
    let shifted: Vec<i32> = (0..batch * seq).map(|i| if i % seq + 1 < seq { labels[i + 1] } else { -100 }).collect();
    let lab = g.ints(&shifted, &[batch * seq])?;
    Ok(loss::cross_entropy(g, logits, &lab)?)
}

fn weight<'w>(w: &'w Weights, template: &str, i: usize, suffix: &str) -> Result<&'w Tensor> {
    w.get(&format!("{}.{suffix}", layer_name(template, i)))
}

fn opt_weight<'w>(w: &'w Weights, template: &str, i: usize, suffix: &str) -> Option<&'w Tensor> {
    w.opt(&format!("{}.{suffix}", layer_name(template, i)))
}

fn apply_norm(g: &Graph<'_>, n: &Norm, w: &Weights, name: &str, x: &Tensor) -> Result<Tensor> {
    Ok(match n {
        Norm::Rms { eps, unit_offset } => norm::rms_norm(g, x, w.opt(&format!("{name}.weight")), *eps, *unit_offset)?,
        Norm::Layer { eps, bias } => {
            let b = if *bias { w.opt(&format!("{name}.bias")) } else { None };
            norm::layer_norm(g, x, w.opt(&format!("{name}.weight")), b, *eps)?
        }
    })
}

#[allow(clippy::too_many_arguments)]
fn decoder_layer(
    g: &Graph<'_>,
    spec: &ModelSpec,
    w: &Weights,
    layer: &LayerSpec,
    i: usize,
    x: &Tensor,
    inp: &Inputs,
    bt: (usize, usize),
) -> Result<Tensor> {
    let names = &spec.layer_names;
    let h = apply_norm(g, &layer.attn_norm, w, &layer_name(&names.attn_norm, i), x)?;
    let a = self_attention(g, spec, w, &layer.attn, i, &h, inp, bt)?;
    let x = broadcast::add(g, x, &a)?;
    let h = apply_norm(g, &layer.mlp_norm, w, &layer_name(&names.mlp_norm, i), &x)?;
    let m = mlp(g, spec, w, &layer.mlp, i, &h)?;
    Ok(broadcast::add(g, &x, &m)?)
}

fn project(g: &Graph<'_>, w: &Weights, template: &str, i: usize, x: &Tensor, bias: bool) -> Result<Tensor> {
    let b = if bias { opt_weight(w, template, i, "bias") } else { None };
    Ok(matmul::linear(g, x, weight(w, template, i, "weight")?, b)?)
}

#[allow(clippy::too_many_arguments)]
fn self_attention(
    g: &Graph<'_>,
    spec: &ModelSpec,
    w: &Weights,
    a: &AttnSpec,
    i: usize,
    h: &Tensor,
    inp: &Inputs,
    (b, t): (usize, usize),
) -> Result<Tensor> {
    let n = &spec.layer_names;
    let heads = |y: Tensor, count: usize| shape::reshape(g, &y, &[b, t, count, a.head_dim]);
    let mut q = heads(project(g, w, &n.q, i, h, a.qkv_bias)?, a.heads)?;
    let mut k = heads(project(g, w, &n.k, i, h, a.qkv_bias)?, a.kv_heads)?;
    let v = heads(project(g, w, &n.v, i, h, a.qkv_bias)?, a.kv_heads)?;
    if let Some(qk) = &a.qk_norm {
        q = apply_norm(g, qk, w, &layer_name(&n.q_norm, i), &q)?;
        k = apply_norm(g, qk, w, &layer_name(&n.k_norm, i), &k)?;
    }
    if let Some(r) = &a.rope {
        let freq = g.constant(&r.inv_freq, &[r.inv_freq.len()])?;
        q = rope::rope(g, &q, &inp.pos, &freq, r.layout, r.rotary_dim, r.mscale)?;
        k = rope::rope(g, &k, &inp.pos, &freq, r.layout, r.rotary_dim, r.mscale)?;
    }
    let opts = AttnOptions {
        scale: Some(a.scale),
        causal: true,
        window: a.sliding_window.unwrap_or(0),
        kmask: Some(inp.kmask.clone()),
        ..AttnOptions::default()
    };
    let o = attention(g, &q, &k, &v, &opts)?;
    let o = shape::reshape(g, &o, &[b * t, a.heads * a.head_dim])?;
    project(g, w, &n.o, i, &o, a.out_bias)
}

fn mlp(g: &Graph<'_>, spec: &ModelSpec, w: &Weights, m: &MlpSpec, i: usize, h: &Tensor) -> Result<Tensor> {
    let n = &spec.layer_names;
    match m {
        MlpSpec::Gated { glu: kind, bias, .. } => {
            let gate = project(g, w, &n.gate, i, h, *bias)?;
            let up = project(g, w, &n.up, i, h, *bias)?;
            project(g, w, &n.down, i, &glu::glu(g, &gate, &up, *kind)?, *bias)
        }
        MlpSpec::Plain { act, bias, .. } => {
            let up = project(g, w, &n.up, i, h, *bias)?;
            project(g, w, &n.down, i, &vkformers_tensor::ops::activation::activation(g, &up, *act)?, *bias)
        }
    }
}
