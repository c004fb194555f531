//! The parameters (internal names, shapes, init) the encoder graph reads: the one list that
//! init, the load check and save agree on (see `init.rs`).

use serde_json::Value;

use super::{EncoderHead, EncoderSpec};
use crate::error::{ModelError, Result};
use crate::init::{linear, norm_params, Init, Planned};
use crate::spec::{layer_name, MlpSpec, ModelSpec};

/// Every parameter of an encoder spec, in the order transformers lists them.
pub(crate) fn plan(spec: &ModelSpec, _config: &Value) -> Result<Vec<Planned>> {
    let enc = spec.encoder.as_ref().ok_or_else(|| ModelError::Config("not an encoder".into()))?;
    let (h, e) = (spec.hidden, enc.embed_dim);
    let table =
        |name: &str, rows: usize| Planned { name: format!("{name}.weight"), shape: vec![rows, e], init: Init::Normal };
    let mut out = vec![table(&spec.embed_name, spec.vocab)];
    if let Some(wpe) = &spec.position_embedding {
        out.push(table(wpe, enc.max_positions));
    }
    if let Some((name, rows)) = &enc.token_types {
        out.push(table(name, *rows));
    }
    if let Some(n) = &spec.embed_norm {
        norm_params(&mut out, &spec.embed_norm_name, n, e);
    }
    if let Some(p) = &enc.embed_project {
        linear(&mut out, p, h, e, true);
    }
    layers(&mut out, spec);
    if let Some((n, name)) = &enc.final_norm {
        norm_params(&mut out, name, n, h);
    }
    head(&mut out, spec, enc);
    Ok(out)
}

fn layers(out: &mut Vec<Planned>, spec: &ModelSpec) {
    let (names, h) = (&spec.layer_names, spec.hidden);
    for (i, l) in spec.layers.iter().enumerate() {
        let a = &l.attn;
        let (q, kv) = (a.heads * a.head_dim, a.kv_heads * a.head_dim);
        linear(out, &layer_name(&names.q, i), q, h, a.qkv_bias);
        linear(out, &layer_name(&names.k, i), kv, h, a.qkv_bias);
        linear(out, &layer_name(&names.v, i), kv, h, a.qkv_bias);
        linear(out, &layer_name(&names.o, i), h, q, a.out_bias);
        if let Some(n) = &l.attn_norm {
            norm_params(out, &layer_name(&names.attn_norm, i), n, h);
        }
        match &l.mlp {
            // Encoders are built with plain MLPs; the graph refuses other kinds by name.
            MlpSpec::Moe(_) | MlpSpec::Xielu { .. } => {}
            MlpSpec::Gated { intermediate, bias, .. } | MlpSpec::GatedAct { intermediate, bias, .. } => {
                linear(out, &layer_name(&names.gate, i), *intermediate, h, *bias);
                linear(out, &layer_name(&names.up, i), *intermediate, h, *bias);
                linear(out, &layer_name(&names.down, i), h, *intermediate, *bias);
            }
            MlpSpec::Plain { intermediate, bias, .. } => {
                linear(out, &layer_name(&names.up, i), *intermediate, h, *bias);
                linear(out, &layer_name(&names.down, i), h, *intermediate, *bias);
            }
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
            out.push(Planned { name: head.bias.clone(), shape: vec![spec.vocab], init: Init::Zeros });
            linear(out, &head.dense, e, h, true);
            norm_params(out, &head.norm_name, &head.norm, e);
            if !spec.tied_head {
                linear(out, &spec.head_name, spec.vocab, e, false);
            }
        }
        EncoderHead::SequenceClassification(head) => {
            linear(out, &head.dense, h, h, true);
            linear(out, &head.out, head.num_labels, h, true);
        }
        EncoderHead::TokenClassification { out: name, num_labels } => linear(out, name, *num_labels, h, true),
        EncoderHead::Bare { pooler } => {
            if let Some(p) = pooler {
                linear(out, p, h, h, true);
            }
        }
    }
}
