//! The text backbone of image-text wrappers (`gemma3`, `mistral3`): their `config.json` holds
//! the language model's config under `text_config`, and their checkpoints (as transformers 5.24
//! saves them, and as the Hub ships them) store its weights under `language_model.model.*` and
//! `language_model.lm_head`, beside a vision tower and a projector. The text model runs as its
//! own type; the other tensors are carried: not loaded, and written back unchanged on save.

use serde_json::Value;

use crate::error::{ModelError, Result};
use crate::spec::{MlpSpec, ModelSpec, VisionTower};

/// Stored prefixes of the wrapper's own (non-text) modules.
const CARRIED: [&str; 2] = ["vision_tower.", "multi_modal_projector."];

pub fn gemma3(cfg: &Value) -> Result<ModelSpec> {
    wrapper(("gemma3", VisionTower::SiglipGemma3), "gemma3_text", cfg)
}

pub fn mistral3(cfg: &Value) -> Result<ModelSpec> {
    wrapper(("mistral3", VisionTower::PixtralMistral3), "mistral", cfg)
}

/// The text spec of `cfg["text_config"]` (of `default_type` when it names none) under the
/// wrapper's stored names.
fn wrapper((model_type, vision): (&str, VisionTower), default_type: &str, cfg: &Value) -> Result<ModelSpec> {
    let mut text = cfg
        .get("text_config")
        .filter(|t| t.is_object())
        .cloned()
        .ok_or_else(|| ModelError::Config(format!("a `{model_type}` config.json needs a `text_config` object")))?;
    if text.get("model_type").is_none() {
        text["model_type"] = default_type.into();
    }
    // The wrapper's own tie_word_embeddings decides whether the head is the embedding.
    if let Some(tie) = cfg.get("tie_word_embeddings") {
        text["tie_word_embeddings"] = tie.clone();
    }
    let mut spec = super::spec_from_config(&text)?;
    if spec.layers.iter().any(|l| matches!(l.mlp, MlpSpec::Moe(_))) || spec.encoder.is_some() {
        return Err(ModelError::Unsupported(format!("a `{model_type}` wrapper around a MoE or encoder text model")));
    }
    rename_stored(&mut spec, &|n: &str| match n.strip_prefix("model.") {
        Some(rest) => format!("language_model.model.{rest}"),
        None => format!("language_model.{n}"),
    });
    spec.model_type = model_type.into();
    spec.carried = CARRIED.iter().map(|p| p.to_string()).collect();
    spec.vision = Some(vision);
    // transformers' modules: `model.language_model.*` and `lm_head` (what PEFT names).
    spec.module_paths = vec![
        ("language_model.model.".into(), "model.language_model.".into()),
        ("language_model.lm_head".into(), "lm_head".into()),
    ];
    Ok(spec)
}

/// Applies `f` to every stored (and internal) tensor name of `spec`.
fn rename_stored(spec: &mut ModelSpec, f: &dyn Fn(&str) -> String) {
    let rename = |s: &mut String| {
        if !s.is_empty() {
            *s = f(s);
        }
    };
    for s in [&mut spec.embed_name, &mut spec.embed_norm_name, &mut spec.final_norm_name, &mut spec.head_name] {
        rename(s);
    }
    for s in spec.position_embedding.iter_mut().chain(&mut spec.project_in).chain(&mut spec.project_out) {
        rename(s);
    }
    spec.layer_names = spec.layer_names.map(|s| if s.is_empty() { String::new() } else { f(s) });
    for l in &mut spec.layers {
        if let Some((_, template)) = &mut l.attn.out_norm {
            rename(template);
        }
        if let Some(template) = &mut l.attn.sinks {
            rename(template);
        }
        if let MlpSpec::GatedAct { sub_norm: Some((_, template)), .. } = &mut l.mlp {
            rename(template);
        }
    }
    for e in &mut spec.weight_map {
        rename(&mut e.hf);
        e.parts.iter_mut().for_each(|(p, _)| rename(p));
    }
    for j in &mut spec.joins {
        rename(&mut j.internal);
        j.parts.iter_mut().for_each(rename);
    }
}
