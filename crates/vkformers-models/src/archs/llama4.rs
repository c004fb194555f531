//! `llama4_text` (Llama 4's language model, `Llama4ForCausalLM`): Llama layers where
//! - RoPE layers (`no_rope_layers[i]` = 1) rotate interleaved pairs (transformers' complex
//!   `freqs_cis`), L2-normalise q and k per head after it (`use_qk_norm`: `x·rsqrt(mean(x²) +
//!   eps)`, no weight) and attend within chunks of `attention_chunk_size` positions
//!   (`layer_types` "chunked_attention": key j visible to query p when ⌊j/C⌋ = ⌊p/C⌋);
//! - NoPE layers attend causally over everything, the query scaled by the attention temperature
//!   `1 + attn_scale · log1p(⌊(pos + 1) / floor_scale⌋)` (`attn_temperature_tuning`);
//! - `moe_layers` route: top-k experts by router logit, `sigmoid(logit)` of each chosen expert
//!   scaling that expert's *input* (`Router::SigmoidTopKInput`), experts stored packed in-out
//!   (`experts.gate_up_proj [E, H, 2I]`, gate columns first, `experts.down_proj [E, I, H]`),
//!   plus an ungated shared expert; the other layers a dense MLP of `intermediate_size_mlp`.
//!
//! transformers computes router logits but never adds a load-balancing loss for this class.

use serde::Deserialize;
use serde_json::Value;
use vkformers_kernels::glu::Glu;
use vkformers_kernels::rope::RopeLayout;

use super::common::{parse, BaseConfig};
use crate::error::{ModelError, Result};
use crate::moe::{MoeNames, MoeSpec, Router, SharedExpert};
use crate::spec::{MlpSpec, ModelSpec, Norm, QkNormAt};

#[derive(Deserialize)]
struct Config {
    #[serde(flatten)]
    base: BaseConfig,
    #[serde(default = "default_experts")]
    num_local_experts: usize,
    #[serde(default = "one")]
    num_experts_per_tok: usize,
    intermediate_size_mlp: Option<usize>,
    moe_layers: Option<Vec<usize>>,
    #[serde(default = "one")]
    interleave_moe_layer_step: usize,
    #[serde(default = "yes")]
    use_qk_norm: bool,
    no_rope_layers: Option<Vec<u8>>,
    #[serde(default = "default_interval")]
    no_rope_layer_interval: usize,
    layer_types: Option<Vec<String>>,
    #[serde(default = "yes")]
    attn_temperature_tuning: bool,
    #[serde(default = "default_floor_scale")]
    floor_scale: usize,
    #[serde(default = "default_attn_scale")]
    attn_scale: f64,
    #[serde(default)]
    router_jitter_noise: f64,
}

fn default_experts() -> usize {
    16
}
fn one() -> usize {
    1
}
fn yes() -> bool {
    true
}
fn default_interval() -> usize {
    4
}
fn default_floor_scale() -> usize {
    8192
}
fn default_attn_scale() -> f64 {
    0.1
}

const FF: &str = "model.layers.{i}.feed_forward";

fn moe_block(c: &Config, glu: Glu) -> Result<MoeSpec> {
    let f = |t: &str| format!("{FF}.{t}");
    let names = MoeNames::packed(f("router.weight"), f("experts.gate_up_proj"), None, f("experts.down_proj"));
    let (experts, top_k, inter) = (c.num_local_experts, c.num_experts_per_tok, c.base.intermediate_size);
    let m = MoeSpec {
        shared: Some(SharedExpert::mlp(&f("shared_expert"), inter)),
        packed: true,
        in_out: true,
        ..MoeSpec::plain(experts, top_k, inter, glu, Router::SigmoidTopKInput, names)
    };
    m.check()?;
    Ok(m)
}

/// `attention_chunk_size` as the config class reads it: absent means its default 8192, null none.
fn chunk_size(cfg: &Value) -> Result<Option<u32>> {
    match cfg.get("attention_chunk_size") {
        None => Ok(Some(8192)),
        Some(Value::Null) => Ok(None),
        Some(v) => match v.as_u64().and_then(|c| u32::try_from(c).ok()).filter(|&c| c > 0) {
            Some(c) => Ok(Some(c)),
            None => Err(ModelError::Config(format!("attention_chunk_size {v}: want a positive integer"))),
        },
    }
}

pub fn spec(cfg: &Value) -> Result<ModelSpec> {
    let c: Config = parse(cfg)?;
    if c.router_jitter_noise != 0.0 {
        return Err(ModelError::Unsupported(format!("router_jitter_noise {}", c.router_jitter_noise)));
    }
    let layers = c.base.num_hidden_layers;
    let chunk = chunk_size(cfg)?;
    // The config class's defaults: every `interval`-th layer (1-based) NoPE; RoPE layers chunked.
    let no_rope = c.no_rope_layers.clone().filter(|v| !v.is_empty()).unwrap_or_else(|| {
        (0..layers).map(|i| u8::from(!(i + 1).is_multiple_of(c.no_rope_layer_interval.max(1)))).collect()
    });
    let step = c.interleave_moe_layer_step.max(1);
    let moe_layers = c.moe_layers.clone().unwrap_or_else(|| (step - 1..layers).step_by(step).collect());
    if no_rope.len() != layers || c.layer_types.as_ref().is_some_and(|t| t.len() != layers) {
        return Err(ModelError::Config(format!("no_rope_layers / layer_types do not list {layers} layers")));
    }
    let glu = c.base.glu("silu")?;
    let mut spec = c.base.llama_spec("llama4_text", glu, false, false, c.base.attention_bias)?;
    spec.layer_names = spec.layer_names.map(|n| n.replace(".mlp.", ".feed_forward."));
    let rope = c.base.rope(RopeLayout::Interleaved)?;
    let moe = moe_block(&c, glu)?;
    let dense =
        MlpSpec::Gated { intermediate: c.intermediate_size_mlp.unwrap_or(c.base.intermediate_size), glu, bias: false };
    for (i, l) in spec.layers.iter_mut().enumerate() {
        let use_rope = no_rope[i] != 0;
        let chunked = match &c.layer_types {
            Some(t) => t[i] == "chunked_attention",
            None => use_rope,
        };
        let a = &mut l.attn;
        a.sliding_window = None;
        a.rope = use_rope.then(|| rope.clone());
        a.qk_norm = (c.use_qk_norm && use_rope).then_some(Norm::RmsPlain { eps: c.base.rms_norm_eps as f32 });
        a.qk_norm_at = QkNormAt::HeadsAfterRope;
        a.chunk = if chunked { chunk } else { None };
        if c.attn_temperature_tuning && !use_rope {
            a.q_position_scale = Some((c.attn_scale as f32, c.floor_scale.max(1)));
            a.q_position_shift = 1;
            a.q_position_by_column = true;
        }
        l.mlp = if moe_layers.contains(&i) { MlpSpec::Moe(Box::new(moe.clone())) } else { dense.clone() };
    }
    Ok(spec)
}
