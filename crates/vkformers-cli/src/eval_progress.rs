//! `vkformers eval` over many rows with a progress bar on a terminal: the rows go to
//! `vkformers_train::evaluate` one batch at a time and the per-row losses are combined as
//! `evaluate` combines them (token-weighted mean), so the numbers are those of one call.

use std::io::IsTerminal as _;

use anyhow::bail;
use vkformers_data::Example;
use vkformers_tensor::Graph;
use vkformers_train::eval::RowLoss;
use vkformers_train::{evaluate, EvalReport, LanguageModel};

/// Whether a row has a target `evaluate` counts (a label at position 1 or later; position 0
/// predicts nothing). A batch without one is not sent (`evaluate` refuses it).
fn has_targets(e: &Example) -> bool {
    e.labels.get(1..).is_some_and(|l| l.iter().any(|&x| x >= 0))
}

/// [`evaluate`] of `rows`, `batch` at a time, showing rows done on a terminal's stderr.
pub fn evaluate_with_bar(
    g: &Graph<'_>,
    model: &dyn LanguageModel,
    rows: &[Example],
    batch: usize,
    pad: u32,
) -> anyhow::Result<EvalReport> {
    let bar = std::io::stderr().is_terminal().then(|| {
        let bar = indicatif::ProgressBar::new(rows.len() as u64);
        let style =
            indicatif::ProgressStyle::with_template("eval {bar:30} {pos}/{len} rows [{elapsed_precise}<{eta_precise}]")
                .unwrap_or_else(|_| indicatif::ProgressStyle::default_bar());
        bar.set_style(style);
        bar
    });
    let mut losses: Vec<RowLoss> = Vec::with_capacity(rows.len());
    for chunk in rows.chunks(batch.max(1)) {
        if chunk.iter().any(has_targets) {
            losses.extend(evaluate(g, model, chunk, batch, pad)?.rows);
        } else {
            losses.extend(chunk.iter().map(|_| RowLoss { loss: None, tokens: 0 }));
        }
        if let Some(b) = &bar {
            b.inc(chunk.len() as u64);
        }
    }
    if let Some(b) = &bar {
        b.finish_and_clear();
    }
    let tokens: usize = losses.iter().map(|r| r.tokens).sum();
    if tokens == 0 {
        bail!("the evaluation data has no tokens to predict");
    }
    let sum: f64 = losses.iter().filter_map(|r| r.loss.map(|l| l * r.tokens as f64)).sum();
    let loss = sum / tokens as f64;
    Ok(EvalReport { loss, perplexity: loss.exp(), tokens, rows: losses })
}
