//! The heads on the encoder's last hidden state `[B·T, hidden]`: the masked-LM head (logits
//! `[B·T, V]`) and the sequence classifier (logits `[B, num_labels]`), with their losses as
//! transformers computes them.

use vkformers_tensor::ops::{activation, broadcast, cast, embedding, loss, matmul, reduce, shape};
use vkformers_tensor::{DType, Graph, Tensor};

use super::{
    encoder_of, hidden_states, ClassifierHead, ClsPooling, EncoderBatch, EncoderHead, MlmHead, PoolAct, Problem,
};
use crate::decoder::{apply_norm, Weights};
use crate::error::{ModelError, Result};
use crate::lora::RowLayout;
use crate::spec::ModelSpec;

/// The head's output: logits `[B·T, V]` (masked LM), `[B, num_labels]` (sequence
/// classification), `[B·T, num_labels]` (token classification), or the bare model's last
/// hidden state `[B·T, hidden]`.
pub fn forward(g: &Graph<'_>, spec: &ModelSpec, w: &Weights, batch: &EncoderBatch<'_>) -> Result<Tensor> {
    let enc = encoder_of(spec)?;
    let x = hidden_states(g, spec, w, batch)?;
    match &enc.head {
        EncoderHead::MaskedLm(head) => masked_lm_logits(g, spec, w, head, &x),
        EncoderHead::SequenceClassification(head) => classifier(g, w, head, &x, batch),
        EncoderHead::TokenClassification { out, transform: None, .. } => dense(g, w, out, &x),
        EncoderHead::TokenClassification { out, transform: Some(t), .. } => {
            let h = activation::activation(g, &dense_with(g, w, &t.dense, &x, t.dense_bias)?, t.act)?;
            dense(g, w, out, &apply_norm(g, &t.norm.0, w, &t.norm.1, &h)?)
        }
        EncoderHead::Bare { .. } => Ok(x),
    }
}

/// The masked-LM head on rows `x [N, hidden]`: logits `[N, V]` (MobileBERT's own decoder, or
/// [`mlm`]).
fn masked_lm_logits(g: &Graph<'_>, spec: &ModelSpec, w: &Weights, head: &MlmHead, x: &Tensor) -> Result<Tensor> {
    if encoder_of(spec)?.mobile.is_some() {
        let h = activation::activation(g, &dense_with(g, w, &head.dense, x, head.dense_bias)?, head.act)?;
        let h = apply_norm(g, &head.norm, w, &head.norm_name, &h)?;
        return super::mobile_head::mlm_logits(g, spec, w, &h, w.get(&head.bias)?);
    }
    mlm(g, spec, w, head, x)
}

fn dense(g: &Graph<'_>, w: &Weights, name: &str, x: &Tensor) -> Result<Tensor> {
    dense_with(g, w, name, x, true)
}

/// `x · {name}.weightᵀ (+ {name}.bias when `bias`)`.
fn dense_with(g: &Graph<'_>, w: &Weights, name: &str, x: &Tensor, bias: bool) -> Result<Tensor> {
    let b = if bias { Some(w.get(&format!("{name}.bias"))?) } else { None };
    Ok(crate::lora::linear(g, x, w.get(&format!("{name}.weight"))?, b, w.lora(), &format!("{name}.weight"))?)
}

/// `decoder(LN(act(dense(x))))` (or `decoder(x)` without a transform: empty `dense`), the
/// decoder's weight tied to the word embeddings unless the spec stores its own; its bias
/// `head.bias` (none when empty).
fn mlm(g: &Graph<'_>, spec: &ModelSpec, w: &Weights, head: &MlmHead, x: &Tensor) -> Result<Tensor> {
    let mut x = x.clone();
    if !head.dense.is_empty() {
        x = activation::activation(g, &dense_with(g, w, &head.dense, &x, head.dense_bias)?, head.act)?;
        x = apply_norm(g, &head.norm, w, &head.norm_name, &x)?;
    }
    let table = if spec.tied_head { &spec.embed_name } else { &spec.head_name };
    let decoder = format!("{table}.weight");
    let bias = if head.bias.is_empty() { None } else { Some(w.get(&head.bias)?) };
    Ok(crate::lora::linear(g, &x, w.get(&decoder)?, bias, w.lora(), &decoder)?)
}

/// `out(act(dense(pooled)))` on each row's first token or its mean over real tokens, or
/// (`Late`) the mean over real tokens of `out(act(dense(x)))` per token: `[B, num_labels]`.
fn classifier(
    g: &Graph<'_>,
    w: &Weights,
    head: &ClassifierHead,
    x: &Tensor,
    batch: &EncoderBatch<'_>,
) -> Result<Tensor> {
    let (b, t) = (batch.batch, batch.seq);
    let x = cast::cast(g, x, DType::F32)?;
    let mean = |y: &Tensor| super::pool(g, y, batch.mask, (b, t), super::Pooling::Mean);
    let pooled = match head.pooling {
        ClsPooling::First => {
            // The row gather is the embedding lookup (its backward scatter-adds into those rows).
            let first: Vec<i32> = (0..b).map(|row| (row * t) as i32).collect();
            embedding::embedding(g, &x, &g.ints(&first, &[b])?)?
        }
        ClsPooling::Mean => mean(&x)?,
        ClsPooling::Late => return mean(&classify(g, w, head, &x)?),
    };
    // The head's rows are the samples `[B]`: their LoRA dropout is keyed per sample.
    w.lora().with_layout(RowLayout::Samples, || classify(g, w, head, &pooled))
}

/// `out(act(dense(h)))` (`out(norm(act(dense(h))))` with a norm) on rows h `[N, hidden]`.
fn classify(g: &Graph<'_>, w: &Weights, head: &ClassifierHead, h: &Tensor) -> Result<Tensor> {
    let h = dense_with(g, w, &head.dense, h, head.dense_bias)?;
    let h = match head.act {
        // tanh(x) = 2·sigmoid(2x) − 1
        PoolAct::Tanh => {
            let s = activation::sigmoid(g, &broadcast::scale(g, &h, 2.0)?)?;
            broadcast::sub(g, &broadcast::scale(g, &s, 2.0)?, &g.constant(&[1.0], &[1])?)?
        }
        PoolAct::Act(a) => activation::activation(g, &h, a)?,
    };
    let h = match &head.norm {
        Some((n, name)) => apply_norm(g, n, w, name, &h)?,
        None => h,
    };
    dense(g, w, &head.out, &h)
}

/// Logits and loss of a batch: the masked-LM or token-classification loss against labels
/// `[B·T]` (-100 = not a target), or a sequence classifier's loss against its labels `[B]`.
pub fn forward_loss(
    g: &Graph<'_>,
    spec: &ModelSpec,
    w: &Weights,
    batch: &EncoderBatch<'_>,
    labels: ClsLabels<'_>,
) -> Result<(Tensor, Tensor)> {
    let enc = encoder_of(spec)?;
    if let (EncoderHead::MaskedLm(head), Some(ignore), ClsLabels::Ids(ids)) =
        (&enc.head, enc.sparse_prediction, &labels)
    {
        return sparse_mlm(g, spec, w, head, batch, ids, |l| l != ignore);
    }
    let logits = forward(g, spec, w, batch)?;
    let loss = match (&enc.head, labels) {
        // Both: mean cross-entropy over positions whose label is not -100.
        (EncoderHead::MaskedLm(_) | EncoderHead::TokenClassification { .. }, ClsLabels::Ids(ids)) => {
            masked_lm_loss(g, &logits, ids)?
        }
        (EncoderHead::SequenceClassification(head), labels) => classification_loss(g, head, &logits, labels)?,
        (EncoderHead::Bare { .. }, _) => return Err(ModelError::Config("a bare encoder has no loss".into())),
        (EncoderHead::MaskedLm(_) | EncoderHead::TokenClassification { .. }, ClsLabels::Floats(_)) => {
            return Err(ModelError::Config("masked-LM and token-classification labels must be integer ids".into()))
        }
    };
    Ok((logits, loss))
}

/// The masked-LM loss of a batch (labels `[B·T]`, -100 = not a target) with the head computed
/// on the target rows alone: logits `[targets, V]` and the mean cross-entropy over them. The
/// loss is the dense head's (a row labelled -100 adds nothing to the mean, nor to any
/// gradient), at `targets / (B·T)` of its cost: the head's `[tokens, hidden] x [hidden, V]`
/// product and the `[tokens, V]` logits are the largest tensors of masked-LM training, and
/// 15% masking keeps one row in seven. Training uses it for every masked-LM encoder.
pub fn masked_lm_target_loss(
    g: &Graph<'_>,
    spec: &ModelSpec,
    w: &Weights,
    batch: &EncoderBatch<'_>,
    labels: &[i32],
) -> Result<(Tensor, Tensor)> {
    let enc = encoder_of(spec)?;
    let EncoderHead::MaskedLm(head) = &enc.head else {
        return Err(ModelError::Config("the masked-LM target loss needs a masked-LM head".into()));
    };
    // ModernBERT's own ignore index drops its rows too (they add nothing to the loss either way).
    let ignore = enc.sparse_prediction;
    sparse_mlm(g, spec, w, head, batch, labels, |l| l != -100 && Some(l) != ignore)
}

/// The masked-LM head on the rows of the last hidden state whose label `keep` accepts (the
/// row gather is an embedding lookup: its backward scatters into those rows): logits
/// `[targets, V]` and the mean cross-entropy over them, as ModernBERT's `sparse_prediction`.
fn sparse_mlm(
    g: &Graph<'_>,
    spec: &ModelSpec,
    w: &Weights,
    head: &MlmHead,
    batch: &EncoderBatch<'_>,
    labels: &[i32],
    keep: impl Fn(i32) -> bool,
) -> Result<(Tensor, Tensor)> {
    let x = hidden_states(g, spec, w, batch)?;
    if labels.len() != x.shape()[0] {
        return Err(ModelError::Config(format!("{} labels for {} positions", labels.len(), x.shape()[0])));
    }
    let keep: Vec<i32> = (0..labels.len()).filter(|&j| keep(labels[j])).map(|j| j as i32).collect();
    if keep.is_empty() {
        return Err(ModelError::Config("sparse prediction on a batch without masked-LM targets".into()));
    }
    let rows = embedding::embedding(g, &x, &g.ints(&keep, &[keep.len()])?)?;
    // LoRA dropout on the head keys each target row as the token it was gathered from.
    let positions = keep.iter().map(|&j| j as usize).collect();
    let logits = w.lora().with_gathered_rows(positions, || masked_lm_logits(g, spec, w, head, &rows))?;
    let kept: Vec<i32> = keep.iter().map(|&j| labels[j as usize]).collect();
    let loss = masked_lm_loss(g, &logits, &kept)?;
    Ok((logits, loss))
}

/// transformers' masked-LM loss: mean cross-entropy over positions whose label is not -100
/// (no shift, unlike the causal LM).
pub fn masked_lm_loss(g: &Graph<'_>, logits: &Tensor, labels: &[i32]) -> Result<Tensor> {
    let lab = g.ints(labels, &[labels.len()])?;
    Ok(loss::cross_entropy(g, logits, &lab)?)
}

/// A sequence classifier's labels: class ids `[B]`, or floats (`[B]` regression targets,
/// `[B, num_labels]` multi-label 0/1 values).
pub enum ClsLabels<'a> {
    Ids(&'a [i32]),
    Floats(&'a [f32]),
}

/// [`ClsLabels`] that own their values.
#[derive(Clone, Debug, PartialEq)]
pub enum OwnedClsLabels {
    Ids(Vec<i32>),
    Floats(Vec<f32>),
}

impl OwnedClsLabels {
    pub fn as_ref(&self) -> ClsLabels<'_> {
        match self {
            OwnedClsLabels::Ids(v) => ClsLabels::Ids(v),
            OwnedClsLabels::Floats(v) => ClsLabels::Floats(v),
        }
    }
}

impl ClassifierHead {
    /// transformers' choice of loss: the config's `problem_type`, else regression for one label,
    /// single-label for integer labels, multi-label for float labels.
    pub fn problem_for(&self, labels: &ClsLabels<'_>) -> Problem {
        self.problem.unwrap_or(match (labels, self.num_labels) {
            (_, 1) => Problem::Regression,
            (ClsLabels::Ids(_), _) => Problem::SingleLabel,
            (ClsLabels::Floats(_), _) => Problem::MultiLabel,
        })
    }
}

/// The loss of `logits [B, num_labels]` by transformers' rules: the config's `problem_type`, or
/// regression when `num_labels == 1`, single-label for class ids, multi-label for floats.
pub fn classification_loss(
    g: &Graph<'_>,
    head: &ClassifierHead,
    logits: &Tensor,
    labels: ClsLabels<'_>,
) -> Result<Tensor> {
    let problem = head.problem_for(&labels);
    match (problem, labels) {
        (Problem::SingleLabel, ClsLabels::Ids(ids)) => masked_lm_loss(g, logits, ids),
        (Problem::MultiLabel, labels) => multi_label_loss(g, logits, &float_labels(labels)),
        (Problem::Regression, labels) => {
            // MSE: mean over every element of (logits − labels)², labels shaped as the logits.
            let y = float_labels(labels);
            if y.len() != logits.numel() {
                return Err(ModelError::Config(format!(
                    "{} regression labels for logits {:?}",
                    y.len(),
                    logits.shape()
                )));
            }
            let d = broadcast::sub(g, logits, &g.constant(&y, logits.shape())?)?;
            Ok(reduce::mean(g, &broadcast::mul(g, &d, &d)?)?)
        }
        (p, _) => Err(ModelError::Unsupported(format!("sequence classification loss {p:?} with these labels"))),
    }
}

fn float_labels(labels: ClsLabels<'_>) -> Vec<f32> {
    match labels {
        ClsLabels::Ids(ids) => ids.iter().map(|&v| v as f32).collect(),
        ClsLabels::Floats(f) => f.to_vec(),
    }
}

/// `BCEWithLogitsLoss` (mean over every element of logits `[B, C]`): per element
/// `softplus(x) − x·y`. `softplus(x)` is the cross-entropy of the two logits `[0, x]` against
/// class 0, so the mean is `CE([0, x] rows, class 0) − mean(x ⊙ y)`, any `y` in [0, 1].
fn multi_label_loss(g: &Graph<'_>, logits: &Tensor, y: &[f32]) -> Result<Tensor> {
    if y.len() != logits.numel() {
        return Err(ModelError::Config(format!(
            "{} multi-label values for logits {:?}: give each row a list of {} 0/1 values",
            y.len(),
            logits.shape(),
            logits.shape().last().copied().unwrap_or(0)
        )));
    }
    let n = logits.numel();
    let x = cast::cast(g, logits, DType::F32)?;
    // [N, 1] · [1, 2] with the row [0, 1]: the pairs [0, x].
    let pairs = matmul::matmul(g, &shape::reshape(g, &x, &[n, 1])?, &g.constant(&[0.0, 1.0], &[1, 2])?)?;
    let softplus = loss::cross_entropy(g, &pairs, &g.ints(&vec![0; n], &[n])?)?;
    let xy = reduce::mean(g, &broadcast::mul(g, &x, &g.constant(y, logits.shape())?)?)?;
    Ok(broadcast::sub(g, &softplus, &xy)?)
}
