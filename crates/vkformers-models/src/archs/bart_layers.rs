//! BART's layer: its module names and the biased attention / plain-MLP block its families share.

use super::encoder_common::activation;
use crate::error::{ModelError, Result};
use crate::spec::{AttnSpec, LayerNames, LayerSpec, MlpSpec, Norm, Residual};

/// A BART stack's layer names (`model.{stack}.layers.{i}`).
pub(super) fn names(stack: &str) -> LayerNames {
    let p = format!("model.{stack}.layers.{{i}}");
    let mut n = LayerNames::plain(
        &p,
        [
            "self_attn_layer_norm",
            "self_attn.q_proj",
            "self_attn.k_proj",
            "self_attn.v_proj",
            "self_attn.out_proj",
            "final_layer_norm",
            "fc1",
            "fc2",
        ],
    );
    n.gate = String::new();
    n
}

/// A BART layer: biased attention, a plain `fc1`/`fc2` MLP, LayerNorms with biases.
pub(super) fn layer(heads: usize, d_model: usize, ffn: usize, act: &str) -> Result<LayerSpec> {
    if heads == 0 || !d_model.is_multiple_of(heads) {
        return Err(ModelError::Config(format!("d_model {d_model} is not a multiple of {heads} attention heads")));
    }
    let norm = Norm::Layer { eps: 1e-5, bias: true };
    Ok(LayerSpec {
        attn_norm: Some(norm.clone()),
        attn: AttnSpec { qkv_bias: true, out_bias: true, ..AttnSpec::new(heads, heads, d_model / heads) },
        post_attn_norm: None,
        mlp_norm: Some(norm),
        mlp: MlpSpec::Plain { intermediate: ffn, act: activation(act)?, bias: true },
        post_mlp_norm: None,
        residual: Residual::Sequential,
        residual_scale: 1.0,
    })
}
