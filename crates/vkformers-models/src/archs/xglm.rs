//! `xglm` (Meta XGLM): OPT's pre-LN layer (biased q/k/v/out, plain MLP `fc1`/`fc2`, LayerNorms
//! with torch's eps 1e-5) under `model.`, the token embedding scaled by √d_model
//! (`scale_embedding`), and fairseq's fixed sinusoidal positions at `position + 2` (row
//! `pad_token_id` zeroed; positions `arange(T)`, not from the mask), a final `layer_norm` and a
//! head tied to the embedding.

use serde_json::{json, Value};

use crate::error::Result;
use crate::spec::{padding_idx_or, ModelSpec, Sinusoidal};

/// fairseq's frequencies in f32 as transformers computes them: `exp(j · −ln(10000)/(half − 1))`.
fn inv_freq(dim: usize) -> Vec<f32> {
    let half = dim / 2;
    let step = (10000f64.ln() / (half.max(2) - 1) as f64) as f32;
    (0..half).map(|j| (j as f32 * -step).exp()).collect()
}

pub fn spec(cfg: &Value) -> Result<ModelSpec> {
    let get = |k: &str, default: Value| cfg.get(k).filter(|v| !v.is_null()).cloned().unwrap_or(default);
    // OPT's parser under OPT's field names (XGLMConfig's defaults where a key is absent).
    let opt = json!({
        "vocab_size": get("vocab_size", json!(256008)),
        "hidden_size": get("d_model", json!(1024)),
        "num_hidden_layers": get("num_layers", json!(24)),
        "num_attention_heads": get("attention_heads", json!(16)),
        "ffn_dim": get("ffn_dim", json!(4096)),
        "activation_function": get("activation_function", json!("gelu")),
        "tie_word_embeddings": get("tie_word_embeddings", json!(true)),
    });
    super::check::config_fields(&opt)?;
    let mut spec = super::opt::spec(&opt)?;
    spec.model_type = "xglm".into();
    let scale = cfg.get("scale_embedding").and_then(Value::as_bool).unwrap_or(true);
    spec.embed_scale = if scale { (spec.hidden as f64).sqrt() as f32 } else { 1.0 };
    spec.layer_names = spec.layer_names.map(|n| n.replace("model.decoder.", "model."));
    spec.embed_name = "model.embed_tokens".into();
    spec.final_norm_name = "model.layer_norm".into();
    spec.padding_idx = padding_idx_or(cfg, 1, spec.vocab);
    spec.position_embedding = None;
    spec.position_ids = crate::spec::PositionIds::Arange;
    spec.position_offset = 0;
    spec.sinusoidal = Some(Sinusoidal { inv_freq: inv_freq(spec.hidden), offset: 2, zero_row: spec.padding_idx });
    Ok(spec)
}
