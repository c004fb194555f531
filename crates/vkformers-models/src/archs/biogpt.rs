//! `biogpt` (Microsoft BioGPT): OPT's layer (pre-LayerNorm with bias, biased q/k/v/out, plain MLP
//! `fc1`/`fc2` with biases, final LayerNorm, tied head) under `biogpt.`, with the token embedding
//! scaled by √hidden (`scale_embedding`) and learned positions read at `position + 2`. Unlike OPT,
//! `BioGptModel` always passes `arange(T) + past` as the position ids, so positions do not come
//! from the mask. Every LayerNorm is `nn.LayerNorm(hidden)` with torch's eps 1e-5: the config's
//! `layer_norm_eps` is not read by transformers, so it is not read here either.

use serde_json::{json, Value};

use crate::error::Result;
use crate::spec::{padding_idx_or, ModelSpec};

pub fn spec(cfg: &Value) -> Result<ModelSpec> {
    let get = |k: &str| cfg.get(k).cloned().unwrap_or(Value::Null);
    // OPT's parser under OPT's field names (BioGptConfig's defaults where a key is absent).
    let mut opt = json!({
        "vocab_size": get("vocab_size"),
        "hidden_size": get("hidden_size"),
        "num_hidden_layers": get("num_hidden_layers"),
        "num_attention_heads": get("num_attention_heads"),
        "ffn_dim": get("intermediate_size"),
        "activation_function": cfg.get("hidden_act").cloned().unwrap_or(json!("gelu")),
        "tie_word_embeddings": cfg.get("tie_word_embeddings").cloned().unwrap_or(json!(true)),
    });
    if let Some(map) = opt.as_object_mut() {
        map.retain(|_, v| !v.is_null());
    }
    super::check::config_fields(&opt)?;
    let mut spec = super::opt::spec(&opt)?;
    spec.model_type = "biogpt".into();
    let scale = cfg.get("scale_embedding").and_then(Value::as_bool).unwrap_or(true);
    spec.embed_scale = if scale { (spec.hidden as f64).sqrt() as f32 } else { 1.0 };
    spec.position_ids = crate::spec::PositionIds::Arange;
    spec.layer_names = spec.layer_names.map(|n| n.replace("model.decoder.", "biogpt."));
    spec.embed_name = "biogpt.embed_tokens".into();
    spec.position_embedding = Some("biogpt.embed_positions".into());
    spec.final_norm_name = "biogpt.layer_norm".into();
    spec.head_name = "output_projection".into();
    spec.padding_idx = padding_idx_or(cfg, 1, spec.vocab);
    Ok(spec)
}
