//! `youtu`: Llama layers (pre-norm RMSNorm, gated MLP) with DeepSeek-V3's multi-head latent
//! attention (`mla_common`; interleaved RoPE pairs with `rope_interleave`, the default); tied
//! head by default.

use serde::Deserialize;
use serde_json::Value;
use vkformers_kernels::rope::RopeLayout;

use super::common::{parse, BaseConfig};
use super::mla_common::{q_lora_rank, MlaConfig};
use crate::error::Result;
use crate::spec::ModelSpec;

#[derive(Deserialize)]
struct Config {
    #[serde(flatten)]
    base: BaseConfig,
    #[serde(flatten)]
    mla: MlaConfig,
    rope_interleave: Option<bool>,
}

pub fn spec(cfg: &Value) -> Result<ModelSpec> {
    let c: Config = parse(cfg)?;
    let b = &c.base;
    let glu = b.glu("silu")?;
    let mut spec = b.llama_spec("youtu", glu, false, false, false)?;
    // YoutuConfig ties the head by default.
    spec.tied_head = cfg.get("tie_word_embeddings").and_then(Value::as_bool).unwrap_or(true);
    let layout = if c.rope_interleave.unwrap_or(true) { RopeLayout::Interleaved } else { RopeLayout::HalfSplit };
    let attn = c.mla.attn(b, layout, 128, q_lora_rank(cfg, Some(1536))?)?;
    for l in &mut spec.layers {
        l.attn = attn.clone();
    }
    Ok(spec)
}
