//! `gptj` (GPT-J) and `codegen` (CodeGen): attention and a plain GELU-tanh MLP with biases
//! (`fc_in`, `fc_out`) in parallel on one LayerNorm (`ln_1`), bias-free q/k/v/`out_proj`,
//! interleaved RoPE (theta 10000) over the first `rotary_dim` dims of each head, no learned
//! positions, an untied LM head with a bias. CodeGen fuses q, k, v into `qkv_proj`, stored as
//! 4 blocks (its `mp_num`) each holding a quarter of q, then of v, then of k.

use serde_json::Value;
use vkformers_kernels::rope::RopeLayout;

use super::ln_common::tied;
use crate::error::{ModelError, Result};
use crate::rope::{inv_freq, RopeParams};
use crate::spec::{MapEntry, ModelSpec, Residual, RopeSpec};

fn build(model_type: &str, cfg: &Value) -> Result<ModelSpec> {
    // GPTJConfig / CodeGenConfig share GPT-2's size fields; gpt2's parser reads them.
    let mut spec = super::gpt2::spec(cfg)?;
    // Its `_init_weights` draws every matrix at one std (no GPT-2 residual scaling).
    spec.residual_init = crate::spec::ResidualInit::Plain;
    spec.model_type = model_type.into();
    let head_dim = spec.hidden / spec.layers[0].attn.heads;
    let rotary_dim = match cfg.get("rotary_dim") {
        None => 64,
        Some(v) => v.as_u64().ok_or_else(|| ModelError::Unsupported(format!("{model_type} rotary_dim {v}")))? as usize,
    };
    let params = RopeParams { rope_type: "default".into(), theta: 10_000.0, factor: 1.0, scaling: Value::Null };
    let (freq, _) = inv_freq(&params, rotary_dim, 0)?;
    let rope = RopeSpec { inv_freq: freq, mscale: 1.0, rotary_dim, layout: RopeLayout::Interleaved, long: None };
    for l in &mut spec.layers {
        l.attn.head_dim = head_dim;
        l.attn.qkv_bias = false;
        l.attn.out_bias = false;
        l.attn.rope = Some(rope.clone());
        l.attn.scale = (head_dim as f32).powf(-0.5);
        l.mlp_norm = None;
        l.residual = Residual::Parallel { shared_norm: true };
    }
    spec.position_embedding = None;
    spec.tied_head = tied(cfg, false);
    spec.head_bias = true;
    spec.weight_map = Vec::new();
    let n = &mut spec.layer_names;
    let p = "transformer.h.{i}";
    (n.q, n.k, n.v) = (format!("{p}.attn.q_proj"), format!("{p}.attn.k_proj"), format!("{p}.attn.v_proj"));
    n.o = format!("{p}.attn.out_proj");
    (n.up, n.down) = (format!("{p}.mlp.fc_in"), format!("{p}.mlp.fc_out"));
    Ok(spec)
}

pub fn gptj(cfg: &Value) -> Result<ModelSpec> {
    build("gptj", cfg)
}

pub fn codegen(cfg: &Value) -> Result<ModelSpec> {
    let mut spec = build("codegen", cfg)?;
    let hidden = spec.hidden;
    spec.weight_map = (0..spec.layers.len())
        .map(|i| {
            let a = format!("transformer.h.{i}.attn");
            let parts = ["q_proj", "v_proj", "k_proj"].iter().map(|x| (format!("{a}.{x}.weight"), hidden)).collect();
            MapEntry { hf: format!("{a}.qkv_proj.weight"), transpose: false, parts, groups: 4 }
        })
        .collect();
    Ok(spec)
}
