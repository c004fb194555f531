//! `ctrl` (Salesforce CTRL): pre-LN layers (`layernorm1`/`layernorm2`, eps 1e-6 fixed) with
//! biased `Wq`/`Wk`/`Wv`/`dense`, a ReLU MLP `ffn.0`/`ffn.2` with biases, the token embedding
//! scaled by √n_embd, fixed sinusoidal positions `[sin(p·r_j), cos(p·r_j)]` with
//! `r_j = 1 / 10000^(2j/d)` (f32, positions `arange(T)`), a final `layernorm`
//! (`layer_norm_epsilon`) and a tied head with a bias.

use serde_json::{json, Value};

use crate::error::Result;
use crate::spec::{ModelSpec, Norm, Sinusoidal};

/// `1 / torch.pow(10000, 2j / d)` in f32.
fn inv_freq(d: usize) -> Vec<f32> {
    (0..d / 2).map(|j| 1.0 / 10000f32.powf((2 * j) as f32 / d as f32)).collect()
}

pub fn spec(cfg: &Value) -> Result<ModelSpec> {
    let get = |k: &str, default: Value| cfg.get(k).filter(|v| !v.is_null()).cloned().unwrap_or(default);
    let opt = json!({
        "vocab_size": get("vocab_size", json!(246534)),
        "hidden_size": get("n_embd", json!(1280)),
        "num_hidden_layers": get("n_layer", json!(48)),
        "num_attention_heads": get("n_head", json!(16)),
        "ffn_dim": get("dff", json!(8192)),
        "activation_function": "relu",
        "tie_word_embeddings": get("tie_word_embeddings", json!(true)),
    });
    super::check::config_fields(&opt)?;
    let mut spec = super::opt::spec(&opt)?;
    spec.model_type = "ctrl".into();
    spec.embed_scale = (spec.hidden as f64).sqrt() as f32;
    let norm = Norm::Layer { eps: 1e-6, bias: true };
    for l in &mut spec.layers {
        (l.attn_norm, l.mlp_norm) = (Some(norm.clone()), Some(norm.clone()));
    }
    let eps = cfg.get("layer_norm_epsilon").and_then(Value::as_f64).unwrap_or(1e-6);
    spec.final_norm = Norm::Layer { eps: eps as f32, bias: true };
    let p = "transformer.h.{i}";
    let n = &mut spec.layer_names;
    (n.attn_norm, n.mlp_norm) = (format!("{p}.layernorm1"), format!("{p}.layernorm2"));
    let a = format!("{p}.multi_head_attention");
    (n.q, n.k, n.v, n.o) = (format!("{a}.Wq"), format!("{a}.Wk"), format!("{a}.Wv"), format!("{a}.dense"));
    (n.up, n.down) = (format!("{p}.ffn.0"), format!("{p}.ffn.2"));
    spec.embed_name = "transformer.w".into();
    spec.final_norm_name = "transformer.layernorm".into();
    spec.head_bias = true;
    // CTRLModel's nn.Embedding has no padding_idx.
    spec.padding_idx = None;
    spec.position_embedding = None;
    spec.position_ids = crate::spec::PositionIds::Arange;
    spec.position_offset = 0;
    spec.sinusoidal = Some(Sinusoidal { inv_freq: inv_freq(spec.hidden), offset: 0, zero_row: None });
    Ok(spec)
}
