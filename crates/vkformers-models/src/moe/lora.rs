//! Which LoRA targets an MoE model takes, and LoRA on the packed expert parameters themselves.
//!
//! Since transformers 5 packs the experts, PEFT rewrites the module names it used for expert
//! projections and routers (`w1`/`w2`/`w3`, `gate_proj`/`up_proj`/`down_proj`, `gate`) in
//! `target_modules` into parameter targets on the packed tensors, for every module of those
//! names (the shared expert's and a dense layer's MLP too); such module targets are refused
//! rather than adapted differently. Other Linear modules (attention, Hunyuan's router `gate.wg`,
//! Qwen2-MoE's `shared_expert_gate`, ...) are adapted. The packed expert tensors are adapted when
//! named in `target_parameters` (`experts.gate_up_proj`, `experts.down_proj`; JetMoE's
//! `input_linear.weight` / `output_linear.weight`, of its attention and MLP experts), as PEFT's
//! `ParamWrapper` does ([`ExpertParam`], [`expert_weight`]).

use crate::error::{ModelError, Result};
use crate::lora::{LinearModule, Targets};
use crate::spec::{layer_name, MlpSpec, ModelSpec};

/// The module names PEFT turns into expert or router parameter targets.
const PARAMETER_TARGETS: [&str; 7] = ["w1", "w2", "w3", "gate", "gate_proj", "up_proj", "down_proj"];

/// An error when `spec` has MoE layers and `targets` (or the modules they matched) name a module
/// PEFT would adapt as packed expert or router parameters.
pub fn refuse_parameter_targets(spec: &ModelSpec, targets: &Targets, matched: &[LinearModule]) -> Result<()> {
    if !spec.layers.iter().any(|l| matches!(l.mlp, MlpSpec::Moe(_))) {
        return Ok(());
    }
    let last = |n: &str| n.rsplit('.').next().unwrap_or(n).to_string();
    let listed = match targets {
        Targets::Names(names) => names.iter().map(|n| last(n)).collect(),
        _ => Vec::new(),
    };
    let hit = listed
        .into_iter()
        .chain(matched.iter().map(|m| last(&m.name)))
        .find(|n| PARAMETER_TARGETS.contains(&n.as_str()));
    match hit {
        None => Ok(()),
        Some(n) => Err(ModelError::Unsupported(format!(
            "LoRA target `{n}` on an MoE model: PEFT adapts it as the packed experts' or router's parameters \
             (target_parameters), which vkformers does not rewrite; name the packed tensors in target_parameters \
             (`experts.gate_up_proj`, `experts.down_proj`) or target attention or other modules"
        ))),
    }
}

/// One packed expert parameter an adapter targets (PEFT's `target_parameters`): the in-memory
/// tensor `name` (`model.layers.{i}.mlp.experts.gate_up_proj`, held `[E·out, in]`, PEFT's
/// `[E, out, in]`), and the PEFT module path its LoRA pair is saved under (the experts module,
/// with one `.base_layer` per parameter of that module wrapped after it: PEFT nests one
/// `ParamWrapper` per parameter, the first parameter innermost). `transposed`: the stack is
/// held `[E, in, out]` and its experts module says so (`is_transposed`, gpt-oss), so PEFT adapts
/// it as such: `W'_e = W_e + scale · (B_e A_e)ᵀ`.
#[derive(Clone, Debug, PartialEq)]
pub struct ExpertParam {
    pub name: String,
    pub module: String,
    pub experts: usize,
    pub out_features: usize,
    pub in_features: usize,
    pub transposed: bool,
}

/// Whether the full parameter name `param` matches a `target_parameters` entry (PEFT: equal, or
/// ending with `.entry`).
fn param_matches(param: &str, targets: &[String]) -> bool {
    targets.iter().any(|t| param == t || param.ends_with(&format!(".{t}")))
}

/// The packed expert parameters `targets` selects, layer by layer in PEFT's module order (JetMoE's
/// attention experts `input_linear`, `output_linear`; then the MLP's stacks as transformers
/// declares them: gate_up, then down). An error when a target matches nothing or DBRX's
/// stacks.
pub fn expert_params(spec: &ModelSpec, w: &crate::decoder::Weights, targets: &[String]) -> Result<Vec<ExpertParam>> {
    expert_params_by(spec, targets, &|name: &str| w.get(name).map(|t| (t.rows(), t.last_dim())))
}

/// [`expert_params`] from the spec alone (no loaded weights: the host merge).
pub fn expert_params_of_spec(spec: &ModelSpec, targets: &[String]) -> Result<Vec<ExpertParam>> {
    let mut shapes: std::collections::HashMap<String, Vec<usize>> = std::collections::HashMap::new();
    for (i, l) in spec.layers.iter().enumerate() {
        if let Some(a) = &l.attn.moa {
            shapes.extend(a.params(i, spec.hidden, l.attn.kv_heads * l.attn.head_dim));
        }
        if let MlpSpec::Moe(m) = &l.mlp {
            shapes.extend(m.params(i, spec.hidden));
        }
    }
    expert_params_by(spec, targets, &|name: &str| {
        let s = shapes.get(name).ok_or_else(|| ModelError::Weights(format!("no expert stack `{name}`")))?;
        let inp = *s.last().unwrap_or(&0);
        Ok((s.iter().product::<usize>() / inp.max(1), inp))
    })
}

/// The packed expert stacks of layer `i` that `targets` selects, `(name, experts, transposed)`
/// in module order.
fn layer_stacks(l: &crate::spec::LayerSpec, i: usize, targets: &[String]) -> Result<Vec<(String, usize, bool)>> {
    let mut stacks = Vec::new();
    if let Some(a) = &l.attn.moa {
        stacks.extend([&a.input, &a.output].map(|t| (layer_name(t, i), a.experts, false)));
    }
    if let MlpSpec::Moe(m) = &l.mlp {
        // PEFT reads a 3-D parameter as [E, out, in] unless its experts module says
        // `is_transposed` (gpt-oss's biased experts do; Llama 4's in-out experts do not, so their
        // `[E, H, 2I]` takes `B_e [H, r] · A_e [r, 2I]` in the stored layout, like any other).
        let mlp = [&m.names.gate_up, &m.names.down].map(|t| layer_name(t, i));
        // DBRX's separate 2-D stacks (`w1`, `v1`, `w2`): PEFT wraps the module transformers'
        // DbrxExperts reads them from (`self.mlp.v1`), which then fails in PEFT itself.
        let up = m.names.up.iter().map(|t| layer_name(t, i));
        if let Some(hit) = up.clone().chain(mlp.clone()).find(|n| m.names.up.is_some() && param_matches(n, targets)) {
            return Err(ModelError::Unsupported(format!(
                "LoRA target_parameters on `{hit}`: DBRX's expert stacks, which PEFT 0.21 cannot run either \
                 (its ParamWrapper hides `mlp.v1` from transformers' DbrxExperts)"
            )));
        }
        stacks.extend(mlp.map(|n| (n, m.experts, m.biased.is_some())));
    }
    stacks.retain(|(n, _, _)| param_matches(n, targets));
    Ok(stacks)
}

/// [`expert_params`] with the `(rows, in)` of each stack from `shape_of`.
fn expert_params_by(
    spec: &ModelSpec,
    targets: &[String],
    shape_of: &dyn Fn(&str) -> Result<(usize, usize)>,
) -> Result<Vec<ExpertParam>> {
    let mut out = Vec::new();
    if targets.is_empty() {
        return Ok(out);
    }
    let module_of = |name: &str| name.rsplit_once('.').map_or(name.to_string(), |(m, _)| m.to_string());
    for (i, l) in spec.layers.iter().enumerate() {
        let hit = layer_stacks(l, i, targets)?;
        for (j, (name, experts, transposed)) in hit.iter().enumerate() {
            // PEFT nests one ParamWrapper per targeted parameter of a module, the first innermost:
            // one `.base_layer` for each later parameter of the same module.
            let module = module_of(name);
            let later = hit[j + 1..].iter().filter(|(n, _, _)| module_of(n) == module).count();
            let (rows, last) = shape_of(name)?;
            let (out_features, in_features) = if *transposed { (last, rows / experts) } else { (rows / experts, last) };
            out.push(ExpertParam {
                name: name.clone(),
                module: format!("{module}{}", ".base_layer".repeat(later)),
                experts: *experts,
                out_features,
                in_features,
                transposed: *transposed,
            });
        }
    }
    if out.is_empty() {
        return Err(ModelError::Config(format!(
            "target_parameters {targets:?} match no packed expert parameter of this model \
             (they are named like `experts.gate_up_proj`, `experts.down_proj`, or JetMoE's \
             `input_linear.weight`, `output_linear.weight`)"
        )));
    }
    Ok(out)
}

/// PEFT's `lora_B [out, E·r]` (expert e's column j at `j·E + e`) as the device's `[E·out, r]`
/// (expert e's `B_e [out, r]` a row block), and back.
pub fn b_to_device(b: &[f32], (experts, out, r): (usize, usize, usize)) -> Vec<f32> {
    let mut d = vec![0.0; b.len()];
    for e in 0..experts {
        for o in 0..out {
            for j in 0..r {
                d[(e * out + o) * r + j] = b[o * r * experts + j * experts + e];
            }
        }
    }
    d
}

/// The inverse of [`b_to_device`].
pub fn b_from_device(d: &[f32], (experts, out, r): (usize, usize, usize)) -> Vec<f32> {
    let mut b = vec![0.0; d.len()];
    for e in 0..experts {
        for o in 0..out {
            for j in 0..r {
                b[o * r * experts + j * experts + e] = d[(e * out + o) * r + j];
            }
        }
    }
    b
}

/// The LoRA term of a packed expert parameter on the device: `A [E·r, in]` (PEFT's layout:
/// expert e's `A_e [r, in]` a row block) and `B [E·out, r]` ([`b_to_device`]).
#[derive(Clone)]
pub struct ExpertTerm {
    pub a: vkformers_tensor::Tensor,
    pub b: vkformers_tensor::Tensor,
    pub scale: f32,
    pub experts: usize,
    /// The stack is `[E, in, out]` ([`ExpertParam::transposed`]): `a` is held `[E·in, r]`
    /// ([`a_to_device`]) so that `(B_e A_e)ᵀ = A_eᵀ B_eᵀ` is one batched `matmul_nt`.
    pub transposed: bool,
}

/// PEFT's `A [E·r, in]` as `[E·in, r]` (expert e's `A_eᵀ` a row block) for a transposed stack.
pub fn a_to_device(a: &[f32], (experts, inp, r): (usize, usize, usize)) -> Vec<f32> {
    let mut d = vec![0.0; a.len()];
    for e in 0..experts {
        for j in 0..r {
            for i in 0..inp {
                d[(e * inp + i) * r + j] = a[(e * r + j) * inp + i];
            }
        }
    }
    d
}

/// The inverse of [`a_to_device`].
pub fn a_from_device(d: &[f32], (experts, inp, r): (usize, usize, usize)) -> Vec<f32> {
    let mut a = vec![0.0; d.len()];
    for e in 0..experts {
        for j in 0..r {
            for i in 0..inp {
                a[(e * r + j) * inp + i] = d[(e * inp + i) * r + j];
            }
        }
    }
    a
}

/// The expert stack `name` `[E·out, in]` with its LoRA delta when the adapter has one, as PEFT's
/// `ParamWrapper` forms it: `W'_e = W_e + scale · B_e A_e` (a batched `[E, out, r] · [E, r, in]`),
/// so the grouped products, and their gradients to A and B, see the adapted weight.
pub fn expert_weight(
    g: &vkformers_tensor::Graph<'_>,
    w: &crate::decoder::Weights,
    name: &str,
) -> Result<vkformers_tensor::Tensor> {
    use vkformers_tensor::ops::{broadcast, matmul, shape};
    let base = w.get(name)?;
    let Some(t) = w.lora().expert(name) else { return Ok(base.clone()) };
    let e = t.experts;
    let r = t.b.last_dim();
    let delta = if t.transposed {
        // [E, in, r] · [E, out, r]ᵀ = [E, in, out], the stored layout.
        let (inp, out) = (base.rows() / e, base.last_dim());
        let a = shape::reshape(g, &t.a, &[e, inp, r])?;
        matmul::matmul_nt(g, &a, &shape::reshape(g, &t.b, &[e, out, r])?)?
    } else {
        let (out, inp) = (base.rows() / e, base.last_dim());
        let a = shape::reshape(g, &t.a, &[e, r, inp])?;
        matmul::matmul(g, &shape::reshape(g, &t.b, &[e, out, r])?, &a)?
    };
    // In the stored shape ([E·out, in], or a 3-D [E, out, in] / [E, in, out]).
    let delta = shape::reshape(g, &delta, base.shape())?;
    Ok(broadcast::add(g, base, &broadcast::scale(g, &delta, t.scale)?)?)
}

/// `scale · B_e A_e` of every expert as the stack `[E·out, in]` (f64; transposed, `[E·in, out]`),
/// from PEFT's `A [E·r, in]` and `B [out, E·r]` (host merge: `W' = W + delta`, as PEFT's
/// `ParamWrapper.merge`).
pub fn expert_delta(p: &ExpertParam, a: &[f32], b: &[f32], r: usize, scale: f64) -> Vec<f64> {
    let (e_n, out, inp) = (p.experts, p.out_features, p.in_features);
    let mut d = vec![0.0; e_n * out * inp];
    for e in 0..e_n {
        for o in 0..out {
            for i in 0..inp {
                let s: f64 =
                    (0..r).map(|j| f64::from(b[o * r * e_n + j * e_n + e]) * f64::from(a[(e * r + j) * inp + i])).sum();
                let at = if p.transposed { (e * inp + i) * out + o } else { (e * out + o) * inp + i };
                d[at] = scale * s;
            }
        }
    }
    d
}
