//! `cohere` (Command-R): attention and a SwiGLU MLP in parallel on one bias-free LayerNorm,
//! interleaved RoPE (pairs `(2i, 2i + 1)`), logits multiplied by `logit_scale`, tied head.

use serde::Deserialize;
use serde_json::Value;
use vkformers_kernels::rope::RopeLayout;

use super::common::parse;
use super::ln_common::{prepare, set_norms, tied, LnConfig};
use crate::error::Result;
use crate::spec::{ModelSpec, Norm, Residual};

#[derive(Deserialize)]
struct Config {
    #[serde(flatten)]
    ln: LnConfig,
    logit_scale: Option<f64>,
    #[serde(default)]
    use_qk_norm: bool,
}

pub fn spec(cfg: &Value) -> Result<ModelSpec> {
    let mut c: Config = parse(cfg)?;
    let b = &mut c.ln.base;
    prepare(b, cfg, "silu", 1.0);
    b.tie_word_embeddings = tied(cfg, true);
    let mut spec = b.llama_spec("cohere", b.glu("silu")?, false, false, b.attention_bias)?;
    // cohere's config class defaults pad_token_id to 0.
    spec.padding_idx = crate::spec::padding_idx_or(cfg, 0, spec.vocab);
    set_norms(&mut spec, &c.ln.norm(false));
    let rope = c.ln.base.rope(RopeLayout::Interleaved)?;
    for l in &mut spec.layers {
        l.attn.rope = Some(rope.clone());
        l.attn.sliding_window = None;
        l.mlp_norm = None;
        l.residual = Residual::Parallel { shared_norm: true };
        // QK-norm: a bias-free LayerNorm over head_dim with weights [heads, head_dim].
        l.attn.qk_norm = c.use_qk_norm.then_some(Norm::LayerPerHead { eps: c.ln.layer_norm_eps as f32 });
    }
    spec.logit_scale = c.logit_scale.unwrap_or(0.0625) as f32;
    Ok(spec)
}
