//! `olmo2`: Llama-shaped, but the RMSNorms come after the sublayers (`post_attention_layernorm`
//! and `post_feedforward_layernorm` on the attention and MLP outputs, before the residual add;
//! no pre-norms), and q and k are RMSNormed over the whole projection (not per head) before RoPE.
//! `olmo` (OLMo 1): Llama with parameter-free LayerNorms (eps 1e-5) and, with `clip_qkv`, q, k
//! and v clamped to `[−clip_qkv, clip_qkv]` after their projections.

use serde_json::Value;

use super::common::{parse, BaseConfig};
use crate::error::Result;
use crate::spec::{ModelSpec, Norm};

pub fn spec(cfg: &Value) -> Result<ModelSpec> {
    let c: BaseConfig = parse(cfg)?;
    let glu = c.glu("silu")?;
    let mut spec = c.llama_spec("olmo2", glu, false, true, c.attention_bias)?;
    // olmo2's config class defaults pad_token_id to 1.
    spec.padding_idx = crate::spec::padding_idx_or(cfg, 1, spec.vocab);
    for l in &mut spec.layers {
        l.post_attn_norm = l.attn_norm.take();
        l.post_mlp_norm = l.mlp_norm.take();
        l.attn.qk_norm_at = crate::spec::QkNormAt::Projection;
        l.attn.sliding_window = None;
    }
    Ok(spec)
}

pub fn olmo(cfg: &Value) -> Result<ModelSpec> {
    let c: BaseConfig = parse(cfg)?;
    let glu = c.glu("silu")?;
    let mut spec = c.llama_spec("olmo", glu, false, false, c.attention_bias)?;
    spec.padding_idx = crate::spec::padding_idx_or(cfg, 1, spec.vocab);
    let clip = cfg.get("clip_qkv").and_then(Value::as_f64).map(|c| c as f32);
    super::ln_common::set_norms(&mut spec, &Norm::LayerPlain { eps: 1e-5 });
    for l in &mut spec.layers {
        l.attn.clip_qkv = clip;
        l.attn.sliding_window = None;
        if let crate::spec::MlpSpec::Gated { bias, .. } = &mut l.mlp {
            *bias = false;
        }
    }
    Ok(spec)
}
