//! `phi3` (Phi-3, Phi-3.5, Phi-4-mini): Llama with one fused `qkv_proj` (q rows, then k, then v;
//! GQA sizes) and one fused `gate_up_proj` (gate rows, then up rows), both split on load and
//! joined on save. RoPE is usually LongRoPE: the top-level `original_max_position_embeddings` wins
//! over the one in `rope_parameters` (as in `Phi3Config`), and the old `su` / `yarn` type names
//! mean `longrope`. Only the short factors are used (sequences up to the original context).

use serde::Deserialize;
use serde_json::Value;

use super::common::{parse, BaseConfig};
use super::ln_common::rotary_factor;
use crate::error::Result;
use crate::spec::{MapEntry, ModelSpec};

#[derive(Deserialize)]
struct Config {
    #[serde(flatten)]
    base: BaseConfig,
    original_max_position_embeddings: Option<u64>,
}

/// `qkv_proj` into q, k, v and `gate_up_proj` into gate, up (all row-contiguous).
fn weight_map(layers: usize, q_rows: usize, kv_rows: usize, inter: usize) -> Vec<MapEntry> {
    let mut map = Vec::new();
    for i in 0..layers {
        let p = format!("model.layers.{i}");
        let a = format!("{p}.self_attn");
        map.push(MapEntry {
            hf: format!("{a}.qkv_proj.weight"),
            transpose: false,
            parts: vec![
                (format!("{a}.q_proj.weight"), q_rows),
                (format!("{a}.k_proj.weight"), kv_rows),
                (format!("{a}.v_proj.weight"), kv_rows),
            ],
            groups: 1,
        });
        map.push(MapEntry {
            hf: format!("{p}.mlp.gate_up_proj.weight"),
            transpose: false,
            parts: vec![(format!("{p}.mlp.gate_proj.weight"), inter), (format!("{p}.mlp.up_proj.weight"), inter)],
            groups: 1,
        });
    }
    map
}

pub fn spec(cfg: &Value) -> Result<ModelSpec> {
    let mut c: Config = parse(cfg)?;
    c.base.partial_rotary_factor = Some(rotary_factor(cfg, 1.0));
    let mut rope = c.base.rope_parameters.take().or_else(|| c.base.rope_scaling.take()).unwrap_or(Value::Null);
    if let Value::Object(r) = &mut rope {
        let ty = r.get("rope_type").or_else(|| r.get("type")).and_then(Value::as_str).unwrap_or("default");
        if matches!(ty, "su" | "yarn" | "longrope") {
            r.insert("rope_type".into(), "longrope".into());
            let original = c.original_max_position_embeddings.unwrap_or(4096);
            r.insert("original_max_position_embeddings".into(), original.into());
        }
    }
    c.base.rope_parameters = Some(rope).filter(|r| !r.is_null());
    let glu = c.base.glu("silu")?;
    let mut spec = c.base.llama_spec("phi3", glu, false, false, false)?;
    // phi3's config class defaults pad_token_id to 32000.
    spec.padding_idx = crate::spec::padding_idx_or(cfg, 32000, spec.vocab);
    let hd = c.base.head_dim();
    spec.weight_map = weight_map(
        c.base.num_hidden_layers,
        c.base.num_attention_heads * hd,
        c.base.kv_heads() * hd,
        c.base.intermediate_size,
    );
    Ok(spec)
}
