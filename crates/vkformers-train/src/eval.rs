//! Evaluation: the token-weighted mean causal-LM loss over a dataset (each counted target
//! token weighs the same, as one big batch would), its perplexity, and each row's own loss.

use serde::Serialize;
use vkformers_data::Example;
use vkformers_models::decoder::causal_lm_loss;
use vkformers_tensor::Graph;

use crate::batching::{eval_batches, TokenBatch, IGNORE};
use crate::error::{Result, TrainError};
use crate::model::LanguageModel;

/// One row's mean loss over its `tokens` counted targets (`loss` is null without any).
#[derive(Clone, Debug, Serialize)]
pub struct RowLoss {
    pub loss: Option<f64>,
    pub tokens: usize,
}

#[derive(Clone, Debug, Serialize)]
pub struct EvalReport {
    /// Token-weighted mean loss: Σ over rows of (row loss · row tokens) / Σ tokens.
    pub loss: f64,
    pub perplexity: f64,
    /// Counted target tokens.
    pub tokens: usize,
    pub rows: Vec<RowLoss>,
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
            rows.extend(batch_row_losses(g, model, &batch)?);
        }
        Ok(())
    })?;
    let tokens: usize = rows.iter().map(|r| r.tokens).sum();
    if tokens == 0 {
        return Err(TrainError::Config("the evaluation data has no tokens to predict".into()));
    }
    let sum: f64 = rows.iter().filter_map(|r| r.loss.map(|l| l * r.tokens as f64)).sum();
    let loss = sum / tokens as f64;
    Ok(EvalReport { loss, perplexity: loss.exp(), tokens, rows })
}

/// The loss of each row of one batch: one forward, then the cross-entropy with every other
/// row's labels ignored (logits `[B·T, V]` stay on the device).
fn batch_row_losses(g: &Graph<'_>, model: &dyn LanguageModel, batch: &TokenBatch) -> Result<Vec<RowLoss>> {
    let logits = model.logits(g, batch)?;
    let (b, t) = (batch.batch, batch.seq);
    let mut pending = Vec::with_capacity(b);
    for r in 0..b {
        let labels: Vec<i32> =
            batch.labels.iter().enumerate().map(|(i, &l)| if i / t == r { l } else { IGNORE }).collect();
        let row = TokenBatch { labels, ..batch.clone() };
        let tokens = row.targets();
        let loss = if tokens > 0 { Some(causal_lm_loss(g, &logits, &row.labels, b, t)?) } else { None };
        pending.push((loss, tokens));
    }
    let mut out = Vec::with_capacity(b);
    for (loss, tokens) in pending {
        let loss = match loss {
            Some(l) => Some(f64::from(g.read(&l)?[0])),
            None => None,
        };
        out.push(RowLoss { loss, tokens });
    }
    g.clear_tape();
    Ok(out)
}
