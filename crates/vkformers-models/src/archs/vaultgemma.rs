//! `vaultgemma`: Gemma 2 (scaled embedding, (1 + w) RMSNorm, GeGLU-tanh, softcaps, sliding and
//! global layers, tied head) without the post-sublayer norms: each layer keeps only
//! `input_layernorm` and `pre_feedforward_layernorm`.

use serde_json::Value;

use crate::error::Result;
use crate::spec::ModelSpec;

pub fn spec(cfg: &Value) -> Result<ModelSpec> {
    // VaultGemmaConfig has Gemma2Config's fields and defaults.
    let mut spec = super::gemma2::spec(cfg)?;
    spec.model_type = "vaultgemma".into();
    for l in &mut spec.layers {
        l.post_attn_norm = None;
        l.post_mlp_norm = None;
    }
    Ok(spec)
}
