//! `helium` (Kyutai): Llama with interleaved RoPE (pairs `(2i, 2i + 1)`), q/k/v biases with
//! `attention_bias` but never an output bias, RMSNorm eps 1e-8 and RoPE theta 1e5 by default.

use serde_json::Value;
use vkformers_kernels::rope::RopeLayout;

use super::common::{parse, BaseConfig};
use crate::error::Result;
use crate::spec::ModelSpec;

pub fn spec(cfg: &Value) -> Result<ModelSpec> {
    let mut c: BaseConfig = parse(cfg)?;
    // HeliumConfig's class defaults where a saved config leaves them out.
    if cfg.get("rms_norm_eps").is_none() {
        c.rms_norm_eps = 1e-8;
    }
    if c.rope_theta.is_none() && c.rope_parameters.is_none() {
        c.rope_theta = Some(100_000.0);
    }
    let qkv_bias = c.attention_bias;
    let mut spec = c.llama_spec("helium", c.glu("silu")?, false, false, qkv_bias)?;
    spec.padding_idx = crate::spec::padding_idx_or(cfg, 3, spec.vocab);
    let rope = c.rope(RopeLayout::Interleaved)?;
    for l in &mut spec.layers {
        l.attn.out_bias = false;
        l.attn.sliding_window = None;
        l.attn.rope = Some(rope.clone());
    }
    Ok(spec)
}
