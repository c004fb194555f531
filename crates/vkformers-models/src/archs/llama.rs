//! `llama` and `mistral`: pre-norm RMSNorm, RoPE (any scaling type), GQA, SwiGLU; Mistral adds
//! a sliding window. Optional `attention_bias` biases q, k, v and o.

use serde_json::Value;

use super::common::{parse, BaseConfig};
use crate::error::Result;
use crate::spec::ModelSpec;

pub fn spec(model_type: &str, cfg: &Value) -> Result<ModelSpec> {
    let c: BaseConfig = parse(cfg)?;
    let glu = c.glu("silu")?;
    let mut spec = c.llama_spec(model_type, glu, false, false, c.attention_bias)?;
    if model_type == "llama" {
        // Llama has no sliding window even if a converted config carries the key.
        for l in &mut spec.layers {
            l.attn.sliding_window = None;
        }
    }
    Ok(spec)
}
