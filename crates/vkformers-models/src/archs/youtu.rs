//! `youtu`: Llama layers (pre-norm RMSNorm, gated MLP) with DeepSeek-V3's multi-head latent
//! attention (`mla_common`; interleaved RoPE pairs with `rope_interleave`, the default); tied
//! head by default.

use serde::Deserialize;
use serde_json::Value;

use super::common::{parse, tied_by_default};
use super::mla_common::{q_lora_rank, rope_layout, set_attn, LlamaMlaConfig};
use crate::error::Result;
use crate::spec::ModelSpec;

#[derive(Deserialize)]
struct Config {
    #[serde(flatten)]
    lm: LlamaMlaConfig,
    rope_interleave: Option<bool>,
}

pub fn spec(cfg: &Value) -> Result<ModelSpec> {
    let c: Config = parse(cfg)?;
    let (mut spec, _) = c.lm.llama_spec("youtu")?;
    // YoutuConfig ties the head by default.
    spec.tied_head = tied_by_default(cfg);
    let attn = c.lm.mla.attn(&c.lm.base, rope_layout(c.rope_interleave), 128, q_lora_rank(cfg, Some(1536))?)?;
    set_attn(&mut spec, &attn);
    Ok(spec)
}
