//! `gemma`: Llama-shaped with RMSNorm multiplying by (1 + w), the embedding output scaled by
//! sqrt(hidden_size), GeGLU with the tanh GELU, tied head, and an explicit `head_dim`.

use serde_json::Value;

use super::common::{parse, BaseConfig};
use crate::error::Result;
use crate::spec::ModelSpec;

pub fn spec(cfg: &Value) -> Result<ModelSpec> {
    let mut c: BaseConfig = parse(cfg)?;
    // Released Gemma configs say `hidden_act: gelu` and `hidden_activation: gelu_pytorch_tanh`;
    // transformers runs the latter (the tanh GELU is also its default).
    c.hidden_act = c.hidden_activation.clone().or(c.hidden_act.take());
    c.tie_word_embeddings = super::common::tied_by_default(cfg);
    let glu = c.glu("gelu_pytorch_tanh")?;
    let mut spec = c.llama_spec("gemma", glu, true, false, false)?;
    // gemma's config class defaults pad_token_id to 0.
    spec.padding_idx = crate::spec::padding_idx_or(cfg, 0, spec.vocab);
    // transformers rounds sqrt(hidden) to the activation dtype (f32 here).
    spec.embed_scale = (c.hidden_size as f64).sqrt() as f32;
    for l in &mut spec.layers {
        l.attn.sliding_window = None;
    }
    Ok(spec)
}
