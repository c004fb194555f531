//! `ernie4_5` (ERNIE 4.5 dense): Llama with interleaved RoPE (pairs `(2i, 2i + 1)`), one
//! `use_bias` switch for every projection (q, k, v, o and the MLP) and a tied head by default.

use serde::Deserialize;
use serde_json::Value;
use vkformers_kernels::rope::RopeLayout;

use super::common::{parse, BaseConfig};
use super::ln_common::tied;
use crate::error::Result;
use crate::spec::{MlpSpec, ModelSpec};

#[derive(Deserialize)]
struct Config {
    #[serde(flatten)]
    base: BaseConfig,
    #[serde(default)]
    use_bias: bool,
}

pub fn spec(cfg: &Value) -> Result<ModelSpec> {
    let mut c: Config = parse(cfg)?;
    c.base.tie_word_embeddings = tied(cfg, true);
    if c.base.rope_theta.is_none() && c.base.rope_parameters.is_none() {
        c.base.rope_theta = Some(500_000.0);
    }
    let mut spec = c.base.llama_spec("ernie4_5", c.base.glu("silu")?, false, false, c.use_bias)?;
    // Ernie4_5Config defaults pad_token_id to 0.
    spec.padding_idx = crate::spec::padding_idx_or(cfg, 0, spec.vocab);
    let rope = c.base.rope(RopeLayout::Interleaved)?;
    for l in &mut spec.layers {
        l.attn.out_bias = c.use_bias;
        l.attn.sliding_window = None;
        l.attn.rope = Some(rope.clone());
        if let MlpSpec::Gated { bias, .. } = &mut l.mlp {
            *bias = c.use_bias;
        }
    }
    Ok(spec)
}
