//! Helpers of the LayerNorm families (starcoder2, phi, gpt_neox, cohere, stablelm): the plain-MLP
//! activation, the partial-rotary factor wherever a config keeps it, and a Llama-shaped spec turned
//! into a LayerNorm one.

use serde::Deserialize;
use serde_json::Value;
use vkformers_kernels::activation::Activation;

use super::common::BaseConfig;
use crate::error::{ModelError, Result};
use crate::spec::{ModelSpec, Norm};

/// A Llama-like config of the LayerNorm families (GPT-NeoX, Phi, Persimmon, StableLM, Cohere,
/// Jais2): the base fields and `layer_norm_eps` (default 1e-5).
#[derive(Debug, Deserialize)]
pub struct LnConfig {
    #[serde(flatten)]
    pub base: BaseConfig,
    #[serde(default = "default_eps")]
    pub layer_norm_eps: f64,
}

fn default_eps() -> f64 {
    1e-5
}

impl LnConfig {
    /// The LayerNorm of `layer_norm_eps`, with a bias or not.
    pub fn norm(&self, bias: bool) -> Norm {
        Norm::Layer { eps: self.layer_norm_eps as f32, bias }
    }
}

/// For the families whose head size is always hidden / heads and that have no sliding window:
/// `head_dim` and `sliding_window` dropped, and without `gqa` the kv heads too.
pub fn whole_heads(base: &mut BaseConfig, gqa: bool) {
    base.head_dim = None;
    base.sliding_window = None;
    if !gqa {
        base.num_key_value_heads = None;
    }
}

/// The activation of a plain (ungated) MLP from `hidden_act`.
pub fn plain_act(name: &str) -> Result<Activation> {
    match name {
        "gelu_new" | "gelu_pytorch_tanh" | "gelu_fast" => Ok(Activation::GeluTanh),
        "gelu" => Ok(Activation::Gelu),
        "relu" => Ok(Activation::Relu),
        "silu" | "swish" => Ok(Activation::Silu),
        other => Err(ModelError::Unsupported(format!("hidden_act `{other}` in a plain MLP"))),
    }
}

/// `partial_rotary_factor` from `rope_parameters` (transformers 5), `rope_scaling`, or the
/// top-level keys older configs use (`partial_rotary_factor`, GPT-NeoX's `rotary_pct`).
pub fn rotary_factor(cfg: &Value, default: f64) -> f64 {
    ["rope_parameters", "rope_scaling"]
        .iter()
        .filter_map(|k| cfg.get(k).and_then(|r| r.get("partial_rotary_factor")).and_then(Value::as_f64))
        .chain(["partial_rotary_factor", "rotary_pct"].iter().filter_map(|k| cfg.get(k).and_then(Value::as_f64)))
        .next()
        .unwrap_or(default)
}

/// `tie_word_embeddings` with the family's default where the key is absent.
pub fn tied(cfg: &Value, default: bool) -> bool {
    cfg.get("tie_word_embeddings").and_then(Value::as_bool).unwrap_or(default)
}

/// Every norm of `spec` (pre-norms, QK-norms, final) replaced by `norm`.
pub fn set_norms(spec: &mut ModelSpec, norm: &Norm) {
    for l in &mut spec.layers {
        for n in [&mut l.attn_norm, &mut l.mlp_norm, &mut l.attn.qk_norm].into_iter().flatten() {
            *n = norm.clone();
        }
    }
    spec.final_norm = norm.clone();
}

/// The base config with `hidden_act` defaulted and the partial rotary factor resolved.
pub fn prepare(base: &mut BaseConfig, cfg: &Value, act_default: &str, rotary_default: f64) {
    base.hidden_act.get_or_insert_with(|| act_default.to_string());
    base.partial_rotary_factor = Some(rotary_factor(cfg, rotary_default));
}
