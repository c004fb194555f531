//! The linear modules of a model under their Hugging Face (PEFT) names, and PEFT's rule for
//! which of them a config targets.
//!
//! A PEFT module is one `nn.Linear`/`Conv1D` of the HF model. Most are one internal projection
//! weight; fused ones (GPT-2 `c_attn`, Phi-3 `qkv_proj`/`gate_up_proj`, GPT-NeoX
//! `query_key_value`) are split by the spec's weight map into several internal weights. Their
//! LoRA pair is still one `A [r, in]` and one `B [out, r]`: the output rows of `B·A` split
//! exactly as the weight's rows do, so each internal part gets `A` and its rows of `B`.

use crate::decoder::Weights;
use crate::error::{ModelError, Result};
use crate::lora::config::Targets;
use crate::spec::{layer_name, ModelSpec};

/// One linear module as PEFT sees it.
#[derive(Clone, Debug, PartialEq)]
pub struct LinearModule {
    /// Full HF module path, e.g. `model.layers.0.self_attn.q_proj` (`ModelSpec::module_path`).
    pub name: String,
    /// Internal weight names (`<..>.weight`) and their output rows, in the stored row order.
    pub parts: Vec<(String, usize)>,
    /// Stored rows come in this many blocks holding `rows / groups` rows of each part in turn.
    pub groups: usize,
    pub in_features: usize,
    pub out_features: usize,
    /// The stored weight is `[in, out]` (Conv1D).
    pub conv1d: bool,
    /// The LM head (never part of `all-linear`).
    pub is_head: bool,
}

/// Every LoRA-capable linear module of a model, layer by layer (q, k, v, o, gate, up, down),
/// then the untied head; fused HF modules once.
pub fn linear_modules(spec: &ModelSpec, w: &Weights) -> Result<Vec<LinearModule>> {
    let mut internal: Vec<(String, bool)> = Vec::new();
    for (i, templates) in layer_templates(spec) {
        for t in &templates {
            let name = format!("{}.weight", layer_name(t, i));
            if w.opt(&name).is_some() && !internal.iter().any(|(x, _)| *x == name) {
                internal.push((name, false));
            }
        }
    }
    let encoder_head = spec.encoder.as_ref().map(|e| &e.head);
    // An encoder's task heads have no LM decoder; an untied masked-LM decoder is the head.
    let lm_head = encoder_head.is_none_or(|h| matches!(h, crate::encoder::EncoderHead::MaskedLm(_)));
    if !spec.tied_head && lm_head {
        internal.push((format!("{}.weight", spec.head_name), true));
    }
    // An encoder head's own Linear layers (the MLM transform, a classifier's pooler/dense and
    // output): PEFT adapts them when targeted; the output projection is the head, as the LM
    // head is (never part of `all-linear`).
    for (name, is_head) in encoder_head.map(head_linears).unwrap_or_default() {
        let name = format!("{name}.weight");
        if w.opt(&name).is_some() {
            internal.push((name, is_head));
        }
    }
    let mut out: Vec<LinearModule> = Vec::new();
    for (name, is_head) in internal {
        if out.iter().any(|m| m.parts.iter().any(|p| p.0 == name)) {
            continue;
        }
        let rows_of = |n: &str| -> Result<(usize, usize)> {
            let s = w.get(n)?.shape();
            Ok((s[0], s[1]))
        };
        let entry = spec.weight_map.iter().find(|e| e.parts.iter().any(|p| p.0 == name));
        let (hf, part_names, groups, conv1d) = match entry {
            Some(e) => (e.hf.clone(), e.parts.iter().map(|p| p.0.clone()).collect(), e.groups.max(1), e.transpose),
            None => (name.clone(), vec![name.clone()], 1, false),
        };
        let mut parts = Vec::new();
        let mut in_features = 0;
        for p in part_names {
            let (rows, cols) = rows_of(&p)?;
            in_features = cols;
            parts.push((p, rows));
        }
        let module = spec.module_path(hf.strip_suffix(".weight").unwrap_or(&hf));
        let out_features = parts.iter().map(|p| p.1).sum();
        out.push(LinearModule { name: module, parts, groups, in_features, out_features, conv1d, is_head });
    }
    Ok(out)
}

/// The linear modules' name templates of every layer, `(layer index, templates)` in module
/// order: a decoder's q, k, v (MLA's q_a, q_b, kv_a, kv_b where the layer has latent
/// attention), o, gate, up, down; an encoder-decoder's encoder stack, then its decoder stack with
/// the cross-attention's q, k, v, o after the self-attention's.
fn layer_templates(spec: &ModelSpec) -> Vec<(usize, Vec<String>)> {
    let n = &spec.layer_names;
    let Some(s) = &spec.seq2seq else {
        return spec
            .layers
            .iter()
            .enumerate()
            .map(|(i, layer)| {
                let mla = layer.attn.mla.as_ref().map(|m| &m.names);
                let mla = mla.into_iter().flat_map(|m| [&m.q_a, &m.q_b, &m.kv_a, &m.kv_b]);
                let t = [&n.q, &n.k, &n.v].into_iter().chain(mla).chain([&n.o, &n.gate, &n.up, &n.down]);
                // JetMoE's attention router is an nn.Linear (its experts are packed, not modules).
                let moa = layer.attn.moa.as_ref().and_then(|m| m.router.strip_suffix(".weight").map(String::from));
                (i, t.cloned().chain(moa).chain(moe_templates(&layer.mlp)).collect())
            })
            .collect();
    };
    let (e, c) = (&s.encoder_names, &s.cross);
    let enc: Vec<String> = [&e.q, &e.k, &e.v, &e.o, &e.gate, &e.up, &e.down].map(String::clone).to_vec();
    let dec: Vec<String> =
        [&n.q, &n.k, &n.v, &n.o, &c.q, &c.k, &c.v, &c.o, &n.gate, &n.up, &n.down].map(String::clone).to_vec();
    // Switch Transformers' sparse layers: the router and every expert's wi / wo (in place of the
    // dense wi / wo, which the layer does not have).
    let with_experts = |decoder: bool, i: usize, mut t: Vec<String>| {
        if let Some(sw) = s.switch.as_ref().filter(|sw| sw.is_sparse(decoder, i)) {
            t.push(sw.names(decoder, 0).0);
            for x in 0..sw.experts {
                let (_, wi, wo) = sw.names(decoder, x);
                t.extend([wi, wo]);
            }
        }
        (i, t)
    };
    let encoder = (0..s.encoder_layers.len()).map(|i| with_experts(false, i, enc.clone()));
    encoder.chain((0..spec.layers.len()).map(|i| with_experts(true, i, dec.clone()))).collect()
}

/// An MoE layer's Linear modules: the router and the shared expert's projections (and gate).
/// The experts themselves are packed parameters, not modules.
fn moe_templates(mlp: &crate::spec::MlpSpec) -> Vec<String> {
    let crate::spec::MlpSpec::Moe(m) = mlp else { return Vec::new() };
    let router = m.names.router.strip_suffix(".weight").map(String::from);
    let shared = m.shared.iter().flat_map(|s| {
        let rest = s.up_proj.iter().chain([&s.down_proj]).chain(s.gate.iter()).cloned();
        std::iter::once(s.gate_proj.clone()).chain(rest)
    });
    router.into_iter().chain(shared).collect()
}

/// The Linear modules of an encoder head, and whether each is the output layer.
fn head_linears(head: &crate::encoder::EncoderHead) -> Vec<(String, bool)> {
    use crate::encoder::EncoderHead;
    match head {
        // No transform (EuroBERT): the decoder alone, an output layer handled as `lm_head`.
        EncoderHead::MaskedLm(h) if h.dense.is_empty() => Vec::new(),
        EncoderHead::MaskedLm(h) => vec![(h.dense.clone(), false)],
        EncoderHead::SequenceClassification(h) => vec![(h.dense.clone(), false), (h.out.clone(), true)],
        EncoderHead::TokenClassification { out, transform, .. } => {
            transform.iter().map(|t| (t.dense.clone(), false)).chain([(out.clone(), true)]).collect()
        }
        EncoderHead::Bare { .. } => Vec::new(),
    }
}

/// PEFT's `check_target_module_exists` for one module name.
pub struct Matcher {
    targets: Targets,
    regex: Option<regex::Regex>,
}

impl Matcher {
    pub fn new(targets: &Targets) -> Result<Self> {
        let regex = match targets {
            Targets::Regex(r) => Some(
                regex::Regex::new(&format!("^(?:{r})$"))
                    .map_err(|e| ModelError::Config(format!("target_modules regex `{r}`: {e}")))?,
            ),
            _ => None,
        };
        Ok(Matcher { targets: targets.clone(), regex })
    }

    /// Whether `m` gets a LoRA pair.
    pub fn matches(&self, m: &LinearModule) -> bool {
        match (&self.targets, &self.regex) {
            (Targets::AllLinear, _) => !m.is_head,
            (_, Some(re)) => re.is_match(&m.name),
            (Targets::Names(names), _) => names.iter().any(|t| name_matches(&m.name, t)),
            (Targets::Regex(_), None) => false,
        }
    }
}

/// A module name matches a target name when equal to it or ending with `.target`.
pub fn name_matches(module: &str, target: &str) -> bool {
    module == target || module.ends_with(&format!(".{target}"))
}

/// The modules of `all` that `targets` selects; an error when none does (a typo in a name).
pub fn targeted(all: &[LinearModule], targets: &Targets) -> Result<Vec<LinearModule>> {
    let m = Matcher::new(targets)?;
    let hit: Vec<LinearModule> = all.iter().filter(|x| m.matches(x)).cloned().collect();
    if hit.is_empty() {
        let names: Vec<&str> = all.iter().map(|x| x.name.rsplit('.').next().unwrap_or(&x.name)).collect();
        let mut names: Vec<&str> = names.into_iter().collect::<std::collections::BTreeSet<_>>().into_iter().collect();
        names.dedup();
        // The targets as the user wrote them (not Rust's Debug form of the enum).
        let given = match targets {
            Targets::AllLinear => "all-linear".to_string(),
            Targets::Regex(r) => format!("`{r}`"),
            Targets::Names(n) => n.join(","),
        };
        return Err(ModelError::Config(format!(
            "target_modules {given} matches no linear module of this model; its modules are {}",
            names.join(", ")
        )));
    }
    Ok(hit)
}
