//! LoRA parity against the fixtures of `tools/parity/peft_reference.py`: logits and loss with
//! the adapter, every LoRA gradient, the LoRA weights after two AdamW steps, under the harness
//! tolerances of `crate::parity`; and the host merge against PEFT's `merge_and_unload`.

use std::collections::HashMap;
use std::path::Path;

use vkformers_io::ModelWeights;
use vkformers_tensor::optim::AdamW;
use vkformers_tensor::Graph;
use vkformers_vk::Context;

use crate::decoder::Batch;
use crate::encoder::{ClsLabels, EncoderBatch};
use crate::error::{ModelError, Result};
use crate::lora::adapter::Adapter;
use crate::lora::attach::{attach, load_frozen};

/// What one LoRA fixture gave (same measures as `crate::parity::ParityReport`).
#[derive(Clone, Debug, Default)]
pub struct LoraReport {
    pub logits_rel: f64,
    /// Relative L2 distance of the reference logits with and without the adapter: the adapter
    /// must visibly move them for the check to mean anything.
    pub adapter_effect: f64,
    pub loss_rel: f64,
    pub grad_rel: f64,
    pub step2_abs: f64,
    /// Elements whose first-step gradient is non-zero but below eps on either side: AdamW
    /// turns their rounding noise into a step of up to lr, so the harness holds them only to
    /// Adam's bound 2·lr (as `crate::parity` does).
    pub step2_ill_conditioned: usize,
    pub step2_ill_abs: f64,
    pub lora_tensors: usize,
    /// Values that were trainable (LoRA and `modules_to_save`).
    pub trainable: usize,
    /// Base tensors outside `modules_to_save` that received a gradient (must be none).
    pub frozen_with_grad: usize,
}

fn l2(v: impl Iterator<Item = f64>) -> f64 {
    v.map(|x| x * x).sum::<f64>().sqrt()
}

/// ‖got − want‖ / ‖want‖.
pub fn rel_l2(got: &[f32], want: &[f32]) -> f64 {
    l2(got.iter().zip(want).map(|(g, w)| f64::from(*g) - f64::from(*w)))
        / l2(want.iter().map(|w| f64::from(*w))).max(1e-300)
}

fn io(e: vkformers_io::IoError) -> ModelError {
    ModelError::Weights(e.to_string())
}

fn ints(f: &ModelWeights, name: &str) -> Result<(Vec<i32>, Vec<usize>)> {
    let raw = f.tensor_bytes(name).map_err(io)?;
    Ok((raw.data.chunks_exact(4).map(|c| i32::from_le_bytes([c[0], c[1], c[2], c[3]])).collect(), raw.shape.to_vec()))
}

/// Runs the LoRA fixture `lora_dir` over the base fixture `base_dir` on `ctx`.
pub fn check(ctx: &Context, base_dir: &Path, lora_dir: &Path) -> Result<LoraReport> {
    let reference = ModelWeights::open_file(lora_dir.join("reference.safetensors")).map_err(io)?;
    let base_ref = ModelWeights::open_file(base_dir.join("reference.safetensors")).map_err(io)?;
    let f32s = |n: &str| reference.tensor_f32(n).map_err(io);
    let (ids, shape) = ints(&reference, "input_ids")?;
    let (mask, _) = ints(&reference, "attention_mask")?;
    let (labels, _) = ints(&reference, "labels")?;
    let (b, t) = (shape[0], shape[1]);
    let batch = Batch { ids: &ids, mask: &mask, batch: b, seq: t };
    let g = Graph::new(ctx);
    let adapter = Adapter::load(lora_dir)?;
    let mut model = load_frozen(&g, base_dir, &adapter.config.modules_to_save)?;
    let lora = attach(&g, &mut model, &adapter, 0)?;
    let mut report = LoraReport { lora_tensors: adapter.tensors.len(), trainable: lora.numel(), ..Default::default() };
    let want_logits = f32s("logits")?;
    report.adapter_effect = rel_l2(&base_ref.tensor_f32("logits").map_err(io)?, &want_logits);
    let hp = vkformers_kernels::optim::AdamW { lr: 1e-3, beta1: 0.9, beta2: 0.999, eps: 1e-6, weight_decay: 0.01 };
    let mut opt = AdamW::new(hp, 0.0);
    let params = lora.params();
    let mut first_grads: HashMap<String, Vec<f32>> = HashMap::new();
    let types = ints(&reference, "token_type_ids").ok().map(|(v, _)| v);
    for step in 0..2 {
        let (logits, loss) = if model.spec.seq2seq.is_some() {
            // Labels [B, L] beside the source [B, S].
            let l = labels.len() / b;
            let sb = crate::seq2seq::Seq2SeqBatch {
                ids: &ids,
                mask: &mask,
                batch: b,
                src_len: t,
                labels: &labels,
                tgt_len: l,
                // PEFT's fixtures run in train mode (`model.train()`).
                train: true,
            };
            crate::seq2seq::forward_loss(&g, &model.spec, &model.weights, &sb)?
        } else if model.spec.encoder.is_some() {
            // Masked-LM (or token-classification) labels, unshifted.
            let eb = EncoderBatch { ids: &ids, mask: &mask, token_types: types.as_deref(), batch: b, seq: t };
            crate::encoder::forward_loss(&g, &model.spec, &model.weights, &eb, ClsLabels::Ids(&labels))?
        } else {
            crate::parity::decoder_logits_and_loss(&g, &model, &batch, &labels)?
        };
        g.backward(&loss)?;
        if step == 0 {
            report.logits_rel = rel_l2(&g.read(&logits)?, &want_logits);
            let (got, want) = (f64::from(g.read(&loss)?[0]), f64::from(f32s("loss")?[0]));
            report.loss_rel = (got - want).abs() / want.abs();
            for t in lora.hf_grads(&g)? {
                report.grad_rel = report.grad_rel.max(rel_l2(&t.data, &f32s(&format!("grad.{}", t.name))?));
                first_grads.insert(t.name, t.data);
            }
            let saved = &adapter.config.modules_to_save;
            report.frozen_with_grad = model
                .params
                .iter()
                .filter(|(n, p)| p.grad().is_some() && !crate::lora::attach::is_saved_module(saved, n))
                .count();
        }
        opt.step(&g, &params)?;
    }
    for t in lora.hf_params(&g)? {
        let (want, grad) = (f32s(&format!("step2.{}", t.name))?, f32s(&format!("grad.{}", t.name))?);
        let mine = &first_grads[&t.name];
        let tiny = |v: f32| v != 0.0 && f64::from(v.abs()) < hp.eps;
        for i in 0..want.len() {
            let d = (f64::from(t.data[i]) - f64::from(want[i])).abs();
            if tiny(grad[i]) || (grad[i] == 0.0 && tiny(mine[i])) {
                report.step2_ill_conditioned += 1;
                report.step2_ill_abs = report.step2_ill_abs.max(d);
            } else {
                report.step2_abs = report.step2_abs.max(d);
            }
        }
    }
    Ok(report)
}

/// Largest |ours − PEFT| over every tensor of the host merge against `merged.safetensors`.
pub fn check_merge(base_dir: &Path, lora_dir: &Path) -> Result<f64> {
    let adapter = Adapter::load(lora_dir)?;
    let ours = crate::lora::merge::merged_tensors(base_dir, &adapter)?;
    let want = ModelWeights::open_file(lora_dir.join("merged.safetensors")).map_err(io)?;
    let mut names: HashMap<String, ()> = want.names().map(|n| (n.to_string(), ())).collect();
    let mut worst: f64 = 0.0;
    for (info, data) in ours {
        names.remove(&info.name);
        let w = want.tensor_f32(&info.name).map_err(io)?;
        for (x, y) in data.iter().zip(&w) {
            worst = worst.max((f64::from(*x) - f64::from(*y)).abs());
        }
    }
    if let Some(n) = names.keys().next() {
        return Err(ModelError::Weights(format!("merged.safetensors has `{n}`, our merge does not")));
    }
    Ok(worst)
}
