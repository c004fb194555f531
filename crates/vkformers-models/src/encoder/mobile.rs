//! MobileBERT's embeddings and layers (`MobileSpec`), beside the generic BERT layer. Widths:
//! E = `embedding_size` (word table), H = `hidden_size` (the residual stream between layers),
//! T' = `intra_bottleneck_size` with bottlenecks (else H), I = `intermediate_size`.
//! Embeddings: `[word[t+1], word[t], word[t−1]]` (zeros past the ends) `[N, 3E]` through
//! `embedding_transformation` to H, + positions + token types (both H wide), then the norm.
//! Layer on x `[N, H]`: li = norm(dense(x)) `[N, T']` (`bottleneck.input`), q = k = the shared
//! `bottleneck.attention` of x, v = x; a = norm(o(attn) + li); each extra FFN:
//! a = norm(down(act(up(a))) + a); then o = norm(down(act(up(a))) + a) and back to H:
//! norm(dense(o) + x) (`output.bottleneck`). Norms are `NoNorm` (x·w + b) or LayerNorm.

use vkformers_kernels::activation::Activation;
use vkformers_tensor::ops::attention::{attention, AttnOptions};
use vkformers_tensor::ops::{activation, broadcast, embedding, shape};
use vkformers_tensor::{Graph, Tensor};

use super::EncoderBatch;
use crate::decoder::{apply_norm, Weights};
use crate::error::Result;
use crate::spec::{layer_name, ModelSpec, Norm};

/// The shape of MobileBERT's layers (see the module doc).
#[derive(Clone, Debug, PartialEq)]
pub struct MobileSpec {
    /// Layer module template (`mobilebert.encoder.layer.{i}`) and the embeddings' prefix.
    pub layer: String,
    pub embeddings: String,
    pub hidden: usize,
    /// T' (`true_hidden_size`).
    pub inner: usize,
    pub intermediate: usize,
    pub heads: usize,
    pub act: Activation,
    pub trigram: bool,
    pub bottleneck: bool,
    /// q, k and v all read the input bottleneck (`use_bottleneck_attention`).
    pub bottleneck_attention: bool,
    /// q and k read `bottleneck.attention` (`key_query_shared_bottleneck`).
    pub shared_qk: bool,
    /// FFN blocks per layer (`num_feedforward_networks`): the last is the layer's own.
    pub ffns: usize,
    /// `None`: `NoNorm`; else LayerNorm with the config's eps (the modules built without eps
    /// use torch's 1e-5).
    pub layer_norm_eps: Option<f32>,
}

/// The norm named `name` on x: `NoNorm` or LayerNorm (`default_eps`: built without the config's).
fn norm(g: &Graph<'_>, m: &MobileSpec, w: &Weights, name: &str, x: &Tensor, default_eps: bool) -> Result<Tensor> {
    match m.layer_norm_eps {
        None => {
            let y = broadcast::mul(g, x, w.get(&format!("{name}.weight"))?)?;
            Ok(broadcast::add(g, &y, w.get(&format!("{name}.bias"))?)?)
        }
        Some(eps) => {
            let eps = if default_eps { 1e-5 } else { eps };
            apply_norm(g, &Norm::Layer { eps, bias: true }, w, name, x)
        }
    }
}

fn linear(g: &Graph<'_>, w: &Weights, name: &str, x: &Tensor) -> Result<Tensor> {
    let weight = format!("{name}.weight");
    let b = w.get(&format!("{name}.bias"))?;
    Ok(crate::lora::linear(g, x, w.get(&weight)?, Some(b), w.lora(), &weight)?)
}

/// The embeddings `[B·T, H]`.
fn embeddings(
    g: &Graph<'_>,
    spec: &ModelSpec,
    m: &MobileSpec,
    w: &Weights,
    batch: &EncoderBatch<'_>,
) -> Result<Tensor> {
    let (t, n) = (batch.seq, batch.batch * batch.seq);
    let word = w.get(&format!("{}.weight", spec.embed_name))?;
    let e = word.shape()[1];
    let mut x = if m.trigram {
        // Rows (next, this, previous) per token, gathered then zeroed past the row's ends;
        // `[3N, E]` read as `[N, 3E]` is their concatenation.
        let (mut ids, mut keep) = (Vec::with_capacity(3 * n), Vec::with_capacity(3 * n));
        for (j, &id) in batch.ids.iter().enumerate() {
            let pos = j % t;
            for (ok, other) in [(pos + 1 < t, j + 1), (true, j), (pos > 0, j.wrapping_sub(1))] {
                ids.push(if ok { batch.ids[other] } else { id });
                keep.push(if ok { 1.0 } else { 0.0 });
            }
        }
        let rows = embedding::embedding_padded(g, word, &g.ints(&ids, &[3 * n])?, spec.padding_idx)?;
        let rows = broadcast::mul(g, &rows, &g.constant(&keep, &[3 * n, 1])?)?;
        linear(g, w, &format!("{}.embedding_transformation", m.embeddings), &shape::reshape(g, &rows, &[n, 3 * e])?)?
    } else {
        let x = embedding::embedding_padded(g, word, &g.ints(batch.ids, &[n])?, spec.padding_idx)?;
        if e == m.hidden {
            x
        } else {
            linear(g, w, &format!("{}.embedding_transformation", m.embeddings), &x)?
        }
    };
    let pos: Vec<i32> = (0..n).map(|j| (j % t) as i32).collect();
    let table = |name: &str| w.get(&format!("{}.{name}.weight", m.embeddings));
    x = broadcast::add(g, &x, &embedding::embedding(g, table("position_embeddings")?, &g.ints(&pos, &[n])?)?)?;
    let zeros = vec![0; n];
    let types = batch.token_types.unwrap_or(&zeros);
    let rows = table("token_type_embeddings")?.shape()[0];
    if let Some(bad) = types.iter().find(|&&v| v < 0 || v as usize >= rows) {
        return Err(crate::error::ModelError::Config(format!("token type {bad} outside type_vocab_size {rows}")));
    }
    let tt = embedding::embedding(g, table("token_type_embeddings")?, &g.ints(types, &[n])?)?;
    x = broadcast::add(g, &x, &tt)?;
    norm(g, m, w, &format!("{}.LayerNorm", m.embeddings), &x, true)
}

/// One layer on x `[B·T, H]` (see the module doc).
fn layer(
    g: &Graph<'_>,
    m: &MobileSpec,
    w: &Weights,
    i: usize,
    x: &Tensor,
    kmask: Option<&Tensor>,
    (b, t): (usize, usize),
) -> Result<Tensor> {
    let p = layer_name(&m.layer, i);
    let lin = |name: &str, y: &Tensor| linear(g, w, &format!("{p}.{name}"), y);
    let nrm = |name: &str, y: &Tensor, default_eps: bool| norm(g, m, w, &format!("{p}.{name}"), y, default_eps);
    let (qk, v_in, input) = if m.bottleneck {
        let li = nrm("bottleneck.input.LayerNorm", &lin("bottleneck.input.dense", x)?, false)?;
        if m.bottleneck_attention {
            (li.clone(), li.clone(), li)
        } else if m.shared_qk {
            let s = nrm("bottleneck.attention.LayerNorm", &lin("bottleneck.attention.dense", x)?, false)?;
            (s, x.clone(), li)
        } else {
            (x.clone(), x.clone(), li)
        }
    } else {
        (x.clone(), x.clone(), x.clone())
    };
    let d = m.inner / m.heads;
    let heads = |y: Tensor| shape::reshape(g, &y, &[b, t, m.heads, d]);
    let (q, k, v) = (
        heads(lin("attention.self.query", &qk)?)?,
        heads(lin("attention.self.key", &qk)?)?,
        heads(lin("attention.self.value", &v_in)?)?,
    );
    let (scale, kmask) = (Some((d as f32).powf(-0.5)), kmask.cloned());
    let opts = AttnOptions { scale, causal: false, kmask, ..AttnOptions::default() };
    let o = shape::reshape(g, &attention(g, &q, &k, &v, &opts)?, &[b * t, m.inner])?;
    let residual = |name: &str, y: &Tensor, r: &Tensor, default_eps: bool| -> Result<Tensor> {
        nrm(&format!("{name}.LayerNorm"), &broadcast::add(g, &lin(&format!("{name}.dense"), y)?, r)?, default_eps)
    };
    let mut a = residual("attention.output", &o, &input, false)?;
    let ffn = |up: &str, y: &Tensor| -> Result<Tensor> { Ok(activation::activation(g, &lin(up, y)?, m.act)?) };
    for j in 0..m.ffns.saturating_sub(1) {
        a = residual(&format!("ffn.{j}.output"), &ffn(&format!("ffn.{j}.intermediate.dense"), &a)?, &a, false)?;
    }
    let out = residual("output", &ffn("intermediate.dense", &a)?, &a, true)?;
    if m.bottleneck {
        residual("output.bottleneck", &out, x, false)
    } else {
        Ok(out)
    }
}

/// The last hidden state `[B·T, H]`.
pub(super) fn hidden_states(
    g: &Graph<'_>,
    spec: &ModelSpec,
    m: &MobileSpec,
    w: &Weights,
    batch: &EncoderBatch<'_>,
) -> Result<Tensor> {
    let mut x = embeddings(g, spec, m, w, batch)?;
    let kmask = crate::decoder::key_mask(g, batch.mask, (batch.batch, batch.seq))?;
    for i in 0..spec.layers.len() {
        x = layer(g, m, w, i, &x, kmask.as_ref(), (batch.batch, batch.seq))?;
    }
    Ok(x)
}
