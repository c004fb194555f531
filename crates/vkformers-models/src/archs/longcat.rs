//! `longcat_flash` (LongCat-Flash): each of `num_layers` layers is two sublayers of DeepSeek-V3's
//! multi-head latent attention (interleaved RoPE, always low-rank queries) and a dense gated MLP
//! (`ffn_hidden_size`), plus one shortcut MoE with zero-computation experts (`decoder::longcat`).
//! Its MLA scales the query by `sqrt(hidden / q_lora_rank)` (folded into the softmax scale: the
//! scores are linear in q) and the normed latent by `sqrt(hidden / kv_lora_rank)`.
//!
//! The spec's layers are the sublayers, `model.sublayers.{j}.*` inside (j = 2L + s), stored as
//! transformers names them: `model.layers.{L}.self_attn.{s}.*`, `mlps.{s}.*`,
//! `input_layernorm.{s}`, `post_attention_layernorm.{s}` (single-part weight-map entries).

use serde::Deserialize;
use serde_json::Value;
use vkformers_kernels::rope::RopeLayout;

use super::common::parse;
use super::mla_common::{q_lora_rank, set_attn, LlamaMlaConfig};
use crate::decoder::ShortcutMoe;
use crate::error::{ModelError, Result};
use crate::spec::{LayerNames, MapEntry, MlaNames, ModelSpec};

#[derive(Deserialize)]
struct Config {
    #[serde(flatten)]
    lm: LlamaMlaConfig,
    // LongcatFlashConfig's defaults where absent: 512, 12, 2048, 6.0.
    n_routed_experts: Option<usize>,
    moe_topk: Option<usize>,
    expert_ffn_hidden_size: Option<usize>,
    routed_scaling_factor: Option<f64>,
    #[serde(default)]
    router_bias: bool,
    qk_head_dim: Option<usize>,
}

/// `cfg` with the fields `BaseConfig` reads: `2 · num_layers` sublayers of `ffn_hidden_size`.
fn normalised(cfg: &Value) -> Result<Value> {
    let mut cfg = cfg.clone();
    let field = |k: &str, default: u64| cfg.get(k).filter(|v| !v.is_null()).map_or(Some(default), Value::as_u64);
    let (Some(layers), Some(ffn)) = (field("num_layers", 28), field("ffn_hidden_size", 12288)) else {
        return Err(ModelError::Config("longcat_flash `num_layers` and `ffn_hidden_size` must be integers".into()));
    };
    if layers == 0 || layers > 1 << 12 {
        return Err(ModelError::Config(format!("longcat_flash `num_layers` is {layers}; it must be 1 to 4096")));
    }
    cfg["num_hidden_layers"] = (2 * layers).into();
    cfg["intermediate_size"] = ffn.into();
    Ok(cfg)
}

/// Internal sublayer name `model.sublayers.{j}.{module}` <-> stored name of each weight.
fn sublayer_map(sublayers: usize, bias: bool) -> Vec<MapEntry> {
    let mut modules: Vec<(String, &str)> = vec![
        ("input_layernorm".into(), "weight"),
        ("post_attention_layernorm".into(), "weight"),
        ("self_attn.q_a_layernorm".into(), "weight"),
        ("self_attn.q_b_proj".into(), "weight"),
        ("self_attn.kv_a_layernorm".into(), "weight"),
        ("self_attn.kv_b_proj".into(), "weight"),
    ];
    for m in ["self_attn.q_a_proj", "self_attn.kv_a_proj_with_mqa", "self_attn.o_proj"] {
        modules.push((m.into(), "weight"));
        if bias {
            modules.push((m.into(), "bias"));
        }
    }
    modules.extend(["gate_proj", "up_proj", "down_proj"].map(|p| (format!("mlp.{p}"), "weight")));
    let mut map = Vec::new();
    for j in 0..sublayers {
        let (l, s) = (j / 2, j % 2);
        for (module, suffix) in &modules {
            let stored = match module.split_once('.') {
                None => format!("model.layers.{l}.{module}.{s}.{suffix}"),
                Some(("mlp", rest)) => format!("model.layers.{l}.mlps.{s}.{rest}.{suffix}"),
                Some((attn, rest)) => format!("model.layers.{l}.{attn}.{s}.{rest}.{suffix}"),
            };
            let internal = format!("model.sublayers.{j}.{module}.{suffix}");
            map.push(MapEntry { hf: stored, transpose: false, parts: vec![(internal, 0)], groups: 1 });
        }
    }
    map
}

/// The shortcut MoE; `z` identity experts (transformers reads `zero_expert_num or 0`: null is none,
/// a missing key the class default 256).
fn shortcut_moe(c: &Config, z: usize, glu: vkformers_kernels::glu::Glu) -> Result<ShortcutMoe> {
    if c.router_bias {
        return Err(ModelError::Unsupported("longcat_flash with `router_bias` (a bias on the router)".into()));
    }
    let e = c.n_routed_experts.unwrap_or(512);
    let top_k = c.moe_topk.unwrap_or(12);
    if e == 0 || top_k > e {
        return Err(ModelError::Config(format!(
            "longcat_flash chooses moe_topk {top_k} of n_routed_experts {e}: it needs at least moe_topk routed experts"
        )));
    }
    let sizes = (e, z, top_k, c.expert_ffn_hidden_size.unwrap_or(2048));
    ShortcutMoe::new(sizes, glu, c.routed_scaling_factor.unwrap_or(6.0) as f32)
}

pub fn spec(cfg: &Value) -> Result<ModelSpec> {
    let cfg = normalised(cfg)?;
    let c: Config = parse(&cfg)?;
    let (b, mla) = (&c.lm.base, &c.lm.mla);
    let (dn, dr) = (mla.qk_nope_head_dim, mla.qk_rope_head_dim);
    // transformers sizes the rotary embedding by `head_dim`, and q's heads by `qk_head_dim`.
    // (Checked: the sum of two config values may overflow; fuzz/regressions/config.)
    if b.head_dim.is_some_and(|d| d != dr) || c.qk_head_dim.is_some_and(|d| Some(d) != dn.checked_add(dr)) {
        return Err(ModelError::Config(format!(
            "longcat_flash head_dim {:?} / qk_head_dim {:?}: they must be qk_rope_head_dim ({dr}) and \
             qk_nope_head_dim + qk_rope_head_dim ({})",
            b.head_dim,
            c.qk_head_dim,
            dn.saturating_add(dr)
        )));
    }
    let Some(q_rank) = q_lora_rank(&cfg, Some(1536))? else {
        return Err(ModelError::Config("longcat_flash needs a q_lora_rank (its queries are always low-rank)".into()));
    };
    let (mut spec, glu) = c.lm.llama_spec("longcat_flash")?;
    let mut attn = mla.attn(b, RopeLayout::Interleaved, 128, Some(q_rank))?;
    let hidden = b.hidden_size as f64;
    attn.scale *= (hidden / q_rank as f64).sqrt() as f32;
    let prefix = "model.sublayers.{i}";
    if let Some(m) = attn.mla.as_mut() {
        m.latent_scale = (hidden / mla.kv_lora_rank as f64).sqrt() as f32;
        let d = MlaNames::deepseek();
        let at = |n: &str| n.replace("model.layers.{i}", prefix);
        m.names = MlaNames {
            q_a: at(&d.q_a),
            q_a_norm: at(&d.q_a_norm),
            q_b: at(&d.q_b),
            kv_a: at(&d.kv_a),
            kv_a_norm: at(&d.kv_a_norm),
            kv_b: at(&d.kv_b),
        };
    }
    set_attn(&mut spec, &attn);
    spec.layer_names = LayerNames::llama().map(|n| n.replace("model.layers.{i}", prefix));
    spec.weight_map = sublayer_map(spec.layers.len(), b.attention_bias);
    let z = match cfg.get("zero_expert_num") {
        None => 256,
        Some(Value::Null) => 0,
        Some(v) => v.as_u64().filter(|&z| z <= 1 << 16).ok_or_else(|| {
            ModelError::Config(format!("longcat_flash `zero_expert_num` is {v}; it must be an integer to 65536"))
        })? as usize,
    };
    let sc = shortcut_moe(&c, z, glu)?;
    spec.joins.extend((0..spec.layers.len() / 2).flat_map(|i| sc.joins(i)));
    spec.shortcut_moe = Some(Box::new(sc));
    Ok(spec)
}
