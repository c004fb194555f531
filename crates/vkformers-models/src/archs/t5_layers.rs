//! T5's per-stack module names and its feed-forward block (ReLU or gated-GELU, no biases).

use vkformers_kernels::glu::Glu;

use super::encoder_common::activation;
use crate::error::{ModelError, Result};
use crate::spec::{LayerNames, MlpSpec};

/// The stack's layer names (`encoder.block.{i}` / `decoder.block.{i}`); the decoder's feed-forward
/// is the block's third sublayer (after the cross-attention).
pub(super) fn names(stack: &str, ff: usize) -> LayerNames {
    let p = format!("{stack}.block.{{i}}");
    let a = format!("{p}.layer.0.SelfAttention");
    let f = format!("{p}.layer.{ff}");
    LayerNames {
        attn_norm: format!("{p}.layer.0.layer_norm"),
        q: format!("{a}.q"),
        k: format!("{a}.k"),
        v: format!("{a}.v"),
        o: format!("{a}.o"),
        q_norm: String::new(),
        k_norm: String::new(),
        mlp_norm: format!("{f}.layer_norm"),
        post_attn_norm: String::new(),
        post_mlp_norm: String::new(),
        gate: format!("{f}.DenseReluDense.wi_0"),
        up: format!("{f}.DenseReluDense.wi"),
        down: format!("{f}.DenseReluDense.wo"),
    }
}

/// The feed-forward block `feed_forward_proj` names (`ACT` or `gated-ACT`), `d_ff` wide.
pub(super) fn mlp(feed_forward_proj: &str, d_ff: usize) -> Result<MlpSpec> {
    let parts: Vec<&str> = feed_forward_proj.split('-').collect();
    match parts.as_slice() {
        ["gated", act] => {
            let glu = match *act {
                // transformers maps `gated-gelu` to gelu_new (tanh).
                "gelu" | "gelu_new" | "gelu_pytorch_tanh" => Glu::GeGluTanh,
                "silu" | "swish" => Glu::SwiGlu,
                other => return Err(ModelError::Unsupported(format!("feed_forward_proj `gated-{other}`"))),
            };
            Ok(MlpSpec::Gated { intermediate: d_ff, glu, bias: false })
        }
        [act] => Ok(MlpSpec::Plain { intermediate: d_ff, act: activation(act)?, bias: false }),
        _ => Err(ModelError::Config(format!("feed_forward_proj `{}` is not `ACT` or `gated-ACT`", feed_forward_proj))),
    }
}
