//! Which parameters get weight decay: all but biases and norm weights, as the Hugging Face
//! Trainer decides (`Trainer.get_decay_parameter_names`): a parameter is exempt when its
//! lower-cased name contains `bias`, `layernorm` or `rmsnorm`, has a `norm` path component
//! (`(^|\.)norm($|\.)`) or a component ending in `_norm`, or belongs to an `nn.LayerNorm`
//! (whatever its name, e.g. GPT-2's `ln_1`), which the spec tells as a LayerNorm-kind norm.

use std::collections::HashSet;

use vkformers_models::spec::{layer_name, Norm};
use vkformers_models::ModelSpec;

/// True when the HF Trainer's name patterns exempt `name` from weight decay.
pub fn name_is_exempt(name: &str) -> bool {
    let lower = name.to_lowercase();
    if lower.contains("bias") || lower.contains("layernorm") || lower.contains("rmsnorm") {
        return true;
    }
    let parts: Vec<&str> = lower.split('.').collect();
    parts.iter().any(|p| *p == "norm" || p.ends_with("_norm"))
}

/// Module names (`model.layers.0.ln_1`) of the spec's LayerNorm-kind norms.
pub fn layer_norm_modules(spec: &ModelSpec) -> HashSet<String> {
    let is_layer = Norm::is_layer_norm;
    let mut out = HashSet::new();
    if spec.embed_norm.as_ref().is_some_and(is_layer) {
        out.insert(spec.embed_norm_name.clone());
    }
    if is_layer(&spec.final_norm) {
        out.insert(spec.final_norm_name.clone());
    }
    let n = &spec.layer_names;
    for (i, l) in spec.layers.iter().enumerate() {
        let norms = [
            (&l.attn_norm, &n.attn_norm),
            (&l.mlp_norm, &n.mlp_norm),
            (&l.post_attn_norm, &n.post_attn_norm),
            (&l.post_mlp_norm, &n.post_mlp_norm),
            (&l.attn.qk_norm, &n.q_norm),
            (&l.attn.qk_norm, &n.k_norm),
        ];
        for (norm, template) in norms {
            if norm.as_ref().is_some_and(is_layer) {
                out.insert(layer_name(template, i));
            }
        }
    }
    out
}

/// True when parameter `name` of a model with `spec` gets weight decay.
pub fn decays(spec: &ModelSpec, name: &str) -> bool {
    let module = name.rsplit_once('.').map_or("", |(m, _)| m);
    !name_is_exempt(name) && !layer_norm_modules(spec).contains(module)
}

#[cfg(test)]
mod tests {
    use super::name_is_exempt;

    #[test]
    fn hf_name_patterns() {
        for exempt in [
            "model.layers.0.input_layernorm.weight",
            "model.norm.weight",
            "model.layers.1.self_attn.q_norm.weight",
            "model.layers.0.self_attn.q_proj.bias",
            "model.final_layernorm.weight",
            "norm.weight",
        ] {
            assert!(name_is_exempt(exempt), "{exempt}");
        }
        for decays in [
            "model.layers.0.mlp.up_proj.weight",
            "lm_head.weight",
            "model.normalizer.weight",
            "transformer.h.0.ln_1.weight",
        ] {
            assert!(!name_is_exempt(decays), "{decays}");
        }
    }
}
