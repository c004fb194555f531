//! `bitnet` (Microsoft BitNet b1.58, the bf16/f32 checkpoints): Llama with an RMSNorm of the
//! attention output before `o_proj` (`attn_sub_norm`), a bias-free gated MLP whose gate goes
//! through ReLU² (`down(ffn_sub_norm(relu²(gate(x)) · up(x)))`, `hidden_act` "relu2"), and RoPE
//! base 500000 by default. Packed 1.58-bit checkpoints carry a `quantization_config` and are
//! refused by the registry's config check.

use serde_json::Value;
use vkformers_kernels::activation::Activation;
use vkformers_kernels::glu::Glu;

use super::common::{parse, BaseConfig};
use super::ln_common::plain_act;
use crate::error::Result;
use crate::spec::{MlpSpec, ModelSpec, Norm};

pub fn spec(cfg: &Value) -> Result<ModelSpec> {
    let mut c: BaseConfig = parse(cfg)?;
    let theta_given = c.rope_theta.is_some()
        || [&c.rope_parameters, &c.rope_scaling]
            .iter()
            .any(|r| r.as_ref().is_some_and(|r| r.get("rope_theta").is_some()));
    if !theta_given {
        c.rope_theta = Some(500_000.0);
    }
    let act = match c.hidden_act.as_deref().unwrap_or("relu2") {
        "relu2" => Activation::Relu2,
        other => plain_act(other)?,
    };
    let mut spec = c.llama_spec("bitnet", Glu::SwiGlu, false, false, c.attention_bias)?;
    let norm = Norm::Rms { eps: c.rms_norm_eps as f32, unit_offset: false };
    for l in &mut spec.layers {
        l.attn.sliding_window = None;
        l.attn.out_norm = Some((norm.clone(), "model.layers.{i}.self_attn.attn_sub_norm".into()));
        l.mlp = MlpSpec::GatedAct {
            intermediate: c.intermediate_size,
            act,
            bias: false,
            sub_norm: Some((norm.clone(), "model.layers.{i}.mlp.ffn_sub_norm".into())),
        };
    }
    Ok(spec)
}
