//! Beam search for encoder-decoder models, step for step as transformers 5.24's `_beam_search`
//! (one source at a time, its `num_beams` beams as the rows of a `Seq2SeqCache` whose history is
//! reordered after each step):
//! - each step's log-softmax goes through the processors (no-repeat n-gram, forced BOS/EOS), is
//!   added to the running beam scores, and the best `keep = max(2, 1 + #eos)·num_beams` of the
//!   `num_beams·V` continuations are taken;
//! - candidates ending in an EOS id, or reaching `max_length`, are finished: among the first
//!   `num_beams` of them, scored `sum / generated_len^length_penalty`, they join the finished
//!   list (the best `num_beams` kept) unless the batch is done; the best `num_beams` unfinished
//!   candidates run on;
//! - the search stops when every candidate is finished, when `early_stopping` is true and all
//!   `num_beams` slots are finished, or when the best running beam can no longer beat the worst
//!   finished one (transformers' heuristic, whose hypothetical length depends on
//!   `early_stopping` = `"never"`).
//!
//! Scores are f32 as torch keeps them; "impossible" is torch's `-1e9`.

use vkformers_models::model::Model;
use vkformers_models::seq2seq::{encode, Encoded, Seq2SeqCache};
use vkformers_tensor::Graph;

use crate::decode::DecodeError;
use crate::seq2seq::Seq2SeqOptions;

/// transformers' `early_stopping`: `True`, `False` or `"never"`.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum EarlyStopping {
    True,
    False,
    Never,
}

/// The beam-search settings (`generate`'s names).
#[derive(Clone, Debug, PartialEq)]
pub struct BeamOptions {
    pub num_beams: usize,
    /// A Python float: powers are taken in f64, then the f32 scores divided by them, as torch.
    pub length_penalty: f64,
    pub early_stopping: EarlyStopping,
    /// 0 = off.
    pub no_repeat_ngram_size: usize,
    pub num_return_sequences: usize,
}

/// One returned hypothesis: the decoder sequence (start token first, filled after its end as
/// transformers fills it) and its length-penalised score (`sequences_scores`).
#[derive(Clone, Debug, PartialEq)]
pub struct Hypothesis {
    pub tokens: Vec<u32>,
    pub score: f32,
}

const NEG: f32 = -1.0e9;

/// A beam: its sequence and, per generated position, nothing else is needed on the host.
#[derive(Clone, Debug)]
struct Beam {
    seq: Vec<u32>,
    score: f32,
}

/// Indices of the `k` largest values, largest first (ties: the lower index first, as torch's
/// CPU `topk` gives them for distinct inputs).
fn top_k(values: &[f32], k: usize) -> Vec<usize> {
    let mut idx: Vec<usize> = (0..values.len()).collect();
    idx.sort_by(|&a, &b| values[b].total_cmp(&values[a]).then(a.cmp(&b)));
    idx.truncate(k);
    idx
}

/// `log_softmax` of one row in f32 (max-shifted, as torch).
fn log_softmax(row: &[f32]) -> Vec<f32> {
    let max = row.iter().copied().fold(f32::NEG_INFINITY, f32::max);
    let sum: f32 = row.iter().map(|&x| (x - max).exp()).sum();
    let log_sum = sum.ln();
    row.iter().map(|&x| x - max - log_sum).collect()
}

/// `NoRepeatNGramLogitsProcessor`: tokens that would repeat an n-gram of `seq` get `-inf`.
fn ban_repeated_ngrams(seq: &[u32], n: usize, scores: &mut [f32]) {
    if n == 0 || seq.len() + 1 < n {
        return;
    }
    let prefix = &seq[seq.len() + 1 - n..];
    for w in seq.windows(n) {
        if &w[..n - 1] == prefix {
            scores[w[n - 1] as usize] = f32::NEG_INFINITY;
        }
    }
}

/// The processors of one row's log-probabilities at decoder length `cur_len`.
fn process(opts: &Seq2SeqOptions, beam: &BeamOptions, seq: &[u32], cur_len: usize, max_length: usize, row: &mut [f32]) {
    ban_repeated_ngrams(seq, beam.no_repeat_ngram_size, row);
    let force = |row: &mut [f32], id: u32| {
        row.fill(f32::NEG_INFINITY);
        row[id as usize] = 0.0;
    };
    if let (1, Some(bos)) = (cur_len, opts.forced_bos) {
        force(row, bos);
    }
    if let Some(eos) = opts.forced_eos.filter(|_| cur_len + 1 == max_length) {
        force(row, eos);
    }
}

/// Beam search of each source (see the module docs); `num_return_sequences` hypotheses each.
pub fn beam_search(
    g: &Graph<'_>,
    model: &Model,
    sources: &[Vec<u32>],
    opts: &Seq2SeqOptions,
    beam: &BeamOptions,
) -> Result<Vec<Vec<Hypothesis>>, DecodeError> {
    if beam.num_beams == 0 || beam.num_return_sequences == 0 || beam.num_return_sequences > beam.num_beams {
        return Err(DecodeError::Model(vkformers_models::ModelError::Config(format!(
            "--num-return-sequences {} must be between 1 and --num-beams {}",
            beam.num_return_sequences, beam.num_beams
        ))));
    }
    sources.iter().map(|src| one_source(g, model, src, opts, beam)).collect()
}

fn one_source(
    g: &Graph<'_>,
    model: &Model,
    src: &[u32],
    opts: &Seq2SeqOptions,
    bo: &BeamOptions,
) -> Result<Vec<Hypothesis>, DecodeError> {
    if src.is_empty() {
        return Err(DecodeError::EmptyPrompt);
    }
    let k = bo.num_beams;
    let keep = 2usize.max(1 + opts.eos.len()) * k;
    let max_length = opts.max_new_tokens + 1;
    // transformers fills with `pad_token_id or eos_token_id[0]` (a pad id of 0 is falsy there).
    let fill = if opts.pad != 0 { opts.pad } else { opts.eos.first().copied().unwrap_or(0) };
    g.no_grad(|| {
        let ids: Vec<i32> = (0..k).flat_map(|_| src.iter().map(|&t| t as i32)).collect();
        let mask = vec![1; ids.len()];
        let hidden = encode(g, &model.spec, &model.weights, &ids, &mask, (k, src.len()))?;
        let enc = Encoded { hidden: &hidden, mask: &mask, len: src.len() };
        let cache = Seq2SeqCache::new(g, &model.spec, &model.weights, &enc, k, max_length)?;
        let mut running: Vec<Beam> =
            (0..k).map(|i| Beam { seq: vec![opts.decoder_start], score: if i == 0 { 0.0 } else { NEG } }).collect();
        let mut finished: Vec<(Beam, bool)> = vec![(Beam { seq: Vec::new(), score: NEG }, false); k];
        let mut unsatisfied = true;
        let mut cur_len = 1;
        loop {
            let last: Vec<i32> = running.iter().map(|b| b.seq[b.seq.len() - 1] as i32).collect();
            let logits = cache.step(g, &model.spec, &model.weights, &last)?;
            let vocab = logits.last_dim();
            let all = g.read(&logits)?;
            // Accumulated scores of every continuation `[K·V]`.
            let mut acc = Vec::with_capacity(k * vocab);
            for (b, row) in running.iter().zip(all.chunks(vocab)) {
                let mut lp = log_softmax(row);
                process(opts, bo, &b.seq, cur_len, max_length, &mut lp);
                acc.extend(lp.iter().map(|&x| x + b.score));
            }
            let cands: Vec<(usize, u32, f32)> =
                top_k(&acc, keep).into_iter().map(|i| (i / vocab, (i % vocab) as u32, acc[i])).collect();
            let hits: Vec<bool> =
                cands.iter().map(|&(_, t, _)| opts.eos.contains(&t) || cur_len + 1 >= max_length).collect();
            // The best unfinished candidates run on.
            let run_scores: Vec<f32> = cands.iter().zip(&hits).map(|(c, &h)| if h { c.2 + NEG } else { c.2 }).collect();
            let next = top_k(&run_scores, k);
            let grow = |&(b, t, _): &(usize, u32, f32)| [running[b].seq.clone(), vec![t]].concat();
            let new_running: Vec<Beam> =
                next.iter().map(|&j| Beam { seq: grow(&cands[j]), score: run_scores[j] }).collect();
            let order: Vec<usize> = next.iter().map(|&j| cands[j].0).collect();
            // Finished candidates among the first K join the finished list.
            let all_done = finished.iter().all(|f| f.1) && bo.early_stopping == EarlyStopping::True;
            let mut merged = finished.clone();
            for (j, c) in cands.iter().enumerate() {
                let just = hits[j] && j < k;
                let mut s = c.2 / (cur_len as f64).powf(bo.length_penalty) as f32;
                if all_done {
                    s += NEG;
                }
                if !unsatisfied {
                    s += NEG;
                }
                if !just {
                    s += NEG;
                }
                merged.push((Beam { seq: grow(c), score: s }, just));
            }
            let scores: Vec<f32> = merged.iter().map(|m| m.0.score).collect();
            finished = top_k(&scores, k).into_iter().map(|i| merged[i].clone()).collect();
            running = new_running;
            cache.reorder(g, &order)?;
            cur_len += 1;
            let hyp_len = match bo.early_stopping {
                EarlyStopping::Never if bo.length_penalty > 0.0 => max_length - 1,
                _ => cur_len - 1,
            };
            let best_running = running[0].score / (hyp_len as f64).powf(bo.length_penalty) as f32;
            let worst = finished.iter().map(|f| f.0.score).fold(f32::INFINITY, f32::min);
            unsatisfied &= finished.iter().any(|f| best_running > if f.1 { worst } else { NEG });
            let open = !(finished.iter().all(|f| f.1) && bo.early_stopping == EarlyStopping::True);
            if !(unsatisfied && open && !hits.iter().all(|&h| h)) {
                break;
            }
        }
        Ok(returned(finished, bo.num_return_sequences, fill, opts.decoder_start))
    })
}

/// The first `n` finished hypotheses, each filled with `fill` to the longest one's length.
fn returned(finished: Vec<(Beam, bool)>, n: usize, fill: u32, start: u32) -> Vec<Hypothesis> {
    let top: Vec<Beam> = finished.into_iter().take(n).map(|f| f.0).collect();
    let longest = top.iter().map(|b| b.seq.len()).max().unwrap_or(1);
    top.into_iter()
        .map(|b| {
            let mut tokens = if b.seq.is_empty() { vec![start] } else { b.seq };
            tokens.resize(longest, fill);
            Hypothesis { tokens, score: b.score }
        })
        .collect()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn no_repeat_ngram_bans_what_would_repeat() {
        // 2-grams of [5, 6, 5]: (5,6), (6,5); the prefix is [5], so 6 is banned.
        let mut s = vec![0.0; 8];
        ban_repeated_ngrams(&[5, 6, 5], 2, &mut s);
        assert_eq!(s.iter().filter(|x| x.is_infinite()).count(), 1);
        assert!(s[6].is_infinite());
        let mut s = vec![0.0; 8];
        ban_repeated_ngrams(&[5], 3, &mut s);
        assert!(s.iter().all(|x| x.is_finite()), "too short to repeat a 3-gram");
    }
}
