//! Parity checks against the fixtures written by `tools/parity/make_fixtures.py` (decoders) and
//! `make_encoder_fixtures.py` (encoders: masked-LM or classifier loss): logits and loss, every gradient, every parameter after two AdamW steps. Used by the tests and by
//! `vkformers architectures`, so the registry's status is what actually passes.

use std::collections::HashMap;
use std::path::Path;

use serde::Serialize;
use vkformers_io::ModelWeights;
use vkformers_tensor::optim::{AdamW, Param};
use vkformers_tensor::{Graph, Tensor};
use vkformers_vk::Context;

use crate::decoder::{causal_lm_loss, forward_with_aux, Batch};
use crate::encoder::{self, ClsLabels, EncoderBatch};
use crate::error::{ModelError, Result};
use crate::model::Model;
use crate::seq2seq::Seq2SeqBatch;
use crate::weights::HostTensor;

/// Tolerances of the harness (fp32): relative for logits and loss, per-tensor relative L2 for
/// gradients, max absolute after two AdamW steps.
pub const TOL_LOGITS: f64 = 1e-5;
pub const TOL_GRAD: f64 = 1e-4;
pub const TOL_STEP: f64 = 1e-5;
/// A reference gradient this small next to the model's largest (relative L2 norm) is zero in exact
/// arithmetic and only rounding noise (OPT's `k_proj.bias`: adding q·b to a whole score row leaves
/// the softmax unchanged); such a tensor has no relative error to speak of, so ours must be as
/// close to zero instead: ‖g − g_ref‖ at most this much of the largest reference gradient norm.
pub const TOL_GRAD_ZERO: f64 = 1e-6;

/// What one fixture gave.
#[derive(Clone, Debug, Default, Serialize)]
pub struct ParityReport {
    pub fixture: String,
    pub model_type: String,
    pub logits_rel: f64,
    pub loss_rel: f64,
    /// Worst per-tensor ‖g − g_ref‖/‖g_ref‖.
    pub grad_rel: f64,
    /// Tensors whose reference gradient is zero in theory (norm below `TOL_GRAD_ZERO` of the
    /// largest), and their worst ‖g − g_ref‖ over the largest reference gradient norm.
    pub grad_zero_tensors: usize,
    pub grad_zero_abs: f64,
    /// Worst |Δ| after two AdamW steps over elements with |g_ref| ≥ eps.
    pub step2_abs: f64,
    /// Elements whose first-step gradient is non-zero but below eps on either side (AdamW
    /// amplifies their rounding noise 1/eps times): held only to Adam's step bound, 2·lr.
    pub step2_ill_conditioned: usize,
    pub step2_ill_abs: f64,
}

impl ParityReport {
    pub fn forward_ok(&self) -> bool {
        self.logits_rel <= TOL_LOGITS && self.loss_rel <= TOL_LOGITS
    }
    pub fn grads_ok(&self) -> bool {
        self.grad_rel <= TOL_GRAD && self.grad_zero_abs <= TOL_GRAD_ZERO
    }
    pub fn adamw_ok(&self) -> bool {
        self.step2_abs <= TOL_STEP && self.step2_ill_abs <= 2e-3
    }
}

fn l2(v: impl Iterator<Item = f64>) -> f64 {
    v.map(|x| x * x).sum::<f64>().sqrt()
}

fn diff_l2(got: &[f32], want: &[f32]) -> f64 {
    l2(got.iter().zip(want).map(|(g, w)| f64::from(*g) - f64::from(*w)))
}

fn rel_l2(got: &[f32], want: &[f32]) -> f64 {
    diff_l2(got, want) / l2(want.iter().map(|w| f64::from(*w))).max(1e-300)
}

fn io_err(e: vkformers_io::IoError) -> ModelError {
    ModelError::Weights(e.to_string())
}

struct Reference(ModelWeights);

impl Reference {
    fn f32(&self, name: &str) -> Result<Vec<f32>> {
        self.0.tensor_f32(name).map_err(io_err)
    }
    fn has(&self, name: &str) -> bool {
        self.0.info(name).is_ok()
    }
    fn i32(&self, name: &str) -> Result<(Vec<i32>, Vec<usize>)> {
        let raw = self.0.tensor_bytes(name).map_err(io_err)?;
        Ok((
            raw.data.chunks_exact(4).map(|c| i32::from_le_bytes([c[0], c[1], c[2], c[3]])).collect(),
            raw.shape.to_vec(),
        ))
    }
}

/// A decoder batch's logits `[B·T, V]` and its causal-LM loss `[1]`, plus the MoE load-balancing
/// loss times `router_aux_loss_coef` when the config outputs router logits (transformers and
/// PEFT both add `router_aux_loss_coef * aux_loss` to the loss then).
pub(crate) fn decoder_logits_and_loss(
    g: &Graph<'_>,
    model: &Model,
    batch: &Batch<'_>,
    labels: &[i32],
) -> Result<(Tensor, Tensor)> {
    let (logits, aux) = forward_with_aux(g, &model.spec, &model.weights, batch)?;
    let mut loss = causal_lm_loss(g, &logits, labels, batch.batch, batch.seq)?;
    if let (Some(aux), Some(coef)) = (aux, crate::moe::aux_loss_coef(&model.spec)) {
        let scaled = vkformers_tensor::ops::broadcast::scale(g, &aux, coef)?;
        loss = vkformers_tensor::ops::broadcast::add(g, &loss, &scaled)?;
    }
    Ok((logits, loss))
}

fn by_name(ts: Vec<HostTensor>) -> HashMap<String, Vec<f32>> {
    ts.into_iter().map(|t| (t.name, t.data)).collect()
}

/// Runs the fixture in `dir` on `ctx`.
pub fn check(ctx: &Context, dir: &Path) -> Result<ParityReport> {
    let reference = Reference(ModelWeights::open_file(dir.join("reference.safetensors")).map_err(io_err)?);
    let (ids, shape) = reference.i32("input_ids")?;
    let (mask, _) = reference.i32("attention_mask")?;
    // Float labels: a regression classifier's targets (every other fixture has int32 labels).
    let float_labels = match reference.0.info("labels").map_err(io_err)?.dtype {
        vkformers_io::Dtype::F32 => Some(reference.f32("labels")?),
        _ => None,
    };
    let labels = if float_labels.is_some() { Vec::new() } else { reference.i32("labels")?.0 };
    // Encoder fixtures with several token types store them; the others use type 0.
    let token_types =
        reference.has("token_type_ids").then(|| reference.i32("token_type_ids")).transpose()?.map(|x| x.0);
    let (b, t) = (shape[0], shape[1]);
    let batch = Batch { ids: &ids, mask: &mask, batch: b, seq: t };
    let g = Graph::new(ctx);
    let model = Model::load(&g, dir)?;
    let mut report = ParityReport {
        fixture: dir.file_name().map(|n| n.to_string_lossy().into_owned()).unwrap_or_default(),
        model_type: model.spec.model_type.clone(),
        ..ParityReport::default()
    };
    let params: Vec<Param> = model.params.iter().map(|(_, p)| Param { tensor: p.clone(), decay: true }).collect();
    let hp = vkformers_kernels::optim::AdamW { lr: 1e-3, beta1: 0.9, beta2: 0.999, eps: 1e-6, weight_decay: 0.01 };
    let mut opt = AdamW::new(hp, 0.0);
    let mut ours: HashMap<String, Vec<f32>> = HashMap::new();
    let mut zero_in_theory = std::collections::HashSet::new();
    for step in 0..2 {
        let (logits, loss) = if model.spec.seq2seq.is_some() {
            // Labels [B, L] beside the source [B, S].
            let (_, lshape) = reference.i32("labels")?;
            // The fixtures run in eval mode (`model.eval()`, gradients still taken).
            let sb = Seq2SeqBatch {
                ids: &ids,
                mask: &mask,
                batch: b,
                src_len: t,
                labels: &labels,
                tgt_len: lshape[1],
                train: false,
            };
            crate::seq2seq::forward_loss(&g, &model.spec, &model.weights, &sb)?
        } else if model.spec.encoder.is_some() {
            let types = token_types.as_deref();
            let eb = EncoderBatch { ids: &ids, mask: &mask, token_types: types, batch: b, seq: t };
            let labels = match &float_labels {
                Some(f) => ClsLabels::Floats(f),
                None => ClsLabels::Ids(&labels),
            };
            encoder::forward_loss(&g, &model.spec, &model.weights, &eb, labels)?
        } else {
            decoder_logits_and_loss(&g, &model, &batch, &labels)?
        };
        g.backward(&loss)?;
        if step == 0 {
            report.logits_rel = rel_l2(&g.read(&logits)?, &reference.f32("logits")?);
            let (got, want) = (f64::from(g.read(&loss)?[0]), f64::from(reference.f32("loss")?[0]));
            report.loss_rel = (got - want).abs() / want.abs();
            ours = by_name(model.hf_grads(&g)?);
            let want: HashMap<&String, Vec<f32>> =
                ours.keys().map(|n| Ok((n, reference.f32(&format!("grad.{n}"))?))).collect::<Result<_>>()?;
            let norm = |v: &[f32]| l2(v.iter().map(|x| f64::from(*x)));
            let largest = want.values().map(|w| norm(w)).fold(0.0, f64::max).max(1e-300);
            for (name, grad) in &ours {
                let w = &want[name];
                if norm(w) <= TOL_GRAD_ZERO * largest {
                    zero_in_theory.insert(name.clone());
                    report.grad_zero_tensors += 1;
                    report.grad_zero_abs = report.grad_zero_abs.max(diff_l2(grad, w) / largest);
                } else {
                    report.grad_rel = report.grad_rel.max(rel_l2(grad, w));
                }
            }
        }
        opt.step(&g, &params)?;
    }
    for (name, got) in by_name(model.hf_params(&g)?) {
        if model.buffers.iter().any(|(b, _)| *b == name) {
            continue; // not trained (BART's `final_logits_bias`)
        }
        let (want, grad) = (reference.f32(&format!("step2.{name}"))?, reference.f32(&format!("grad.{name}"))?);
        let mine = ours.get(&name).ok_or_else(|| ModelError::Weights(format!("no gradient for `{name}`")))?;
        for i in 0..got.len() {
            let d = (f64::from(got[i]) - f64::from(want[i])).abs();
            // Ill-conditioned: either side's first-step gradient is non-zero yet below eps, so
            // its AdamW update is rounding noise scaled by 1/eps; or the whole tensor's gradient
            // is zero in theory (see `TOL_GRAD_ZERO`): an element whose first-step gradient came
            // out exactly 0 still takes a noise-driven second step (RoBERTa's `key.bias`: 0 at
            // step 1, ~1e-8 at step 2 on both sides, moved 3e-6 by torch and 1.8e-5 by us).
            let tiny = |v: f32| v != 0.0 && f64::from(v.abs()) < hp.eps;
            if tiny(grad[i]) || (grad[i] == 0.0 && tiny(mine[i])) || zero_in_theory.contains(&name) {
                report.step2_ill_conditioned += 1;
                report.step2_ill_abs = report.step2_ill_abs.max(d);
            } else {
                report.step2_abs = report.step2_abs.max(d);
            }
        }
    }
    Ok(report)
}

/// Fixture folders under `root` (each with a `reference.safetensors`), sorted by name.
pub fn fixtures(root: &Path) -> Vec<std::path::PathBuf> {
    let mut v: Vec<_> = std::fs::read_dir(root)
        .map(|rd| {
            rd.filter_map(|e| e.ok()).map(|e| e.path()).filter(|p| p.join("reference.safetensors").exists()).collect()
        })
        .unwrap_or_default();
    v.sort();
    v
}
