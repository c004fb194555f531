//! `nanochat` (Karpathy's nanochat): Llama-shaped with weightless RMSNorms everywhere (also one on
//! the embeddings before the first layer, the same `model.norm` module as the final norm), a
//! weightless per-head RMSNorm of q and k **after** RoPE, a RoPE whose `rotate_half` returns
//! `[x2, −x1]` (the usual rotation by the negated angle, so the inverse frequencies are negated),
//! a bias-free ReLU² MLP `fc1`/`fc2`, optional q/k/v/o biases (`attention_bias`), and a final
//! logit softcap (`final_logit_softcapping`, default 15).
//! `hunyuan_v1_dense` (Tencent Hunyuan dense): Llama with a per-head RMSNorm of q and k after
//! RoPE (`query_layernorm`, `key_layernorm`), bias-free MLP, and the fixed NTK-alpha RoPE
//! (`rope_type` "dynamic" with `alpha`: base `θ · α^(d/(d−2))`).

use serde_json::Value;
use vkformers_kernels::activation::Activation;
use vkformers_kernels::glu::Glu;
use vkformers_kernels::rope::RopeLayout;

use super::common::{parse, BaseConfig};
use super::ln_common::plain_act;
use crate::error::Result;
use crate::rope::RopeParams;
use crate::spec::{padding_idx_or, MlpSpec, ModelSpec, Norm, QkNormAt, ResidualInit, RopeSpec};

pub fn nanochat(cfg: &Value) -> Result<ModelSpec> {
    let c: BaseConfig = parse(cfg)?;
    let act = match c.hidden_act.as_deref().unwrap_or("relu2") {
        "relu2" => Activation::Relu2,
        other => plain_act(other)?,
    };
    let mut spec = c.llama_spec("nanochat", Glu::SwiGlu, false, true, c.attention_bias)?;
    spec.padding_idx = padding_idx_or(cfg, 1, spec.vocab);
    let norm = Norm::RmsPlain { eps: c.rms_norm_eps as f32 };
    for l in &mut spec.layers {
        (l.attn_norm, l.mlp_norm, l.attn.qk_norm) = (Some(norm.clone()), Some(norm.clone()), Some(norm.clone()));
        l.attn.qk_norm_at = QkNormAt::HeadsAfterRope;
        l.attn.sliding_window = None;
        if let Some(r) = &mut l.attn.rope {
            r.inv_freq.iter_mut().for_each(|f| *f = -*f);
        }
        l.mlp = MlpSpec::Plain { intermediate: c.intermediate_size, act, bias: false };
    }
    spec.final_norm = norm.clone();
    (spec.embed_norm, spec.embed_norm_name) = (Some(norm), "model.norm".into());
    spec.final_softcap = match cfg.get("final_logit_softcapping") {
        None => Some(15.0),
        Some(v) => v.as_f64().map(|c| c as f32),
    };
    let n = &mut spec.layer_names;
    (n.up, n.down) = ("model.layers.{i}.mlp.fc1".into(), "model.layers.{i}.mlp.fc2".into());
    spec.residual_init = ResidualInit::AttnOut;
    Ok(spec)
}

pub fn hunyuan_v1_dense(cfg: &Value) -> Result<ModelSpec> {
    let c: BaseConfig = parse(cfg)?;
    let glu = c.glu("silu")?;
    let mut spec = c.llama_spec("hunyuan_v1_dense", glu, false, true, c.attention_bias)?;
    spec.padding_idx = padding_idx_or(cfg, 0, spec.vocab);
    let params = c.rope_params()?;
    let alpha = params.scaling.get("alpha").and_then(Value::as_f64);
    let ntk_alpha = match alpha {
        Some(alpha) if params.rope_type == "dynamic" => {
            let d = c.head_dim() as f64;
            let theta = params.theta * alpha.powf(d / (d - 2.0));
            let p = RopeParams { rope_type: "default".into(), theta, ..params };
            let dim = c.head_dim();
            let (inv_freq, mscale) = crate::rope::inv_freq(&p, dim, c.max_position_embeddings)?;
            Some(RopeSpec { inv_freq, mscale, rotary_dim: dim, layout: RopeLayout::HalfSplit, long: None })
        }
        _ => None,
    };
    for l in &mut spec.layers {
        l.attn.qk_norm_at = QkNormAt::HeadsAfterRope;
        l.attn.sliding_window = None;
        if let Some(r) = &ntk_alpha {
            l.attn.rope = Some(r.clone());
        }
        if let MlpSpec::Gated { bias, .. } = &mut l.mlp {
            *bias = false;
        }
    }
    let n = &mut spec.layer_names;
    (n.q_norm, n.k_norm) =
        ("model.layers.{i}.self_attn.query_layernorm".into(), "model.layers.{i}.self_attn.key_layernorm".into());
    Ok(spec)
}
