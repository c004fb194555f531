//! `falcon`: a LayerNorm decoder with one fused `query_key_value`, RoPE (or ALiBi with `alibi`),
//! a plain MLP (`activation`, GELU by default; biases only with `bias`, as for every linear) and
//! a head tied unless `tie_word_embeddings` is false. Its layouts:
//! - `new_decoder_architecture` (Falcon 40B/180B): q/k/v fused per KV group as
//!   `[kv_heads, q_per_kv + 2, head_dim]` (the group's queries, then its key and value);
//!   attention and MLP in parallel on two norms (`ln_attn`, `ln_mlp`) or, with
//!   `num_ln_in_parallel_attn: 1`, on the one `input_layernorm`.
//! - the old one (Falcon 7B): `multi_query` (one KV head, `[heads + 2, head_dim]`) or per head
//!   `[heads, 3, head_dim]`; `parallel_attn` on `input_layernorm`, else sequential with
//!   `post_attention_layernorm`.

use serde::Deserialize;
use serde_json::Value;
use vkformers_kernels::glu::Glu;

use super::common::{parse, BaseConfig};
use super::ln_common::{plain_act, set_norms};
use crate::decoder::alibi_slopes;
use crate::error::{ModelError, Result};
use crate::spec::{LayerNames, MapEntry, MlpSpec, ModelSpec, Norm, Residual};

#[derive(Deserialize)]
struct Config {
    #[serde(flatten)]
    base: BaseConfig,
    #[serde(default = "default_eps")]
    layer_norm_epsilon: f64,
    num_kv_heads: Option<usize>,
    #[serde(default)]
    alibi: bool,
    #[serde(default)]
    new_decoder_architecture: bool,
    #[serde(default = "yes")]
    multi_query: bool,
    #[serde(default = "yes")]
    parallel_attn: bool,
    #[serde(default)]
    bias: bool,
    num_ln_in_parallel_attn: Option<usize>,
    activation: Option<String>,
}

fn default_eps() -> f64 {
    1e-5
}

fn yes() -> bool {
    true
}

const P: &str = "transformer.h.{i}";

fn names(attn_norm: &str, mlp_norm: &str) -> LayerNames {
    let (q, k, v, o) = ("self_attention.q", "self_attention.k", "self_attention.v", "self_attention.dense");
    LayerNames::plain(P, [attn_norm, q, k, v, o, mlp_norm, "mlp.dense_h_to_4h", "mlp.dense_4h_to_h"])
}

/// `query_key_value` (weight, and bias with `bias`) split into q, k and v: `groups` blocks,
/// each with its share of q rows, then of k rows, then of v rows.
fn weight_map(layers: usize, q_rows: usize, kv_rows: usize, groups: usize, bias: bool) -> Vec<MapEntry> {
    let suffixes: &[&str] = if bias { &["weight", "bias"] } else { &["weight"] };
    let parts = [("q", q_rows), ("k", kv_rows), ("v", kv_rows)];
    MapEntry::fused_qkv(layers, "transformer.h.{i}.self_attention", "query_key_value", parts, groups, suffixes)
}

pub fn spec(cfg: &Value) -> Result<ModelSpec> {
    // Falcon keeps the MLP width in `ffn_hidden_size` (default 4 x hidden) and its own names for
    // sizes older files spell differently; give the shared parser the keys it knows.
    let mut cfg = cfg.clone();
    if let Some(o) = cfg.as_object_mut() {
        for (old, new) in
            [("n_embed", "hidden_size"), ("n_layer", "num_hidden_layers"), ("n_head", "num_attention_heads")]
        {
            if let (Some(v), false) = (o.get(old).cloned(), o.contains_key(new)) {
                o.insert(new.into(), v);
            }
        }
        let hidden = o.get("hidden_size").and_then(Value::as_u64).unwrap_or(0);
        let ffn = o.get("ffn_hidden_size").and_then(Value::as_u64).unwrap_or(4 * hidden);
        o.insert("intermediate_size".into(), ffn.into());
        o.remove("num_key_value_heads");
        o.remove("head_dim");
        o.remove("sliding_window");
        o.remove("partial_rotary_factor");
    }
    let mut c: Config = parse(&cfg)?;
    c.base.tie_word_embeddings = super::common::tied_by_default(&cfg);
    let heads = c.base.num_attention_heads;
    let head_dim = c.base.hidden_size / heads;
    let kv_heads = if c.new_decoder_architecture {
        c.num_kv_heads.unwrap_or(heads)
    } else if c.multi_query {
        1
    } else {
        heads
    };
    c.base.num_key_value_heads = Some(kv_heads);
    let act = plain_act(c.activation.as_deref().unwrap_or("gelu"))?;
    let mut spec = c.base.llama_spec("falcon", Glu::SwiGlu, false, false, c.bias)?;
    // FalconModel's nn.Embedding has no padding_idx.
    spec.padding_idx = None;
    set_norms(&mut spec, &Norm::Layer { eps: c.layer_norm_epsilon as f32, bias: true });
    let (residual, attn_norm, mlp_norm) = if c.new_decoder_architecture {
        match c.num_ln_in_parallel_attn.unwrap_or(2) {
            2 => (Residual::Parallel { shared_norm: false }, "ln_attn", "ln_mlp"),
            _ if c.parallel_attn => (Residual::Parallel { shared_norm: true }, "input_layernorm", ""),
            _ => return Err(ModelError::Unsupported("falcon new_decoder_architecture without parallel_attn".into())),
        }
    } else if c.parallel_attn {
        if c.num_ln_in_parallel_attn == Some(2) {
            return Err(ModelError::Unsupported("falcon num_ln_in_parallel_attn 2 on the old architecture".into()));
        }
        (Residual::Parallel { shared_norm: true }, "input_layernorm", "")
    } else {
        (Residual::Sequential, "input_layernorm", "post_attention_layernorm")
    };
    for l in &mut spec.layers {
        l.attn.out_bias = c.bias;
        l.attn.sliding_window = None;
        if c.alibi {
            l.attn.rope = None;
            // transformers adds the bias to the raw scores before the 1/sqrt(head_dim) scale and
            // once more, divided by sqrt(head_dim), through the attention mask.
            let scale = 2.0 / (head_dim as f32).sqrt();
            l.attn.alibi = Some(alibi_slopes(heads).iter().map(|s| s * scale).collect());
        }
        if mlp_norm.is_empty() {
            l.mlp_norm = None;
        }
        l.mlp = MlpSpec::Plain { intermediate: c.base.intermediate_size, act, bias: c.bias };
        l.residual = residual;
    }
    spec.embed_name = "transformer.word_embeddings".into();
    spec.final_norm_name = "transformer.ln_f".into();
    spec.layer_names = names(attn_norm, mlp_norm);
    let groups = if c.new_decoder_architecture {
        kv_heads
    } else if c.multi_query {
        1
    } else {
        heads
    };
    spec.weight_map = weight_map(c.base.num_hidden_layers, heads * head_dim, kv_heads * head_dim, groups, c.bias);
    Ok(spec)
}
