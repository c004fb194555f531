//! `olmo2`: Llama-shaped, but the RMSNorms come after the sublayers (`post_attention_layernorm`
//! and `post_feedforward_layernorm` on the attention and MLP outputs, before the residual add;
//! no pre-norms), and q and k are RMSNormed over the whole projection (not per head) before RoPE.

use serde::Deserialize;
use serde_json::Value;

use super::common::{parse, BaseConfig};
use crate::error::Result;
use crate::spec::ModelSpec;

#[derive(Deserialize)]
struct Config {
    #[serde(flatten)]
    base: BaseConfig,
}

pub fn spec(cfg: &Value) -> Result<ModelSpec> {
    let c: Config = parse(cfg)?;
    let glu = c.base.glu("silu")?;
    let mut spec = c.base.llama_spec("olmo2", glu, false, true, c.base.attention_bias)?;
    // olmo2's config class defaults pad_token_id to 1.
    spec.padding_idx = crate::spec::padding_idx_or(cfg, 1, spec.vocab);
    for l in &mut spec.layers {
        l.post_attn_norm = l.attn_norm.take();
        l.post_mlp_norm = l.mlp_norm.take();
        l.attn.qk_norm_full = true;
        l.attn.sliding_window = None;
    }
    Ok(spec)
}
