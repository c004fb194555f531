//! The parameters (internal names, shapes, init) the encoder-decoder graph reads: the one list
//! that init, the load check and save agree on (see `init.rs`).

use serde_json::Value;

use super::{seq2seq_of, StackEnds, StackPositions};
use crate::error::Result;
use crate::init::{linear, mlp_params, norm_params, qkv_params, Init, Planned};
use crate::spec::{layer_name, LayerNames, LayerSpec, MlpSpec, ModelSpec};

/// Every parameter of an encoder-decoder spec: the shared embedding, each stack's ends and
/// layers (the decoder's with their cross-attention), the untied head, the logits bias buffer.
pub(crate) fn plan(spec: &ModelSpec, config: &Value) -> Result<Vec<Planned>> {
    let s = seq2seq_of(spec)?;
    let h = spec.hidden;
    let mut out =
        vec![Planned { name: format!("{}.weight", spec.embed_name), shape: vec![spec.vocab, h], init: Init::Normal }];
    let max_pos = config["max_position_embeddings"].as_u64().unwrap_or(0) as usize + s.position_offset;
    let heads = spec.layers.first().map_or(0, |l| l.attn.heads);
    let buckets = s.relative_bias.map_or(0, |r| r.num_buckets);
    let stack = |out: &mut Vec<Planned>, ends: &StackEnds, layers: &[LayerSpec], names: &LayerNames, cross: bool| {
        if let Some(e) = &ends.embed {
            out.push(Planned { name: format!("{e}.weight"), shape: vec![spec.vocab, h], init: Init::Normal });
        }
        if let Some(StackPositions::Learned(p)) = &ends.positions {
            out.push(Planned { name: format!("{p}.weight"), shape: vec![max_pos, h], init: Init::Normal });
        }
        if let Some((n, name)) = &ends.embed_norm {
            norm_params(out, name, n, h);
        }
        for (i, l) in layers.iter().enumerate() {
            attention(out, names, l, i, h);
            if let (Some(t), Some(r)) = (&ends.relative_bias, s.relative_bias) {
                if i == 0 || r.per_layer {
                    out.push(Planned {
                        name: format!("{}.weight", layer_name(t, i)),
                        shape: vec![buckets, heads],
                        init: Init::Normal,
                    });
                }
            }
            let mut norms = vec![(&l.attn_norm, &names.attn_norm), (&l.post_attn_norm, &names.post_attn_norm)];
            if cross {
                let c = &s.cross;
                let cn = LayerNames { q: c.q.clone(), k: c.k.clone(), v: c.v.clone(), o: c.o.clone(), ..names.clone() };
                attention(out, &cn, l, i, h);
                norms.extend([(&l.attn_norm, &c.norm), (&l.post_attn_norm, &c.post_norm)]);
            }
            match &s.switch {
                Some(sw) if sw.is_sparse(cross, i) => super::switch::plan_layer(out, sw, cross, i, h),
                _ => mlp(out, names, &l.mlp, i, h),
            }
            norms.extend([(&l.mlp_norm, &names.mlp_norm), (&l.post_mlp_norm, &names.post_mlp_norm)]);
            for (n, template) in norms {
                if let Some(n) = n {
                    norm_params(out, &layer_name(template, i), n, h);
                }
            }
        }
        if let Some((n, name)) = &ends.final_norm {
            norm_params(out, name, n, h);
        }
    };
    stack(&mut out, &s.encoder, &s.encoder_layers, &s.encoder_names, false);
    stack(&mut out, &s.decoder, &spec.layers, &spec.layer_names, true);
    if !spec.tied_head {
        linear(&mut out, &spec.head_name, spec.vocab, h, false);
    }
    for (t, rows) in &s.stored_tables {
        out.push(Planned { name: format!("{t}.weight"), shape: vec![*rows, h], init: Init::Sinusoid });
    }
    if let Some(b) = &s.final_logits_bias {
        out.push(Planned { name: b.clone(), shape: vec![1, spec.vocab], init: Init::Zeros });
    }
    Ok(out)
}

fn attention(out: &mut Vec<Planned>, names: &LayerNames, l: &LayerSpec, i: usize, h: usize) {
    let a = &l.attn;
    qkv_params(out, names, a, i, h);
    linear(out, &layer_name(&names.o, i), h, a.heads * a.head_dim, a.out_bias);
}

fn mlp(out: &mut Vec<Planned>, names: &LayerNames, m: &MlpSpec, i: usize, h: usize) {
    match m {
        MlpSpec::Gated { intermediate, bias, .. } => mlp_params(out, names, i, (h, *intermediate), *bias, true),
        MlpSpec::Plain { intermediate, bias, .. } => mlp_params(out, names, i, (h, *intermediate), *bias, false),
        // The graph refuses the other kinds by name.
        MlpSpec::GatedAct { .. } | MlpSpec::Moe(_) | MlpSpec::Xielu { .. } => {}
    }
}
