//! The parameters (internal names, shapes, init) the encoder graph reads: the one list that
//! init, the load check and save agree on (see `init.rs`).

use std::collections::{HashMap, HashSet};
use std::path::Path;

use serde_json::Value;
use vkformers_io::ModelWeights;

use super::{EncoderHead, EncoderSpec};
use crate::error::{ModelError, Result};
use crate::init::{linear, mlp_params, norm_params, qkv_params, Init, Planned};
use crate::spec::{layer_name, MlpSpec, ModelSpec};
use crate::weights::internal_shapes;

/// What a folder gives a model with a new task head: the stored parameters that are kept (name
/// -> shape), the head's parameters to draw, and the stored tensors that are left out (the old
/// head's). Anything else the config needs but the folder lacks, and any kept tensor of another
/// shape, is an error.
pub(crate) type NewHeadPlan = (HashMap<String, Vec<usize>>, Vec<Planned>, Vec<String>);

pub(crate) fn check_new_head(spec: &ModelSpec, config: &Value, file: &ModelWeights, dir: &Path) -> Result<NewHeadPlan> {
    let enc = spec.encoder.as_ref().ok_or_else(|| ModelError::Config("a new task head needs an encoder".into()))?;
    let mut head_params = Vec::new();
    head(&mut head_params, spec, enc);
    let head_names: HashSet<String> = head_params.into_iter().map(|p| p.name).collect();
    let planned = plan(spec, config)?;
    let found = crate::model::stored_params(spec, file)?;
    let (mut fresh, mut problems) = (Vec::new(), Vec::new());
    let known: HashSet<String> = planned.iter().map(|p| p.name.clone()).collect();
    for p in planned {
        match found.get(&p.name) {
            None if head_names.contains(&p.name) => fresh.push(p),
            None => problems.push(format!("missing tensor `{}` {:?}", p.name, p.shape)),
            Some(s) if *s != p.shape => problems.push(format!(
                "`{}` has shape {s:?}, the new head needs {:?} (another number of labels? start from the base \
                 model's folder)",
                p.name, p.shape
            )),
            Some(_) => {}
        }
    }
    if !problems.is_empty() {
        return Err(ModelError::Weights(format!(
            "{} cannot take the `{}` head:\n  {}",
            dir.display(),
            crate::archs::encoder_common::first_architecture(config),
            problems.join("\n  ")
        )));
    }
    // A stored tensor is left out when none of the parameters it holds is one this model reads.
    let mut unexpected = Vec::new();
    for info in file.tensors() {
        let parts = internal_shapes(spec, &info.name, &info.shape)?;
        if !parts.is_empty() && parts.iter().all(|(n, _)| !known.contains(n)) {
            unexpected.push(info.name.clone());
        }
    }
    let kept = found.into_iter().filter(|(n, _)| known.contains(n)).collect();
    Ok((kept, fresh, unexpected))
}

/// Every parameter of an encoder spec, in the order transformers lists them.
/// A bare encoder whose checkpoint stores no pooler (`BertModel(add_pooling_layer=False)`, and the
/// sentence-transformers exports made from one) loads without it: embeddings never read it, and
/// transformers would only draw it at random. A checkpoint that stores it keeps it.
pub(crate) fn match_pooler<'a>(spec: &mut ModelSpec, mut stored: impl Iterator<Item = &'a str>) {
    let Some(enc) = spec.encoder.as_mut() else { return };
    let EncoderHead::Bare { pooler } = &mut enc.head else { return };
    let Some(weight) = pooler.as_deref().map(|p| format!("{p}.weight")) else { return };
    if !stored.any(|n| n == weight) {
        *pooler = None;
    }
}

pub(crate) fn plan(spec: &ModelSpec, _config: &Value) -> Result<Vec<Planned>> {
    let enc = spec.encoder.as_ref().ok_or_else(|| ModelError::Config("not an encoder".into()))?;
    let (h, e) = (spec.hidden, enc.embed_dim);
    let table =
        |name: &str, rows: usize| Planned { name: format!("{name}.weight"), shape: vec![rows, e], init: Init::Normal };
    let mut out = vec![table(&spec.embed_name, spec.vocab)];
    if let Some(m) = &enc.mobile {
        let types = enc.token_types.as_ref().map_or(0, |t| t.1);
        super::mobile_head::plan(&mut out, spec, m, e, enc.max_positions, types);
    } else {
        generic_body(&mut out, spec, enc);
    }
    if let Some((n, name)) = &enc.final_norm {
        norm_params(&mut out, name, n, h);
    }
    head(&mut out, spec, enc);
    for (name, rows, width) in &enc.stored_tables {
        out.push(Planned { name: format!("{name}.weight"), shape: vec![*rows, *width], init: Init::Sinusoid });
    }
    if let Some(r) = &enc.relative_bias {
        let heads = spec.layers.first().map_or(0, |l| l.attn.heads);
        out.push(Planned { name: format!("{}.weight", r.table), shape: vec![r.rows, heads], init: Init::Normal });
    }
    if enc.disentangled.as_ref().is_some_and(|d| !d.key_bias) {
        // DeBERTa v1's key projection has no bias (its `in_proj` has none; q and v add theirs).
        let keys: HashSet<String> =
            (0..spec.layers.len()).map(|i| format!("{}.bias", layer_name(&spec.layer_names.k, i))).collect();
        out.retain(|p| !keys.contains(&p.name));
    }
    if let Some(r) = enc.disentangled.as_ref().and_then(|d| d.relative.as_ref()) {
        out.push(Planned { name: format!("{}.weight", r.table), shape: vec![2 * r.span, h], init: Init::Normal });
        if let Some((n, name)) = &r.norm {
            norm_params(&mut out, name, n, h);
        }
        for i in (0..spec.layers.len()).filter(|_| !r.share_att_key) {
            let a = &spec.layers[i].attn;
            let hd = a.heads * a.head_dim;
            if r.c2p {
                linear(&mut out, &layer_name(&r.pos_key, i), hd, h, r.pos_key_bias);
            }
            if r.p2c {
                linear(&mut out, &layer_name(&r.pos_query, i), hd, h, true);
            }
        }
    }
    for (name, rows, cols) in &enc.unread_linears {
        linear(&mut out, name, *rows, *cols, true);
    }
    Ok(out)
}

/// The generic embeddings (positions, token types, norm, projection) and layers.
fn generic_body(out: &mut Vec<Planned>, spec: &ModelSpec, enc: &EncoderSpec) {
    let (h, e) = (spec.hidden, enc.embed_dim);
    let table =
        |name: &str, rows: usize| Planned { name: format!("{name}.weight"), shape: vec![rows, e], init: Init::Normal };
    if let Some(wpe) = &spec.position_embedding {
        out.push(table(wpe, enc.max_positions));
    }
    if let Some((name, rows)) = &enc.token_types {
        out.push(table(name, *rows));
    }
    if let Some(n) = &spec.embed_norm {
        norm_params(out, &spec.embed_norm_name, n, e);
    }
    if let Some(p) = &enc.embed_project {
        linear(out, p, h, e, true);
    }
    layers(out, spec);
}

fn layers(out: &mut Vec<Planned>, spec: &ModelSpec) {
    let (names, h) = (&spec.layer_names, spec.hidden);
    for (i, l) in spec.layers.iter().enumerate() {
        let a = &l.attn;
        qkv_params(out, names, a, i, h);
        linear(out, &layer_name(&names.o, i), h, a.heads * a.head_dim, a.out_bias);
        if let Some(n) = &l.attn_norm {
            norm_params(out, &layer_name(&names.attn_norm, i), n, h);
        }
        match &l.mlp {
            // Encoders are built with plain MLPs; the graph refuses other kinds by name.
            MlpSpec::Moe(_) | MlpSpec::Xielu { .. } => {}
            MlpSpec::Gated { intermediate, bias, .. } | MlpSpec::GatedAct { intermediate, bias, .. } => {
                mlp_params(out, names, i, (h, *intermediate), *bias, true)
            }
            MlpSpec::Plain { intermediate, bias, .. } => mlp_params(out, names, i, (h, *intermediate), *bias, false),
        }
        if let Some(n) = &l.mlp_norm {
            norm_params(out, &layer_name(&names.mlp_norm, i), n, h);
        }
    }
}

/// The masked-LM head (dense `[E, H]`, its norm, the decoder bias and, untied, weight) or the
/// classifier (dense `[H, H]`, out `[num_labels, H]`).
fn head(out: &mut Vec<Planned>, spec: &ModelSpec, enc: &EncoderSpec) {
    let (e, h) = (enc.embed_dim, spec.hidden);
    match &enc.head {
        EncoderHead::MaskedLm(head) => {
            if !head.bias.is_empty() {
                out.push(Planned { name: head.bias.clone(), shape: vec![spec.vocab], init: Init::Zeros });
            }
            // MobileBERT's transform keeps the hidden width; its decoder adds `[H − E, V]` rows.
            let width = if enc.mobile.is_some() { h } else { e };
            if !head.dense.is_empty() {
                linear(out, &head.dense, width, h, head.dense_bias);
                norm_params(out, &head.norm_name, &head.norm, width);
            }
            if enc.mobile.is_some() && h > e {
                let name = format!("{}.weight", super::mobile_head::MLM_DENSE);
                out.push(Planned { name, shape: vec![h - e, spec.vocab], init: Init::Normal });
            }
            if !spec.tied_head {
                linear(out, &spec.head_name, spec.vocab, e, false);
            }
        }
        EncoderHead::SequenceClassification(head) => {
            linear(out, &head.dense, h, h, head.dense_bias);
            if let Some((n, name)) = &head.norm {
                norm_params(out, name, n, h);
            }
            linear(out, &head.out, head.num_labels, h, true);
        }
        EncoderHead::TokenClassification { out: name, num_labels, transform } => {
            if let Some(t) = transform {
                linear(out, &t.dense, h, h, t.dense_bias);
                norm_params(out, &t.norm.1, &t.norm.0, h);
            }
            linear(out, name, *num_labels, h, true)
        }
        EncoderHead::Bare { pooler } => {
            if let Some(p) = pooler {
                linear(out, p, h, h, true);
            }
        }
    }
}
