//! `dbrx` (Databricks DBRX): pre-norm layers with bias-free LayerNorms (`norm_attn_norm.norm_1`,
//! `norm_2`), one fused bias-free `Wqkv` (q, k, v rows; GQA by `attn_config.kv_n_heads`) clamped
//! to ±`attn_config.clip_qkv` when set, RoPE (half-split), and a routed MoE in every layer: softmax
//! over `ffn_config.moe_num_experts`, top `moe_top_k`, divided by their L1 norm
//! (`moe_normalize_expert_weights` 1; none: not renormalised), SwiGLU experts stored as
//! `ffn.experts.mlp.w1` (gate) and `v1` (up) `[E·F, H]` and `w2 [E·F, H]` (each expert's down
//! projection transposed), router `ffn.router.layer`; the load-balancing loss weighs
//! `moe_loss_weight`. No tied head (transformers refuses it).

use serde_json::{json, Value};
use vkformers_kernels::glu::Glu;

use super::common::{parse, BaseConfig};
use crate::error::{ModelError, Result};
use crate::moe::{MoeNames, MoeSpec, Router};
use crate::spec::{LayerNames, MapEntry, MlpSpec, ModelSpec, Norm};

fn num(cfg: &Value, key: &str, default: f64) -> f64 {
    cfg.get(key).and_then(Value::as_f64).unwrap_or(default)
}

fn int(cfg: &Value, key: &str, default: usize) -> usize {
    cfg.get(key).and_then(Value::as_u64).map_or(default, |v| v as usize)
}

const P: &str = "transformer.blocks.{i}";

fn names() -> LayerNames {
    let parts = [
        "norm_attn_norm.norm_1",
        "norm_attn_norm.attn.q",
        "norm_attn_norm.attn.k",
        "norm_attn_norm.attn.v",
        "norm_attn_norm.attn.out_proj",
        "norm_attn_norm.norm_2",
        "ffn.up_proj",
        "ffn.down_proj",
    ];
    LayerNames::plain(P, parts)
}

fn block(ffn: &Value, experts: usize, coef: Option<f32>) -> Result<MoeSpec> {
    let renormalize = match ffn.get("moe_normalize_expert_weights") {
        None => true,
        Some(Value::Null) => false,
        Some(p) if p.as_f64() == Some(1.0) => true,
        Some(p) => return Err(ModelError::Unsupported(format!("dbrx moe_normalize_expert_weights {p} (1 or null)"))),
    };
    let glu = match ffn.get("ffn_act_fn").and_then(|a| a.get("name")).and_then(Value::as_str).unwrap_or("silu") {
        "silu" => Glu::SwiGlu,
        other => return Err(ModelError::Unsupported(format!("dbrx ffn_act_fn {other}"))),
    };
    let x = format!("{P}.ffn.experts.mlp");
    let names = MoeNames::packed(
        format!("{P}.ffn.router.layer.weight"),
        format!("{x}.w1"),
        Some(format!("{x}.v1")),
        format!("{x}.w2"),
    );
    let (top_k, inter) = (int(ffn, "moe_top_k", 1), int(ffn, "ffn_hidden_size", 3584));
    let router = Router::SoftmaxTopK { renormalize };
    let m = MoeSpec {
        aux_loss_coef: coef,
        down_transposed: true,
        packed: true,
        ..MoeSpec::plain(experts, top_k, inter, glu, router, names)
    };
    m.check()?;
    Ok(m)
}

pub fn spec(cfg: &Value) -> Result<ModelSpec> {
    let (attn, ffn) = (&cfg["attn_config"], &cfg["ffn_config"]);
    if ffn.get("moe_jitter_eps").is_some_and(|v| !v.is_null()) {
        // transformers multiplies the router input by uniform noise in training mode only.
        return Err(ModelError::Unsupported(format!("dbrx moe_jitter_eps {}", ffn["moe_jitter_eps"])));
    }
    let (hidden, heads) = (int(cfg, "d_model", 2048), int(cfg, "n_heads", 16));
    let kv = int(attn, "kv_n_heads", 1);
    // The attention reads attn_config.rope_theta; a config may also carry rope_parameters.
    let theta = attn.get("rope_theta").and_then(Value::as_f64).unwrap_or(10_000.0);
    let base: BaseConfig = parse(&json!({
        "vocab_size": int(cfg, "vocab_size", 32000), "hidden_size": hidden, "num_attention_heads": heads,
        "num_key_value_heads": kv, "num_hidden_layers": int(cfg, "n_layers", 24),
        "intermediate_size": int(ffn, "ffn_hidden_size", 3584), "rms_norm_eps": 1e-5,
        "max_position_embeddings": int(cfg, "max_seq_len", 2048),
        "rope_parameters": {"rope_type": "default", "rope_theta": theta},
    }))?;
    if cfg.get("tie_word_embeddings").and_then(Value::as_bool) == Some(true) {
        return Err(ModelError::Config("dbrx with tie_word_embeddings (transformers refuses it)".into()));
    }
    let mut spec = base.llama_spec("dbrx", Glu::SwiGlu, false, false, false)?;
    let norm = Norm::Layer { eps: 1e-5, bias: false };
    super::ln_common::set_norms(&mut spec, &norm);
    spec.layer_names = names();
    spec.embed_name = "transformer.wte".into();
    spec.final_norm_name = "transformer.norm_f".into();
    let clip = attn.get("clip_qkv").and_then(Value::as_f64).filter(|&c| c != 0.0).map(|c| c as f32);
    let coef = cfg["output_router_logits"].as_bool().unwrap_or(false).then(|| num(ffn, "moe_loss_weight", 0.01) as f32);
    let moe = block(ffn, int(ffn, "moe_num_experts", 4), coef)?;
    for l in &mut spec.layers {
        l.attn.clip_qkv = clip;
        l.attn.sliding_window = None;
        l.mlp = MlpSpec::Moe(Box::new(moe.clone()));
    }
    let hd = hidden / heads;
    let parts = [("q", hidden), ("k", kv * hd), ("v", kv * hd)];
    let layers = spec.layers.len();
    spec.weight_map = MapEntry::fused_qkv(layers, &format!("{P}.norm_attn_norm.attn"), "Wqkv", parts, 1, &["weight"]);
    crate::moe::add_joins(&mut spec)?;
    Ok(spec)
}
