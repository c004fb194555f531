//! `openai-gpt` (GPT-1): GPT-2's Conv1D layout (fused `c_attn`, `c_proj`, `c_fc`, learned
//! positions, tied head) with the original Transformer's post-LN blocks, `n = ln_1(x + attn(x));
//! x = ln_2(n + mlp(n))`, and no final norm: the last layer's `ln_2` is the last op, so it is the
//! spec's final norm. `afn` "gelu" is transformers' `gelu_new` (tanh) here.

use serde_json::Value;

use crate::error::{ModelError, Result};
use crate::spec::{layer_name, ModelSpec, Residual};

pub fn spec(cfg: &Value) -> Result<ModelSpec> {
    let act = match cfg.get("afn").and_then(Value::as_str).unwrap_or("gelu") {
        "gelu" => "gelu_new",
        "relu" => "relu",
        "silu" | "swish" => "silu",
        other => return Err(ModelError::Unsupported(format!("openai-gpt afn `{other}`"))),
    };
    let mut gpt2 = cfg.clone();
    if let Some(map) = gpt2.as_object_mut() {
        map.insert("activation_function".into(), Value::from(act));
        // The MLP is always 4 × n_embd; GPT-2's scaled and reordered attention options do not exist.
        for k in ["n_inner", "scale_attn_by_inverse_layer_idx", "reorder_and_upcast_attn", "scale_attn_weights"] {
            map.remove(k);
        }
    }
    let mut spec = super::gpt2::spec(&gpt2)?;
    // No GPT-2 residual scaling: its Conv1D layers keep the N(0, 0.02) their constructor draws
    // (its `_init_weights` leaves them alone).
    spec.residual_init = crate::spec::ResidualInit::Plain;
    spec.layer_init_std = Some(0.02);
    spec.model_type = "openai-gpt".into();
    let last = spec.layers.len() - 1;
    for l in &mut spec.layers {
        l.residual = Residual::PostNorm;
    }
    spec.final_norm = spec.layers[last].mlp_norm.take().expect("gpt2 layers have ln_2");
    spec.final_norm_name = layer_name(&spec.layer_names.mlp_norm, last);
    spec.embed_name = "transformer.tokens_embed".into();
    spec.position_embedding = Some("transformer.positions_embed".into());
    Ok(spec)
}
