//! `gpt_neo` (GPT-Neo): GPT-2's layout (learned positions, LayerNorm with bias, plain GELU-tanh
//! MLP with biases, tied head) with `nn.Linear` weights, separate bias-free q/k/v and a biased
//! `out_proj` under `attn.attention`, unscaled attention scores (scale 1), and per-layer `global`
//! or `local` attention from `attention_types` (`[[kinds, repeat], ...]`); local layers see the
//! last `window_size` positions.

use serde_json::{json, Value};

use crate::error::{ModelError, Result};
use crate::spec::ModelSpec;

/// `attention_types` expanded as `GPTNeoConfig.expand_attention_types_params` does: whether each
/// layer is local.
fn local_layers(cfg: &Value, n: usize) -> Result<Vec<bool>> {
    let bad = || ModelError::Config("gpt_neo `attention_types` is not [[kinds, repeat], ...]".into());
    let default = json!([[["global", "local"], n / 2]]);
    let types = cfg.get("attention_types").filter(|v| !v.is_null()).unwrap_or(&default);
    let mut out = Vec::new();
    for item in types.as_array().ok_or_else(bad)? {
        let (kinds, repeat) = (item.get(0).and_then(Value::as_array), item.get(1).and_then(Value::as_u64));
        // A hostile repeat count must not grow the list past the layers it has to match.
        for _ in 0..repeat.ok_or_else(bad)?.min(n as u64 + 1) {
            for k in kinds.ok_or_else(bad)? {
                out.push(match k.as_str() {
                    Some("local") => true,
                    Some("global") => false,
                    _ => return Err(ModelError::Unsupported(format!("gpt_neo attention type {k}"))),
                });
            }
        }
    }
    if out.len() != n {
        return Err(ModelError::Config(format!("attention_types gives {} layers for num_layers {n}", out.len())));
    }
    Ok(out)
}

pub fn spec(cfg: &Value) -> Result<ModelSpec> {
    // GPT-2's parser under GPT-2's field names.
    let mut gpt2 = cfg.clone();
    if let Some(map) = gpt2.as_object_mut() {
        let renames = [("hidden_size", "n_embd"), ("num_layers", "n_layer"), ("num_heads", "n_head")];
        for (from, to) in renames.into_iter().chain([("intermediate_size", "n_inner")]) {
            if let Some(v) = map.remove(from) {
                map.insert(to.into(), v);
            }
        }
    }
    // The renamed sizes get the registry's range checks (heads > 0, bounded layer count).
    super::check::config_fields(&gpt2)?;
    let mut spec = super::gpt2::spec(&gpt2)?;
    // Its `_init_weights` draws every matrix at one std (no GPT-2 residual scaling).
    spec.residual_init = crate::spec::ResidualInit::Plain;
    spec.model_type = "gpt_neo".into();
    let local = local_layers(cfg, spec.layers.len())?;
    let window = cfg.get("window_size").and_then(Value::as_u64).unwrap_or(256) as u32;
    for (l, is_local) in spec.layers.iter_mut().zip(local) {
        l.attn.qkv_bias = false;
        l.attn.scale = 1.0;
        l.attn.sliding_window = is_local.then_some(window);
    }
    spec.weight_map = Vec::new();
    let n = &mut spec.layer_names;
    let p = "transformer.h.{i}.attn.attention";
    (n.q, n.k, n.v, n.o) =
        (format!("{p}.q_proj"), format!("{p}.k_proj"), format!("{p}.v_proj"), format!("{p}.out_proj"));
    Ok(spec)
}
