//! What the trainer trains: any model that turns a batch into logits, and the list of
//! parameters it may update. A full model trains all its parameters; a LoRA wrapper would
//! hand over only its adapter matrices and a forward that adds them.

use vkformers_models::decoder::{causal_lm_loss, forward, forward_with_aux};
use vkformers_models::encoder::{self, EncoderBatch, EncoderHead};
use vkformers_models::lm_loss::causal_lm_training_loss;
use vkformers_models::model::Model;
use vkformers_models::seq2seq;
use vkformers_tensor::{Graph, Tensor};

use crate::batching::{Objective, TokenBatch};
use crate::decay::decays;
use crate::error::{Result, TrainError};

/// A causal language model for the trainer: logits `[B·T, V]` of a right-padded batch. With
/// gradients on, the graph's tape records the forward so `Graph::backward` reaches the
/// trainable parameters.
pub trait LanguageModel {
    fn logits(&self, g: &Graph<'_>, batch: &TokenBatch) -> Result<Tensor>;

    /// The logits and, for a mixture of experts whose config asks for router logits
    /// (`output_router_logits`), the load-balancing loss times `router_aux_loss_coef` `[1]`,
    /// which transformers adds to the language-model loss.
    fn logits_and_aux(&self, g: &Graph<'_>, batch: &TokenBatch) -> Result<(Tensor, Option<Tensor>)> {
        Ok((self.logits(g, batch)?, None))
    }

    /// The training loss `[1]` of a batch and the auxiliary term of [`Self::logits_and_aux`]:
    /// by default [`Self::loss`] of those logits, which it also returns (memory reports).
    /// A causal decoder overrides it with the chunked head + loss (no whole logits).
    fn loss_and_aux(&self, g: &Graph<'_>, batch: &TokenBatch) -> Result<ForwardLoss> {
        let (logits, aux) = self.logits_and_aux(g, batch)?;
        let loss = self.loss(g, &logits, batch)?;
        Ok(ForwardLoss { loss, aux, logits: Some(logits) })
    }

    /// What the labels of a batch mean (how targets are counted, which loss applies).
    fn objective(&self) -> Objective {
        Objective::CausalLm
    }

    /// The mean loss of `logits` against the batch's labels `[1]`.
    fn loss(&self, g: &Graph<'_>, logits: &Tensor, batch: &TokenBatch) -> Result<Tensor> {
        Ok(causal_lm_loss(g, logits, &batch.labels, batch.batch, batch.seq)?)
    }

    /// A classifier's class names by id (`id2label`), for reports; empty when unnamed.
    fn label_names(&self) -> Vec<String> {
        Vec::new()
    }

    /// A sequence classifier's loss for these labels (transformers' `problem_type` rules).
    fn problem(&self, _labels: &encoder::OwnedClsLabels) -> Option<encoder::Problem> {
        None
    }
}

/// A training forward's results (see [`LanguageModel::loss_and_aux`]).
pub struct ForwardLoss {
    pub loss: Tensor,
    pub aux: Option<Tensor>,
    /// The whole logits `[B·T, V]`, when the loss was taken from them.
    pub logits: Option<Tensor>,
}

/// `id2label` of a config, in id order (ids missing from it named `LABEL_i`).
pub fn label_names(config: &serde_json::Value) -> Vec<String> {
    let Some(map) = config.get("id2label").and_then(|v| v.as_object()) else { return Vec::new() };
    let mut pairs: Vec<(usize, String)> =
        map.iter().filter_map(|(k, v)| Some((k.parse().ok()?, v.as_str().unwrap_or_default().to_string()))).collect();
    pairs.sort();
    let n = pairs.last().map_or(0, |p| p.0 + 1);
    let mut names: Vec<String> = (0..n).map(|i| format!("LABEL_{i}")).collect();
    for (i, name) in pairs {
        names[i] = name;
    }
    names
}

/// The objective an encoder head trains for (`None` for a decoder).
pub fn encoder_objective(model: &Model) -> Option<Objective> {
    Some(match &model.spec.encoder.as_ref()?.head {
        EncoderHead::MaskedLm(_) | EncoderHead::Bare { .. } => Objective::MaskedLm,
        EncoderHead::TokenClassification { .. } => Objective::TokenClassification,
        EncoderHead::SequenceClassification(_) => Objective::SequenceClassification,
    })
}

/// A batch's row labels as the classifier's loss takes them: class ids `[B]`, or floats
/// (`[B]` regression targets, `[B, num_labels]` multi-label), all of one kind.
pub fn row_labels(batch: &TokenBatch) -> Result<encoder::OwnedClsLabels> {
    use vkformers_data::SeqLabel;
    if batch.row_labels.len() != batch.batch {
        return Err(TrainError::Config(format!(
            "sequence classification needs a `label` on every row; a batch has {} labels for {} rows",
            batch.row_labels.len(),
            batch.batch
        )));
    }
    if batch.row_labels.iter().all(|l| matches!(l, SeqLabel::Class(_))) {
        let ids = batch.row_labels.iter().map(|l| if let SeqLabel::Class(c) = l { *c as i32 } else { 0 });
        return Ok(encoder::OwnedClsLabels::Ids(ids.collect()));
    }
    let mut floats = Vec::new();
    for l in &batch.row_labels {
        match l {
            SeqLabel::Class(c) => floats.push(*c as f32),
            SeqLabel::Values(v) => floats.extend_from_slice(v),
        }
    }
    Ok(encoder::OwnedClsLabels::Floats(floats))
}

impl LanguageModel for Model {
    fn logits(&self, g: &Graph<'_>, batch: &TokenBatch) -> Result<Tensor> {
        if self.spec.seq2seq.is_some() {
            // A step taking gradients is transformers' train mode; evaluation (no gradient) its
            // eval mode, as a Seq2SeqTrainer runs them.
            let sb = seq2seq::Seq2SeqBatch { train: g.grad_enabled(), ..seq2seq_batch(batch) };
            return Ok(seq2seq::forward_logits(g, &self.spec, &self.weights, &sb)?);
        }
        if self.spec.encoder.is_some() {
            return Ok(encoder::forward(g, &self.spec, &self.weights, &encoder_batch(batch))?);
        }
        Ok(forward(g, &self.spec, &self.weights, &batch.as_model_batch())?)
    }

    fn objective(&self) -> Objective {
        if self.spec.seq2seq.is_some() {
            return Objective::Seq2SeqLm;
        }
        encoder_objective(self).unwrap_or(Objective::CausalLm)
    }

    fn label_names(&self) -> Vec<String> {
        label_names(&self.config)
    }

    fn problem(&self, labels: &encoder::OwnedClsLabels) -> Option<encoder::Problem> {
        match &self.spec.encoder.as_ref()?.head {
            EncoderHead::SequenceClassification(h) => Some(h.problem_for(&labels.as_ref())),
            _ => None,
        }
    }

    fn loss(&self, g: &Graph<'_>, logits: &Tensor, batch: &TokenBatch) -> Result<Tensor> {
        if self.spec.seq2seq.is_some() {
            // Unshifted: decoder position t predicts decoder_labels[t] (the mean over != -100).
            return Ok(encoder::masked_lm_loss(g, logits, &batch.decoder_labels)?);
        }
        match &self.spec.encoder.as_ref().map(|e| &e.head) {
            None => Ok(causal_lm_loss(g, logits, &batch.labels, batch.batch, batch.seq)?),
            Some(EncoderHead::SequenceClassification(head)) => {
                let labels = row_labels(batch)?;
                Ok(encoder::classification_loss(g, head, logits, labels.as_ref())?)
            }
            Some(EncoderHead::Bare { .. }) => {
                Err(TrainError::Config("a bare encoder (no task head) has no loss to train".into()))
            }
            Some(_) => Ok(encoder::masked_lm_loss(g, logits, &batch.labels)?),
        }
    }

    fn logits_and_aux(&self, g: &Graph<'_>, batch: &TokenBatch) -> Result<(Tensor, Option<Tensor>)> {
        if self.spec.encoder.is_some() || self.spec.seq2seq.is_some() {
            return Ok((self.logits(g, batch)?, None));
        }
        let (logits, aux) = forward_with_aux(g, &self.spec, &self.weights, &batch.as_model_batch())?;
        Ok((logits, scaled_aux(self, g, aux)?))
    }

    fn loss_and_aux(&self, g: &Graph<'_>, batch: &TokenBatch) -> Result<ForwardLoss> {
        let head = self.spec.encoder.as_ref().map(|e| &e.head);
        if self.spec.seq2seq.is_none() && matches!(head, Some(EncoderHead::MaskedLm(_))) {
            // The head on the target rows only: the dense path's loss and gradients.
            let (logits, loss) =
                encoder::masked_lm_target_loss(g, &self.spec, &self.weights, &encoder_batch(batch), &batch.labels)?;
            return Ok(ForwardLoss { loss, aux: None, logits: Some(logits) });
        }
        if self.spec.encoder.is_some() || self.spec.seq2seq.is_some() {
            let logits = self.logits(g, batch)?;
            return Ok(ForwardLoss { loss: self.loss(g, &logits, batch)?, aux: None, logits: Some(logits) });
        }
        let (loss, aux) =
            causal_lm_training_loss(g, &self.spec, &self.weights, &batch.as_model_batch(), &batch.labels)?;
        Ok(ForwardLoss { loss, aux: scaled_aux(self, g, aux)?, logits: None })
    }
}

/// The MoE load-balancing loss times `router_aux_loss_coef`, as transformers adds it.
fn scaled_aux(model: &Model, g: &Graph<'_>, aux: Option<Tensor>) -> Result<Option<Tensor>> {
    let coef = vkformers_models::moe::aux_loss_coef(&model.spec);
    Ok(match (aux, coef) {
        (Some(aux), Some(c)) => Some(vkformers_tensor::ops::broadcast::scale(g, &aux, c)?),
        _ => None,
    })
}

/// The encoder graph's view of a batch.
pub fn encoder_batch(batch: &TokenBatch) -> EncoderBatch<'_> {
    EncoderBatch {
        ids: &batch.ids,
        mask: &batch.mask,
        token_types: batch.token_types.as_deref(),
        batch: batch.batch,
        seq: batch.seq,
    }
}

/// The encoder-decoder graph's view of a batch: the source and the decoder's labels (eval mode).
pub fn seq2seq_batch(batch: &TokenBatch) -> seq2seq::Seq2SeqBatch<'_> {
    seq2seq::Seq2SeqBatch {
        ids: &batch.ids,
        mask: &batch.mask,
        batch: batch.batch,
        src_len: batch.seq,
        labels: &batch.decoder_labels,
        tgt_len: batch.decoder_len,
        train: false,
    }
}

/// A parameter the trainer updates: a stable name (the key in checkpoints), the device
/// tensor (a graph parameter), and whether AdamW's weight decay applies to it.
#[derive(Clone, Debug)]
pub struct TrainableParam {
    pub name: String,
    pub tensor: Tensor,
    pub decay: bool,
}

/// Every parameter of `model`, with weight decay as the Hugging Face Trainer assigns it.
pub fn full_model_params(model: &Model) -> Vec<TrainableParam> {
    model
        .params
        .iter()
        .map(|(name, t)| TrainableParam { name: name.clone(), tensor: t.clone(), decay: decays(&model.spec, name) })
        .collect()
}
