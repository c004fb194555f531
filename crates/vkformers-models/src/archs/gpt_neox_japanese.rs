//! `gpt_neox_japanese` (ABEJA GPT-NeoX Japanese): GPT-NeoX's naming with a bias-free fused
//! `query_key_value` laid out per head as `[heads, 3, head_dim]`, a bias-free `dense` whose
//! separate `dense_bias` exists on the last layer only (added after the projection, i.e. an
//! output bias), a sequential residual, a bias-free plain MLP of `hidden · intermediate_multiple_
//! size`, partial rotary (`rotary_pct`, default 1) on the first dims with base `rotary_emb_base`,
//! and a head `embed_out` tied to `embed_in` by default.

use serde_json::Value;
use vkformers_kernels::glu::Glu;

use super::common::{parse, BaseConfig};
use super::ln_common::{plain_act, prepare, set_norms, tied};
use crate::error::{ModelError, Result};
use crate::spec::{MapEntry, MlpSpec, ModelSpec, Norm, Residual};

const P: &str = "gpt_neox_japanese.layers";

/// `query_key_value.weight` split per head into q, k, v; the last layer's `dense_bias` read as
/// `dense.bias`.
fn weight_map(layers: usize, hidden: usize, heads: usize) -> Vec<MapEntry> {
    let parts = [("q", hidden), ("k", hidden), ("v", hidden)];
    let mut map =
        MapEntry::fused_qkv(layers, &format!("{P}.{{i}}.attention"), "query_key_value", parts, heads, &["weight"]);
    let p = format!("{P}.{}.attention", layers - 1);
    let parts = vec![(format!("{p}.dense.bias"), 0)];
    map.push(MapEntry { hf: format!("{p}.dense_bias"), transpose: false, parts, groups: 1 });
    map
}

pub fn spec(cfg: &Value) -> Result<ModelSpec> {
    let mut json = cfg.clone();
    let mult = cfg.get("intermediate_multiple_size").and_then(Value::as_f64).unwrap_or(4.0);
    let hidden = cfg.get("hidden_size").and_then(Value::as_u64).unwrap_or(2560);
    let inter = (hidden as f64 * mult) as usize;
    if !(mult > 0.0 && inter > 0 && inter <= 1 << 22) {
        return Err(ModelError::Config(format!(
            "`intermediate_multiple_size` is {mult}; hidden_size × it is the MLP width"
        )));
    }
    if let Some(map) = json.as_object_mut() {
        map.insert("intermediate_size".into(), Value::from(inter));
        // `rotary_emb_base` is the older spelling of the RoPE base.
        if let (None, Some(base)) = (map.get("rope_theta"), map.get("rotary_emb_base").cloned()) {
            map.insert("rope_theta".into(), base);
        }
    }
    let mut base: BaseConfig = parse(&json)?;
    prepare(&mut base, cfg, "gelu", 1.0);
    base.tie_word_embeddings = tied(cfg, true);
    base.head_dim = None;
    base.num_key_value_heads = None;
    base.sliding_window = None;
    let act = plain_act(base.hidden_act.as_deref().unwrap_or_default())?;
    let mut spec = base.llama_spec("gpt_neox_japanese", Glu::SwiGlu, false, false, false)?;
    // GPTNeoXJapaneseModel's nn.Embedding has no padding_idx.
    spec.padding_idx = None;
    let eps = cfg.get("layer_norm_eps").and_then(Value::as_f64).unwrap_or(1e-5);
    set_norms(&mut spec, &Norm::Layer { eps: eps as f32, bias: true });
    let last = spec.layers.len() - 1;
    for (i, l) in spec.layers.iter_mut().enumerate() {
        l.attn.out_bias = i == last;
        l.mlp = MlpSpec::Plain { intermediate: inter, act, bias: false };
        l.residual = Residual::Sequential;
    }
    spec.embed_name = "gpt_neox_japanese.embed_in".into();
    spec.final_norm_name = "gpt_neox_japanese.final_layer_norm".into();
    spec.head_name = "embed_out".into();
    let p = format!("{P}.{{i}}");
    spec.layer_names = spec.layer_names.map(|n| n.replace("model.layers.{i}", &p));
    let n = &mut spec.layer_names;
    (n.q, n.k, n.v, n.o) = (
        format!("{p}.attention.q"),
        format!("{p}.attention.k"),
        format!("{p}.attention.v"),
        format!("{p}.attention.dense"),
    );
    (n.up, n.down) = (format!("{p}.mlp.dense_h_to_4h"), format!("{p}.mlp.dense_4h_to_h"));
    spec.weight_map = weight_map(spec.layers.len(), spec.hidden, spec.layers[0].attn.heads);
    Ok(spec)
}
