//! The generic encoder graph (BERT family): word + token-type + position embeddings and their
//! LayerNorm, L layers of bidirectional self-attention (keys masked by the attention mask) and
//! MLP with post- or pre-LN residuals, then the masked-LM head. Built from the differentiable
//! ops, so the tape gives every parameter's gradient.

mod add_norm;
mod attention;
mod bare_decoder;
mod disentangled;
mod disentangled_spec;
mod heads;
mod log_bucket;
mod masking;
mod mobile;
mod mobile_head;
mod plan;
mod pooling;
mod relative;
mod spec;

pub(crate) use bare_decoder::match_bare_decoder;
pub use disentangled_spec::{Disentangled, RelativeTable};
pub use heads::{
    classification_loss, forward, forward_loss, masked_lm_loss, masked_lm_target_loss, ClsLabels, OwnedClsLabels,
};
pub use log_bucket::log_bucket;
pub use mobile::MobileSpec;
pub(crate) use plan::{check_new_head, match_pooler, plan};
pub use pooling::{decoder_hidden_states, mean_pool, normalize_rows, pool, Pooling};
pub use relative::RelativeBias;
pub use spec::{
    ClassifierHead, ClsPooling, EmbedMasking, EncoderHead, EncoderSpec, MlmHead, NormPlacement, PoolAct, Positions,
    Problem, TokenTransform,
};

use vkformers_tensor::ops::{broadcast, embedding, matmul, shape};
use vkformers_tensor::{Graph, Tensor};

use crate::decoder::{apply_norm, mlp, Weights};
use crate::error::{ModelError, Result};
use crate::spec::{layer_name, LayerSpec, ModelSpec};
use add_norm::add_then_norm;
use attention::self_attention;

/// One batch `[B, T]`: token ids, attention mask (1 real, 0 padding) and optional token types
/// (all 0 when absent, as transformers' buffer).
pub struct EncoderBatch<'a> {
    pub ids: &'a [i32],
    pub mask: &'a [i32],
    pub token_types: Option<&'a [i32]>,
    pub batch: usize,
    pub seq: usize,
}

pub(crate) fn encoder_of(spec: &ModelSpec) -> Result<&EncoderSpec> {
    spec.encoder
        .as_ref()
        .ok_or_else(|| ModelError::Unsupported(format!("`{}` is a decoder, not an encoder", spec.model_type)))
}

/// The last hidden state `[B·T, hidden]` (what pooling and task heads read).
pub fn hidden_states(g: &Graph<'_>, spec: &ModelSpec, w: &Weights, batch: &EncoderBatch<'_>) -> Result<Tensor> {
    let enc = encoder_of(spec)?;
    let (b, t) = (batch.batch, batch.seq);
    if batch.ids.len() != b * t || batch.mask.len() != b * t || batch.token_types.is_some_and(|x| x.len() != b * t) {
        return Err(ModelError::Config(format!("a batch of {b}x{t} with {} ids", batch.ids.len())));
    }
    if let Some(m) = &enc.mobile {
        return mobile::hidden_states(g, spec, m, w, batch);
    }
    let mut x = embeddings(g, spec, enc, w, batch)?;
    let keys = relative::keys(g, spec, w, batch)?;
    let order: Vec<usize> =
        if enc.layer_order.is_empty() { (0..spec.layers.len()).collect() } else { enc.layer_order.clone() };
    for i in order {
        let layer = spec.layers.get(i).ok_or_else(|| ModelError::Config(format!("no stored layer {i} to run")))?;
        x = encoder_layer(g, spec, enc.placement, w, layer, i, &x, &keys, (b, t))?;
    }
    if let Some((n, name)) = &enc.final_norm {
        x = apply_norm(g, n, w, name, &x)?;
    }
    Ok(x)
}

/// Position ids `[B·T]` of the batch (see `Positions`).
fn position_ids(positions: Positions, batch: &EncoderBatch<'_>) -> Vec<i32> {
    let t = batch.seq;
    match positions {
        Positions::Arange => (0..batch.batch * t).map(|i| (i % t) as i32).collect(),
        Positions::FromIds { padding_idx } => {
            let pad = padding_idx as i32;
            let mut out = Vec::with_capacity(batch.ids.len());
            for row in batch.ids.chunks(t) {
                let mut seen = 0;
                for &id in row {
                    let real = i32::from(id != pad);
                    seen += real;
                    out.push(seen * real + pad);
                }
            }
            out
        }
    }
}

/// `LN(word[ids] + type[types] + pos[positions])`, then ELECTRA's projection: `[B·T, hidden]`.
fn embeddings(
    g: &Graph<'_>,
    spec: &ModelSpec,
    enc: &EncoderSpec,
    w: &Weights,
    batch: &EncoderBatch<'_>,
) -> Result<Tensor> {
    let (b, t, e) = (batch.batch, batch.seq, enc.embed_dim);
    let rows = |x: Tensor| shape::reshape(g, &x, &[b * t, e]);
    let ids = g.ints(batch.ids, &[b, t])?;
    let word = w.get(&format!("{}.weight", spec.embed_name))?;
    let mut x = rows(embedding::embedding_padded(g, word, &ids, spec.padding_idx)?)?;
    if let Some(mask_id) = enc.masking.token_dropout {
        x = masking::scale_rows(g, &x, &masking::token_dropout_scale(batch, mask_id)?)?;
    }
    if let Some((name, type_vocab)) = &enc.token_types {
        let zeros;
        let types = match batch.token_types {
            Some(tt) => tt,
            None => {
                zeros = vec![0; b * t];
                &zeros[..]
            }
        };
        if let Some(bad) = types.iter().find(|&&v| v < 0 || v as usize >= *type_vocab) {
            return Err(ModelError::Config(format!("token type {bad} outside type_vocab_size {type_vocab}")));
        }
        let table = w.get(&format!("{name}.weight"))?;
        x = broadcast::add(g, &x, &rows(embedding::embedding(g, table, &g.ints(types, &[b, t])?)?)?)?;
    }
    if let Some(wpe) = &spec.position_embedding {
        let table = w.get(&format!("{wpe}.weight"))?;
        let pos = position_ids(enc.positions, batch);
        if let Some(bad) = pos.iter().find(|&&p| p < 0 || p as usize >= table.shape()[0]) {
            return Err(ModelError::Config(format!(
                "position {bad} outside `{wpe}` {:?} (the sequence is longer than max_position_embeddings)",
                table.shape()
            )));
        }
        let pad = match enc.positions {
            Positions::FromIds { padding_idx } => Some(padding_idx),
            Positions::Arange => None,
        };
        let p = rows(embedding::embedding_padded(g, table, &g.ints(&pos, &[b, t])?, pad)?)?;
        // LN(x + pos): the add and a LayerNorm fused in inference, as a post-LN residual.
        x = add_then_norm(g, w, &spec.embed_norm, &spec.embed_norm_name, (&x, &p))?;
    } else if let Some(n) = &spec.embed_norm {
        x = apply_norm(g, n, w, &spec.embed_norm_name, &x)?;
    }
    if enc.masking.zero_padding {
        x = masking::scale_rows(g, &x, &masking::padding_column(batch))?;
    }
    if let Some(p) = &enc.embed_project {
        x = matmul::linear(g, &x, w.get(&format!("{p}.weight"))?, Some(w.get(&format!("{p}.bias"))?))?;
    }
    Ok(x)
}

/// One layer on x `[B·T, hidden]`; the norms are the layer's `attn_norm` / `mlp_norm`, applied
/// after (post-LN) or before (pre-LN) each residual add.
#[allow(clippy::too_many_arguments)]
fn encoder_layer(
    g: &Graph<'_>,
    spec: &ModelSpec,
    placement: NormPlacement,
    w: &Weights,
    layer: &LayerSpec,
    i: usize,
    x: &Tensor,
    keys: &relative::Keys,
    bt: (usize, usize),
) -> Result<Tensor> {
    let n = &spec.layer_names;
    let norm = |which: &Option<crate::spec::Norm>, template: &str, x: &Tensor| match which {
        Some(nm) => apply_norm(g, nm, w, &layer_name(template, i), x),
        None => Ok(x.clone()),
    };
    match placement {
        NormPlacement::Post => {
            // norm(x + sublayer(x)); the add and a LayerNorm fused in inference (add_norm).
            let a = self_attention(g, spec, w, layer, i, x, keys, bt)?;
            let x = add_then_norm(g, w, &layer.attn_norm, &layer_name(&n.attn_norm, i), (x, &a))?;
            let m = mlp(g, spec, w, &layer.mlp, i, &x)?;
            add_then_norm(g, w, &layer.mlp_norm, &layer_name(&n.mlp_norm, i), (&x, &m))
        }
        NormPlacement::Pre => {
            let h = norm(&layer.attn_norm, &n.attn_norm, x)?;
            let x = broadcast::add(g, x, &self_attention(g, spec, w, layer, i, &h, keys, bt)?)?;
            let h = norm(&layer.mlp_norm, &n.mlp_norm, &x)?;
            Ok(broadcast::add(g, &x, &mlp(g, spec, w, &layer.mlp, i, &h)?)?)
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn batch<'a>(ids: &'a [i32], mask: &'a [i32], seq: usize) -> EncoderBatch<'a> {
        EncoderBatch { ids, mask, token_types: None, batch: ids.len() / seq, seq }
    }

    #[test]
    fn roberta_positions_count_non_pad_ids_from_padding_idx_plus_one() {
        // transformers: `cumsum(ids != pad) * (ids != pad) + pad`, from the ids alone: a pad id
        // inside the text keeps position `pad` and does not advance the count; the mask is not read.
        let ids = [5, 6, 7, 1, 1, 9, 1, 8];
        let mask = [1, 1, 1, 1, 0, 1, 1, 1];
        let got = position_ids(Positions::FromIds { padding_idx: 1 }, &batch(&ids, &mask, 4));
        assert_eq!(got, vec![2, 3, 4, 1, 1, 2, 1, 3]);
    }

    #[test]
    fn bert_positions_are_0_to_t_in_every_row() {
        let ids = [5, 6, 0, 7, 8, 9];
        let got = position_ids(Positions::Arange, &batch(&ids, &[1; 6], 3));
        assert_eq!(got, vec![0, 1, 2, 0, 1, 2]);
    }
}
