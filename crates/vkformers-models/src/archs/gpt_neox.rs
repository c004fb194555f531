//! `gpt_neox` (Pythia, GPT-NeoX-20B): LayerNorm with bias, partial rotary (`rotary_pct`, default
//! 0.25), one fused `query_key_value` laid out per head as `[heads, 3, head_dim]` (split into q, k,
//! v on load), a parallel residual with two norms (`use_parallel_residual`, else sequential), a
//! plain GELU MLP with biases, and an untied head stored as `embed_out`.

use serde::Deserialize;
use serde_json::Value;
use vkformers_kernels::glu::Glu;

use super::common::parse;
use super::ln_common::{plain_act, prepare, set_norms, tied, whole_heads, LnConfig};
use crate::error::Result;
use crate::spec::{LayerNames, MapEntry, MlpSpec, ModelSpec, Residual};

#[derive(Deserialize)]
struct Config {
    #[serde(flatten)]
    ln: LnConfig,
    #[serde(default = "yes")]
    use_parallel_residual: bool,
    #[serde(default = "yes")]
    attention_bias: bool,
    rotary_emb_base: Option<f64>,
}

fn yes() -> bool {
    true
}

const P: &str = "gpt_neox.layers.{i}";

fn names() -> LayerNames {
    let parts = [
        "input_layernorm",
        "attention.q",
        "attention.k",
        "attention.v",
        "attention.dense",
        "post_attention_layernorm",
        "mlp.dense_h_to_4h",
        "mlp.dense_4h_to_h",
    ];
    LayerNames::plain(P, parts)
}

/// `query_key_value` (weight and bias): per head, head_dim rows each of q, k and v.
fn weight_map(layers: usize, hidden: usize, heads: usize, bias: bool) -> Vec<MapEntry> {
    let suffixes: &[&str] = if bias { &["weight", "bias"] } else { &["weight"] };
    let parts = [("q", hidden), ("k", hidden), ("v", hidden)];
    MapEntry::fused_qkv(layers, "gpt_neox.layers.{i}.attention", "query_key_value", parts, heads, suffixes)
}

pub fn spec(cfg: &Value) -> Result<ModelSpec> {
    let Config { ln, use_parallel_residual, attention_bias, rotary_emb_base } = parse(cfg)?;
    let norm = ln.norm(true);
    let mut base = ln.base;
    prepare(&mut base, cfg, "gelu", 0.25);
    base.tie_word_embeddings = tied(cfg, false);
    whole_heads(&mut base, false);
    if base.rope_parameters.as_ref().and_then(|r| r.get("rope_theta")).is_none() && base.rope_theta.is_none() {
        base.rope_theta = rotary_emb_base;
    }
    let act = plain_act(base.hidden_act.as_deref().unwrap_or_default())?;
    let mut spec = base.llama_spec("gpt_neox", Glu::SwiGlu, false, false, attention_bias)?;
    // GPTNeoXModel's nn.Embedding has no padding_idx.
    spec.padding_idx = None;
    set_norms(&mut spec, &norm);
    for l in &mut spec.layers {
        l.attn.out_bias = attention_bias;
        l.mlp = MlpSpec::Plain { intermediate: base.intermediate_size, act, bias: true };
        l.residual =
            if use_parallel_residual { Residual::Parallel { shared_norm: false } } else { Residual::Sequential };
    }
    spec.embed_name = "gpt_neox.embed_in".into();
    spec.final_norm_name = "gpt_neox.final_layer_norm".into();
    spec.head_name = "embed_out".into();
    spec.layer_names = names();
    spec.weight_map = weight_map(base.num_hidden_layers, base.hidden_size, base.num_attention_heads, attention_bias);
    Ok(spec)
}
