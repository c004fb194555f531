//! Per-row losses and hits of classifier logits read back to the host (f64), as transformers'
//! losses define them: cross-entropy (single-label, token classes), mean squared error
//! (regression), mean binary cross-entropy with logits (multi-label); and the entity chunks of
//! IOB tags for the token classifier's F1 (seqeval's default, lenient IOB2 chunking).

use std::collections::HashSet;

use vkformers_models::encoder::{OwnedClsLabels, Problem};

use crate::batching::TokenBatch;
use crate::error::{Result, TrainError};
use crate::eval::RowLoss;

/// `logsumexp(x) − x[label]` and whether `label` is the argmax (first maximum, as torch's).
fn cross_entropy(x: &[f32], label: usize) -> (f64, bool) {
    let max = x.iter().fold(f32::NEG_INFINITY, |m, &v| m.max(v));
    let lse = f64::from(max) + x.iter().map(|&v| f64::from(v - max).exp()).sum::<f64>().ln();
    (lse - f64::from(x[label]), argmax(x) == label)
}

fn argmax(x: &[f32]) -> usize {
    x.iter().enumerate().fold(0, |best, (i, &v)| if v > x[best] { i } else { best })
}

/// Sequence classification: logits `[B, C]` against the rows' labels.
pub(crate) fn sequence_rows(
    logits: &[f32],
    labels: &OwnedClsLabels,
    problem: Problem,
    b: usize,
) -> Result<Vec<RowLoss>> {
    let c = logits.len() / b.max(1);
    let floats: Vec<f64> = match labels {
        OwnedClsLabels::Ids(ids) => ids.iter().map(|&v| f64::from(v)).collect(),
        OwnedClsLabels::Floats(f) => f.iter().map(|&v| f64::from(v)).collect(),
    };
    let want = if problem == Problem::SingleLabel { b } else { b * c };
    if floats.len() != want {
        return Err(TrainError::Config(format!(
            "{} labels for {b} rows of {c} logits ({problem:?}): each row needs {}",
            floats.len(),
            if problem == Problem::SingleLabel { "one class id".to_string() } else { format!("{c} values") }
        )));
    }
    let mut out = Vec::with_capacity(b);
    for (r, x) in logits.chunks(c).enumerate() {
        let (loss, correct) = match problem {
            Problem::SingleLabel => {
                let label = floats[r] as usize;
                if floats[r] < 0.0 || label >= c {
                    return Err(TrainError::Config(format!("class {} outside the model's {c} labels", floats[r])));
                }
                let (l, hit) = cross_entropy(x, label);
                (l, Some(usize::from(hit)))
            }
            Problem::Regression => {
                let y = &floats[r * c..(r + 1) * c];
                (x.iter().zip(y).map(|(&p, &t)| (f64::from(p) - t).powi(2)).sum::<f64>() / c as f64, None)
            }
            Problem::MultiLabel => {
                let y = &floats[r * c..(r + 1) * c];
                // softplus(x) − x·y, stable: max(x, 0) + ln(1 + e^−|x|) − x·y.
                let bce = |p: f64, t: f64| p.max(0.0) + (-p.abs()).exp().ln_1p() - p * t;
                let loss = x.iter().zip(y).map(|(&p, &t)| bce(f64::from(p), t)).sum::<f64>() / c as f64;
                let all_right = x.iter().zip(y).all(|(&p, &t)| (p > 0.0) == (t > 0.5));
                (loss, Some(usize::from(all_right)))
            }
        };
        out.push(RowLoss { loss: Some(loss), tokens: 1, correct, entities: None });
    }
    Ok(out)
}

/// Token classification: logits `[B·T, C]` against each position's label (-100 not counted);
/// with class names, each row's entity counts (gold, predicted, both) for the F1.
pub(crate) fn token_rows(logits: &[f32], batch: &TokenBatch, names: &[String]) -> Result<Vec<RowLoss>> {
    let c = logits.len() / batch.labels.len().max(1);
    let mut out = Vec::with_capacity(batch.batch);
    for (r, labels) in batch.labels.chunks(batch.seq.max(1)).enumerate() {
        let (mut sum, mut tokens, mut correct) = (0.0, 0, 0);
        let (mut gold, mut pred) = (Vec::new(), Vec::new());
        for (t, &label) in labels.iter().enumerate() {
            if label < 0 {
                continue;
            }
            if label as usize >= c {
                return Err(TrainError::Config(format!("token label {label} outside the model's {c} labels")));
            }
            let x = &logits[(r * batch.seq + t) * c..(r * batch.seq + t + 1) * c];
            let (l, hit) = cross_entropy(x, label as usize);
            sum += l;
            tokens += 1;
            correct += usize::from(hit);
            gold.push(label as usize);
            pred.push(argmax(x));
        }
        let entities = (!names.is_empty()).then(|| {
            let tag = |ids: &[usize]| ids.iter().map(|&i| names.get(i).map_or("O", String::as_str)).collect::<Vec<_>>();
            let (g, p) = (chunks(&tag(&gold)), chunks(&tag(&pred)));
            [g.len(), p.len(), g.intersection(&p).count()]
        });
        let loss = (tokens > 0).then(|| sum / tokens as f64);
        out.push(RowLoss { loss, tokens, correct: Some(correct), entities });
    }
    Ok(out)
}

/// Split `B-X` / `I-X` / `O` (a name without a prefix counts as `I-name`).
fn split(tag: &str) -> (char, &str) {
    match tag.split_once('-') {
        Some((p @ ("B" | "I"), ty)) => (p.chars().next().unwrap_or('I'), ty),
        _ if tag == "O" => ('O', ""),
        _ => ('I', tag),
    }
}

/// The entity chunks `(type, start, end)` of a tag sequence: a chunk starts at `B-X`, or at
/// `I-X` after `O` or another type, and ends before the next `B`, `O` or type change.
pub(crate) fn chunks(tags: &[&str]) -> HashSet<(String, usize, usize)> {
    let mut out = HashSet::new();
    let mut open: Option<(&str, usize)> = None;
    for (i, tag) in tags.iter().chain(std::iter::once(&"O")).enumerate() {
        let (prefix, ty) = split(tag);
        let continues = prefix == 'I' && open.is_some_and(|(t, _)| t == ty);
        if !continues {
            if let Some((t, start)) = open.take() {
                out.insert((t.to_string(), start, i));
            }
            if prefix != 'O' {
                open = Some((ty, i));
            }
        }
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn iob_chunks_as_seqeval() {
        let c = chunks(&["B-PER", "I-PER", "O", "I-LOC", "I-LOC", "B-LOC", "I-PER"]);
        let want: HashSet<_> =
            [("PER", 0, 2), ("LOC", 3, 5), ("LOC", 5, 6), ("PER", 6, 7)].map(|(t, a, b)| (t.to_string(), a, b)).into();
        assert_eq!(c, want);
    }

    #[test]
    fn sequence_losses_by_problem() {
        let logits = [2.0f32, 0.0, -1.0, 1.0];
        let ce = sequence_rows(&logits, &OwnedClsLabels::Ids(vec![0, 0]), Problem::SingleLabel, 2).unwrap();
        let want0 = (2f64.exp() + 1.0).ln() - 2.0;
        assert!((ce[0].loss.unwrap() - want0).abs() < 1e-12);
        assert_eq!((ce[0].correct, ce[1].correct), (Some(1), Some(0)));
        let mse = sequence_rows(&[0.5, -1.0], &OwnedClsLabels::Floats(vec![1.0, 1.0]), Problem::Regression, 2).unwrap();
        assert_eq!((mse[0].loss, mse[1].loss, mse[0].correct), (Some(0.25), Some(4.0), None));
        let bce = sequence_rows(&[0.0, 0.0], &OwnedClsLabels::Floats(vec![1.0, 0.0]), Problem::MultiLabel, 1).unwrap();
        assert!((bce[0].loss.unwrap() - 2f64.ln()).abs() < 1e-12);
    }
}
