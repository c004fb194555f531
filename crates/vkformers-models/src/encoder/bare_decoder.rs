//! A bare decoder folder (`Qwen3Model`, `LlamaModel`: what decoder embedding models such as
//! Qwen3-Embedding store) keeps its tensors without the `model.` prefix and has no LM head.
//! Its spec is the causal LM's, so each internal `model.*` parameter is read from (and saved
//! to) the unprefixed name, and the missing head is taken as tied (no head is ever run on an
//! embedding model's states; transformers' bare model has none).

use std::collections::HashSet;

use serde_json::Value;

use crate::error::Result;
use crate::spec::{MapEntry, ModelSpec};

pub(crate) fn match_bare_decoder<'a>(
    spec: &mut ModelSpec,
    config: &Value,
    stored: impl Iterator<Item = &'a str>,
) -> Result<()> {
    let first = crate::archs::encoder_common::first_architecture(config);
    if spec.encoder.is_some() || spec.seq2seq.is_some() || !first.ends_with("Model") || first.contains("For") {
        return Ok(());
    }
    let stored: HashSet<&str> = stored.collect();
    let embed = format!("{}.weight", spec.embed_name);
    let Some(short) = embed.strip_prefix("model.") else { return Ok(()) };
    if stored.contains(embed.as_str()) || !stored.contains(short) {
        return Ok(());
    }
    let strip = |s: &mut String| {
        if let Some(rest) = s.strip_prefix("model.") {
            *s = rest.to_string();
        }
    };
    spec.weight_map.iter_mut().for_each(|m| strip(&mut m.hf));
    spec.joins.iter_mut().for_each(|j| j.parts.iter_mut().for_each(strip));
    if !stored.contains(format!("{}.weight", spec.head_name).as_str()) {
        spec.tied_head = true;
    }
    let mapped: HashSet<String> = spec.weight_map.iter().flat_map(|m| m.parts.iter().map(|p| p.0.clone())).collect();
    let joined: HashSet<&String> = spec.joins.iter().map(|j| &j.internal).collect();
    for (name, _) in crate::init::expected_params(spec, config)? {
        if let (Some(rest), false, false) =
            (name.strip_prefix("model."), mapped.contains(&name), joined.contains(&name))
        {
            let parts = vec![(name.clone(), 0)];
            spec.weight_map.push(MapEntry { hf: rest.to_string(), transpose: false, parts, groups: 1 });
        }
    }
    Ok(())
}
