//! `gpt_oss`: Llama-style GQA attention with biases on q/k/v/o, a learned sink logit per head
//! (`self_attn.sinks [heads]`), sliding-window and full layers alternating by `layer_types`
//! (default: even layers sliding, window 128), YaRN RoPE (the config class's default), and a
//! routed MoE in every layer: `mlp.router` (weight `[E, H]` + bias `[E]`), top-k logits then a
//! softmax over those k, experts stored in-out (`gate_up_proj [E, H, 2I]` with gate and up in
//! alternating columns, `down_proj [E, I, H]`) with per-expert biases and the clamped SwiGLU
//! `(clamp(up, ±l) + 1) · g·σ(α·g)`, `g = min(gate, l)`.

use serde::Deserialize;
use serde_json::{json, Value};
use vkformers_kernels::glu::Glu;
use vkformers_kernels::moe::clamped_swiglu::ClampedSwiGlu;

use super::common::parse;
use super::layer_types::{apply, sliding, window};
use super::moe_common::LlamaMoeConfig;
use crate::error::Result;
use crate::moe::{BiasedExperts, Router};
use crate::spec::{ModelSpec, SinksInit};

#[derive(Deserialize)]
struct Config {
    #[serde(flatten)]
    lm: LlamaMoeConfig,
    swiglu_alpha: f32,
    swiglu_limit: f32,
}

/// `cfg` with GptOssConfig's class defaults where a field is absent (or null): attention
/// biases on, four experts a token, the SwiGLU's α and limit, and `__post_init__`'s YaRN
/// (factor 32 over 4096 positions, β 32/1, untruncated) at base `default_theta` 150000.
fn with_defaults(cfg: &Value) -> Value {
    let mut c = cfg.clone();
    let defaults = [
        ("attention_bias", json!(true)),
        ("num_experts_per_tok", json!(4)),
        ("num_local_experts", json!(128)),
        ("swiglu_alpha", json!(1.702)),
        ("swiglu_limit", json!(7.0)),
        ("router_aux_loss_coef", json!(0.001)),
        ("rope_theta", json!(150000.0)),
    ];
    for (k, v) in defaults {
        if c.get(k).is_none_or(Value::is_null) {
            c[k] = v;
        }
    }
    let absent = |k: &str| c.get(k).is_none_or(Value::is_null);
    if absent("rope_parameters") && absent("rope_scaling") {
        c["rope_parameters"] = json!({
            "rope_type": "yarn", "factor": 32.0, "beta_fast": 32.0, "beta_slow": 1.0,
            "truncate": false, "original_max_position_embeddings": 4096,
        });
    }
    c
}

pub fn spec(cfg: &Value) -> Result<ModelSpec> {
    let cfg = &with_defaults(cfg);
    let c: Config = parse(cfg)?;
    let b = &c.lm.base;
    let mut spec = b.llama_spec("gpt_oss", Glu::SwiGlu, false, false, b.attention_bias)?;
    for l in &mut spec.layers {
        l.attn.sinks = Some("model.layers.{i}.self_attn.sinks".into());
    }
    // GptOssPreTrainedModel._init_weights draws the sinks from N(0, initializer_range).
    spec.sinks_init = SinksInit::Normal;
    let n = spec.layers.len();
    let slide = sliding(cfg, n, |i| i % 2 == 0)?;
    apply(&mut spec, &slide, window(cfg, Some(128)))?;

    let act = ClampedSwiGlu { alpha: c.swiglu_alpha, limit: c.swiglu_limit, interleaved: true };
    let (names, biased) = BiasedExperts::gpt_oss("model.layers.{i}.mlp", act);
    let mut block = c.lm.moe.block(b.intermediate_size, Glu::SwiGlu, false, names, None, 0.001)?;
    block.router = Router::TopKSoftmax;
    // In-out storage: each expert's down projection `[I, H]` is a plain (untransposed) matmul.
    block.down_transposed = true;
    block.packed = true;
    block.biased = Some(biased);
    c.lm.moe.apply(&mut spec, block)?;
    Ok(spec)
}

#[cfg(test)]
mod tests {
    use serde_json::json;

    /// A config with only the sizes (as a Hub config may omit the class defaults) gets
    /// GptOssConfig's: even layers sliding at 128, attention biases, YaRN at base 150000
    /// (attention factor 0.1·ln 32 + 1), the SwiGLU limit 7.
    #[test]
    fn class_defaults_fill_a_config_of_sizes_only() {
        let cfg = json!({
            "vocab_size": 64, "hidden_size": 16, "intermediate_size": 8, "num_hidden_layers": 3,
            "num_attention_heads": 4, "num_key_value_heads": 2, "head_dim": 4, "num_local_experts": 4,
        });
        let s = super::spec(&cfg).unwrap();
        let windows: Vec<_> = s.layers.iter().map(|l| l.attn.sliding_window).collect();
        assert_eq!(windows, [Some(128), None, Some(128)]);
        let a = &s.layers[0].attn;
        assert!(a.qkv_bias && a.out_bias && a.sinks.is_some());
        let rope = a.rope.as_ref().unwrap();
        assert!((rope.mscale - (0.1 * 32f32.ln() + 1.0)).abs() < 1e-6, "mscale {}", rope.mscale);
        // YaRN keeps the highest frequency (β_fast region) at 150000^0 = 1.
        assert!((rope.inv_freq[0] - 1.0).abs() < 1e-6);
        let crate::spec::MlpSpec::Moe(m) = &s.layers[0].mlp else { panic!("not an MoE layer") };
        assert_eq!((m.top_k, m.biased.as_ref().unwrap().act.limit), (4, 7.0));
    }
}
