//! `deberta` (v1): `deberta-v2`'s model (see `deberta_v2::build`) with v1's attention weights:
//! one bias-free `attention.self.in_proj [3·H·D, hidden]` whose rows come per head as
//! `[H, (q, k, v), D]` (transformers views it `[.., H, 3D]` and chunks the last dim), plus
//! `q_bias` and `v_bias` (no key bias); `pos_proj` (no bias) and `pos_q_proj` for c2p / p2c;
//! the table's rows `max_relative_positions ± min(T, max_relative_positions)`, the same rows
//! v2 reads without buckets. The score scale counts every `pos_att_type` entry.

use serde_json::Value;

use super::bert_layout::under;
use crate::error::Result;
use crate::spec::{layer_name, MapEntry, ModelSpec};

pub fn spec(cfg: &Value) -> Result<ModelSpec> {
    let mut spec = super::deberta_v2::build(cfg, true)?;
    let prefix = if super::encoder_common::is_bare(cfg) { "" } else { "deberta" };
    let attn = under(prefix, "encoder.layer.{i}.attention.self");
    let a = &spec.layers[0].attn;
    let (heads, rows) = (a.heads, a.heads * a.head_dim);
    let parts = [("q", rows), ("k", rows), ("v", rows)];
    let mut map = MapEntry::fused_qkv(spec.layers.len(), &attn, "in_proj", parts, heads, &["weight"]);
    for i in 0..spec.layers.len() {
        let p = layer_name(&attn, i);
        for x in ["q", "v"] {
            let parts = vec![(format!("{p}.{x}.bias"), rows)];
            map.push(MapEntry { hf: format!("{p}.{x}_bias"), transpose: false, parts, groups: 1 });
        }
    }
    spec.weight_map.extend(map);
    Ok(spec)
}
