//! `vkformers eval` over many rows with a progress bar on a terminal: the rows go to
//! `vkformers_train::evaluate` one batch at a time and the per-row losses are combined as
//! `evaluate` combines them (token-weighted mean), so the numbers are those of one call.

use std::io::IsTerminal as _;

use anyhow::bail;
use vkformers_data::Example;
use vkformers_tensor::Graph;
use vkformers_train::eval::RowLoss;
use vkformers_train::{evaluate, EvalReport, LanguageModel, Objective};

/// Whether a row may have a target `evaluate` counts (a row label, a token label, or an
/// encoder-decoder row's decoder label; a causal LM's position 0 predicts nothing, so a row
/// with only that one is not sent: `evaluate` refuses a batch without targets).
fn has_targets(e: &Example, unshifted: bool) -> bool {
    let from = usize::from(!unshifted);
    e.target.is_some()
        || e.labels.get(from..).is_some_and(|l| l.iter().any(|&x| x >= 0))
        || e.decoder_labels.iter().any(|&x| x >= 0)
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
    let unshifted = model.objective() != Objective::CausalLm;
    for chunk in rows.chunks(batch.max(1)) {
        if chunk.iter().any(|e| has_targets(e, unshifted)) {
            losses.extend(evaluate(g, model, chunk, batch, pad)?.rows);
        } else {
            losses.extend(chunk.iter().map(|_| RowLoss::default()));
        }
        if let Some(b) = &bar {
            b.inc(chunk.len() as u64);
        }
    }
    if let Some(b) = &bar {
        b.finish_and_clear();
    }
    if losses.iter().all(|r| r.tokens == 0) {
        bail!("the evaluation data has no tokens to predict");
    }
    Ok(EvalReport::from_rows(losses)?)
}
