//! The BERT family's task heads: the masked LM, the sequence and token classifiers and the
//! bare model, and the stored tensors of the heads a model has not.

use serde_json::Value;
use vkformers_kernels::activation::Activation;

use super::bert_layout::under;
use super::encoder_common::head as head_of;
use crate::encoder::{EncoderHead, MlmHead, PoolAct};
use crate::error::Result;
use crate::spec::Norm;

/// The head's module layout.
#[derive(Clone, Copy)]
pub(super) enum Head {
    /// `cls.predictions.{transform.dense, transform.LayerNorm, bias}` with `hidden_act`.
    Bert,
    /// `lm_head.{dense, layer_norm, bias}` with exact GELU whatever `hidden_act` says.
    Roberta,
}

/// The family's head prefix and the head `architectures` asks for: the masked LM
/// (`cls.predictions.*` with `hidden_act`, or RoBERTa's `lm_head.*` with exact GELU), the
/// sequence classifier (BERT's tanh pooler + `classifier`, or RoBERTa's `classifier.dense` +
/// `classifier.out_proj`), the token classifier or the bare model.
pub(super) fn task_head(
    cfg: &Value,
    head: Head,
    prefix: &str,
    act: Activation,
    norm: &Norm,
) -> Result<(&'static str, EncoderHead)> {
    let pooler = under(prefix, "pooler.dense");
    let (head_prefix, mlm, cls) = match head {
        Head::Bert => {
            ("cls.predictions", MlmHead::bert(act, norm, "LayerNorm"), (pooler.as_str(), PoolAct::Tanh, "classifier"))
        }
        Head::Roberta => {
            ("lm_head", MlmHead::roberta(norm), ("classifier.dense", PoolAct::Tanh, "classifier.out_proj"))
        }
    };
    Ok((head_prefix, head_of(cfg, mlm, cls, Some(&pooler))?))
}

/// Tensors of heads a pre-training checkpoint stores that this model has not: the pooler (only
/// BERT's sequence classifier and the bare model read it), the other family head prefixes, and
/// the tied decoder's bias alias (`cls.predictions.decoder.bias` = `cls.predictions.bias`).
pub(super) fn ignored(prefix: &str, head_prefix: &str, head: &EncoderHead) -> Vec<String> {
    let pooler_used = match head {
        EncoderHead::Bare { .. } => true,
        EncoderHead::SequenceClassification(c) => c.dense.ends_with("pooler.dense"),
        _ => false,
    };
    let mut out = Vec::new();
    if !pooler_used {
        out.push(under(prefix, "pooler."));
    }
    if let EncoderHead::MaskedLm(_) = head {
        out.push(format!("{head_prefix}.decoder.bias"));
        out.push("cls.seq_relationship.".into());
    } else {
        out.extend(["cls.".into(), "lm_head.".into()]);
    }
    out
}
