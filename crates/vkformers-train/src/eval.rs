//! Evaluation: the target-weighted mean loss over a dataset (each counted target weighs the
//! same, as one big batch would), its perplexity, each row's own loss, and for classifiers the
//! accuracy (and, for token classification, the entity-level F1).
//!
//! Language-model losses (causal and masked) stay on the device (logits `[B·T, V]`); the
//! classifiers' logits (`[B, C]`, `[B·T, C]`) are small and read back, their losses taken on
//! the host in f64 as transformers defines them.

use serde::Serialize;
use vkformers_data::Example;
use vkformers_models::decoder::causal_lm_loss;
use vkformers_models::encoder::masked_lm_loss;
use vkformers_tensor::Graph;

use crate::batching::{eval_batches, Objective, TokenBatch, IGNORE};
use crate::error::{Result, TrainError};
use crate::metrics_cls::{sequence_rows, token_rows};
use crate::model::LanguageModel;

/// One row's mean loss over its `tokens` counted targets (`loss` is null without any); for
/// classifiers, how many of them were predicted right, and the row's entities (gold,
/// predicted, both) for the token classifier's F1.
#[derive(Clone, Debug, Default, Serialize)]
pub struct RowLoss {
    pub loss: Option<f64>,
    pub tokens: usize,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub correct: Option<usize>,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub entities: Option<[usize; 3]>,
}

#[derive(Clone, Debug, Serialize)]
pub struct EvalReport {
    /// Target-weighted mean loss: Σ over rows of (row loss · row targets) / Σ targets.
    pub loss: f64,
    pub perplexity: f64,
    /// Counted targets (tokens; rows for sequence classification).
    pub tokens: usize,
    /// Classifiers: the fraction of targets predicted right (multi-label: rows whose every
    /// label is right).
    #[serde(skip_serializing_if = "Option::is_none")]
    pub accuracy: Option<f64>,
    /// Token classification: entity-level F1 (seqeval's default IOB chunks).
    #[serde(skip_serializing_if = "Option::is_none")]
    pub f1: Option<f64>,
    pub rows: Vec<RowLoss>,
}

impl EvalReport {
    /// The report of every row's result.
    pub fn from_rows(rows: Vec<RowLoss>) -> Result<EvalReport> {
        let tokens: usize = rows.iter().map(|r| r.tokens).sum();
        if tokens == 0 {
            return Err(TrainError::Config("the evaluation data has no tokens to predict".into()));
        }
        let sum: f64 = rows.iter().filter_map(|r| r.loss.map(|l| l * r.tokens as f64)).sum();
        let loss = sum / tokens as f64;
        let correct: Option<usize> = rows.iter().map(|r| r.correct).sum();
        let accuracy = correct.map(|c| c as f64 / tokens as f64);
        let entities: Option<Vec<[usize; 3]>> = rows.iter().map(|r| r.entities).collect();
        let f1 = entities.map(|e| {
            let (gold, pred, both) = e.iter().fold((0, 0, 0), |a, x| (a.0 + x[0], a.1 + x[1], a.2 + x[2]));
            if gold + pred == 0 {
                1.0
            } else {
                2.0 * both as f64 / (gold + pred) as f64
            }
        });
        Ok(EvalReport { loss, perplexity: loss.exp(), tokens, accuracy, f1, rows })
    }
}

/// Evaluates `model` on `examples` (already truncated to the sequence length), `batch_size`
/// rows per forward.
pub fn evaluate(
    g: &Graph<'_>,
    model: &dyn LanguageModel,
    examples: &[Example],
    batch_size: usize,
    pad_id: u32,
) -> Result<EvalReport> {
    let mut rows = Vec::with_capacity(examples.len());
    g.no_grad(|| -> Result<()> {
        for batch in eval_batches(examples, batch_size, pad_id) {
            rows.extend(batch_rows(g, model, &batch)?);
            g.clear_tape();
        }
        Ok(())
    })?;
    EvalReport::from_rows(rows)
}

/// Each row's result in one batch.
fn batch_rows(g: &Graph<'_>, model: &dyn LanguageModel, batch: &TokenBatch) -> Result<Vec<RowLoss>> {
    let logits = model.logits(g, batch)?;
    match model.objective() {
        Objective::CausalLm | Objective::MaskedLm | Objective::Seq2SeqLm => {
            lm_rows(g, model.objective(), &logits, batch)
        }
        Objective::TokenClassification => token_rows(&g.read(&logits)?, batch, &model.label_names()),
        Objective::SequenceClassification => {
            let labels = crate::model::row_labels(batch)?;
            let problem = model.problem(&labels).ok_or_else(|| {
                TrainError::Config("this model has no sequence-classification head to evaluate".into())
            })?;
            sequence_rows(&g.read(&logits)?, &labels, problem, batch.batch)
        }
    }
}

/// The language-model loss of each row: one forward, then the cross-entropy with every other
/// row's labels ignored (logits `[B·T, V]` stay on the device).
fn lm_rows(
    g: &Graph<'_>,
    objective: Objective,
    logits: &vkformers_tensor::Tensor,
    batch: &TokenBatch,
) -> Result<Vec<RowLoss>> {
    let (b, t) = (batch.batch, batch.seq);
    let only_row = |labels: &[i32], len: usize, r: usize| -> Vec<i32> {
        labels.iter().enumerate().map(|(i, &l)| if i / len.max(1) == r { l } else { IGNORE }).collect()
    };
    let mut pending = Vec::with_capacity(b);
    for r in 0..b {
        let row = TokenBatch {
            labels: only_row(&batch.labels, t, r),
            decoder_labels: only_row(&batch.decoder_labels, batch.decoder_len, r),
            ..batch.clone()
        };
        let tokens = row.targets_for(objective);
        let loss = match (tokens, objective) {
            (0, _) => None,
            (_, Objective::CausalLm) => Some(causal_lm_loss(g, logits, &row.labels, b, t)?),
            (_, Objective::Seq2SeqLm) => Some(masked_lm_loss(g, logits, &row.decoder_labels)?),
            _ => Some(masked_lm_loss(g, logits, &row.labels)?),
        };
        pending.push((loss, tokens));
    }
    let mut out = Vec::with_capacity(b);
    for (loss, tokens) in pending {
        let loss = match loss {
            Some(l) => Some(f64::from(g.read(&l)?[0])),
            None => None,
        };
        out.push(RowLoss { loss, tokens, ..Default::default() });
    }
    Ok(out)
}
