//! Beam search, step for step as transformers 5.24's `_beam_search`, over any model that gives
//! the next-token logits of its beams and can reorder its history (`BeamModel`):
//! - each step's log-softmax goes through the processors (no-repeat n-gram, forced BOS/EOS), is
//!   added to the running beam scores, and the best `keep = max(2, 1 + #eos)·num_beams` of the
//!   `num_beams·V` continuations are taken;
//! - candidates ending in an EOS id, or reaching `max_length`, are finished: among the first
//!   `num_beams` of them, scored `sum / generated_len^length_penalty`, they join the finished
//!   list (the best `num_beams` kept) unless the search is done; the best `num_beams` unfinished
//!   candidates run on;
//! - the search stops when every candidate is finished, when `early_stopping` is true and all
//!   `num_beams` slots are finished, or when the best running beam can no longer beat the worst
//!   finished one (transformers' heuristic, whose hypothetical length depends on
//!   `early_stopping` = `"never"`).
//!
//! Scores are f32 as torch keeps them; "impossible" is torch's `-1e9`; length powers are taken in
//! f64 (Python floats) and rounded.

use crate::decode::DecodeError;

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

impl BeamOptions {
    pub(crate) fn check(&self) -> Result<(), DecodeError> {
        if self.num_beams == 0 || self.num_return_sequences == 0 || self.num_return_sequences > self.num_beams {
            return Err(DecodeError::Model(vkformers_models::ModelError::Config(format!(
                "--num-return-sequences {} must be between 1 and --num-beams {}",
                self.num_return_sequences, self.num_beams
            ))));
        }
        Ok(())
    }
}

/// Token ids a search runs with.
#[derive(Clone, Debug, PartialEq)]
pub struct BeamIds {
    pub eos: Vec<u32>,
    pub pad: u32,
    pub forced_bos: Option<u32>,
    pub forced_eos: Option<u32>,
    pub max_new_tokens: usize,
}

/// One returned hypothesis: the whole sequence (prompt or start token first, filled after its
/// end as transformers fills it) and its length-penalised score (`sequences_scores`).
#[derive(Clone, Debug, PartialEq)]
pub struct Hypothesis {
    pub tokens: Vec<u32>,
    pub score: f32,
}

/// What the search drives: `num_beams` rows of each prompt.
pub(crate) trait BeamModel {
    /// Logits `[K·V]` (row-major) of the next token of each beam, given every beam's sequence
    /// (the newest token last), and V.
    fn step(&mut self, beams: &[Vec<u32>]) -> Result<(Vec<f32>, usize), DecodeError>;
    /// Beam `r` continues old beam `src[r]`.
    fn reorder(&mut self, src: &[usize]) -> Result<(), DecodeError>;
}

const NEG: f32 = -1.0e9;

#[derive(Clone, Debug)]
struct Beam {
    seq: Vec<u32>,
    score: f32,
}

/// Indices of the `k` largest values, largest first (ties: the lower index first).
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

/// The processors of one row's log-probabilities at sequence length `cur_len`.
fn process(ids: &BeamIds, bo: &BeamOptions, seq: &[u32], max_length: usize, row: &mut [f32]) {
    let cur_len = seq.len();
    ban_repeated_ngrams(seq, bo.no_repeat_ngram_size, row);
    let force = |row: &mut [f32], id: u32| {
        row.fill(f32::NEG_INFINITY);
        row[id as usize] = 0.0;
    };
    if let (1, Some(bos)) = (cur_len, ids.forced_bos) {
        force(row, bos);
    }
    if let Some(eos) = ids.forced_eos.filter(|_| cur_len + 1 == max_length) {
        force(row, eos);
    }
}

/// The search state between steps.
struct State {
    running: Vec<Beam>,
    finished: Vec<(Beam, bool)>,
    unsatisfied: bool,
}

/// Beam search from `prompt` (a decoder's prompt, or an encoder-decoder's start token).
pub(crate) fn search(
    model: &mut dyn BeamModel,
    prompt: &[u32],
    ids: &BeamIds,
    bo: &BeamOptions,
) -> Result<Vec<Hypothesis>, DecodeError> {
    Ok(search_batch(model, std::slice::from_ref(&prompt.to_vec()), ids, bo)?.remove(0))
}

/// Beam search of a batch of prompts of one length (encoder-decoders: each source's start
/// token), as transformers searches a batch: the model's rows are the `num_beams` beams of each
/// prompt in turn (`[N·K]`), every step runs all of them; each prompt's candidates, finished list
/// and stopping heuristic are its own, but the search runs on while any prompt can still improve
/// (a prompt that cannot only adds `-1e9`-penalised candidates, so its finished list stays),
/// stops early only when every prompt's finished list is full, and fills every returned
/// sequence to the batch's longest.
pub(crate) fn search_batch(
    model: &mut dyn BeamModel,
    prompts: &[Vec<u32>],
    ids: &BeamIds,
    bo: &BeamOptions,
) -> Result<Vec<Vec<Hypothesis>>, DecodeError> {
    bo.check()?;
    let (k, plen) = (bo.num_beams, prompts.first().map_or(0, Vec::len));
    if plen == 0 || prompts.iter().any(|p| p.len() != plen) {
        return Err(DecodeError::Request("a batched beam search takes prompts of one length, none empty".into()));
    }
    let max_length = plen + ids.max_new_tokens;
    let fresh = |prompt: &Vec<u32>| State {
        running: (0..k).map(|i| Beam { seq: prompt.clone(), score: if i == 0 { 0.0 } else { NEG } }).collect(),
        finished: vec![(Beam { seq: Vec::new(), score: NEG }, false); k],
        unsatisfied: true,
    };
    let mut states: Vec<State> = prompts.iter().map(fresh).collect();
    loop {
        let seqs: Vec<Vec<u32>> = states.iter().flat_map(|st| st.running.iter().map(|b| b.seq.clone())).collect();
        let (logits, vocab) = model.step(&seqs)?;
        let (mut all_hit, mut order) = (true, Vec::with_capacity(seqs.len()));
        for (n, (st, rows)) in states.iter_mut().zip(logits.chunks(k * vocab)).enumerate() {
            let (hit, src) = advance(st, ids, bo, (rows, vocab), plen, max_length)?;
            all_hit &= hit;
            order.extend(src.into_iter().map(|b| n * k + b));
        }
        model.reorder(&order)?;
        let improvable = states.iter().any(|st| st.unsatisfied);
        let all_full = states.iter().all(|st| st.finished.iter().all(|f| f.1));
        let open = !(all_full && bo.early_stopping == EarlyStopping::True);
        if !(improvable && open && !all_hit) {
            break;
        }
    }
    // transformers fills with `pad_token_id or eos_token_id[0]` (a pad id of 0 is falsy there).
    let fill = if ids.pad != 0 { ids.pad } else { ids.eos.first().copied().unwrap_or(0) };
    let tops: Vec<Vec<Beam>> = states
        .into_iter()
        .map(|st| st.finished.into_iter().take(bo.num_return_sequences).map(|f| f.0).collect())
        .collect();
    let longest = tops.iter().flatten().map(|b| b.seq.len()).max().unwrap_or(0).max(plen);
    Ok(tops.into_iter().zip(prompts).map(|(top, prompt)| returned(top, longest, fill, prompt)).collect())
}

/// One step: candidates, the next running beams, the finished list and the stopping heuristic.
/// Returns whether every candidate hit a stopping criterion, and each new beam's source beam.
fn advance(
    st: &mut State,
    ids: &BeamIds,
    bo: &BeamOptions,
    (logits, vocab): (&[f32], usize),
    plen: usize,
    max_length: usize,
) -> Result<(bool, Vec<usize>), DecodeError> {
    let k = bo.num_beams;
    let keep = 2usize.max(1 + ids.eos.len()) * k;
    let cur_len = st.running[0].seq.len();
    // Accumulated scores of every continuation `[K·V]`.
    let mut acc = Vec::with_capacity(k * vocab);
    for (b, row) in st.running.iter().zip(logits.chunks(vocab)) {
        let mut lp = log_softmax(row);
        process(ids, bo, &b.seq, max_length, &mut lp);
        acc.extend(lp.iter().map(|&x| x + b.score));
    }
    let cands: Vec<(usize, u32, f32)> =
        top_k(&acc, keep).into_iter().map(|i| (i / vocab, (i % vocab) as u32, acc[i])).collect();
    let hits: Vec<bool> = cands.iter().map(|&(_, t, _)| ids.eos.contains(&t) || cur_len + 1 >= max_length).collect();
    let grow = |&(b, t, _): &(usize, u32, f32)| [st.running[b].seq.clone(), vec![t]].concat();
    // The best unfinished candidates run on.
    let run_scores: Vec<f32> = cands.iter().zip(&hits).map(|(c, &h)| if h { c.2 + NEG } else { c.2 }).collect();
    let next = top_k(&run_scores, k);
    let running: Vec<Beam> = next.iter().map(|&j| Beam { seq: grow(&cands[j]), score: run_scores[j] }).collect();
    let order: Vec<usize> = next.iter().map(|&j| cands[j].0).collect();
    // Finished candidates among the first K join the finished list.
    let full = st.finished.iter().all(|f| f.1) && bo.early_stopping == EarlyStopping::True;
    let denom = ((cur_len + 1 - plen) as f64).powf(bo.length_penalty) as f32;
    let mut merged = st.finished.clone();
    for (j, c) in cands.iter().enumerate() {
        let just = hits[j] && j < k;
        let mut s = c.2 / denom;
        // Not a candidate for the finished list: the list is full (early stopping), no
        // improvement is possible, or it is still running.
        for penalise in [full, !st.unsatisfied, !just] {
            if penalise {
                s += NEG;
            }
        }
        merged.push((Beam { seq: grow(c), score: s }, just));
    }
    let scores: Vec<f32> = merged.iter().map(|m| m.0.score).collect();
    st.finished = top_k(&scores, k).into_iter().map(|i| merged[i].clone()).collect();
    st.running = running;
    let hyp_len = match bo.early_stopping {
        EarlyStopping::Never if bo.length_penalty > 0.0 => max_length - plen,
        _ => cur_len + 1 - plen,
    };
    let best = st.running[0].score / (hyp_len as f64).powf(bo.length_penalty) as f32;
    let worst = st.finished.iter().map(|f| f.0.score).fold(f32::INFINITY, f32::min);
    st.unsatisfied &= st.finished.iter().any(|f| best > if f.1 { worst } else { NEG });
    Ok((hits.iter().all(|&h| h), order))
}

/// Finished hypotheses filled with `fill` to `longest` (one never filled is the prompt).
fn returned(top: Vec<Beam>, longest: usize, fill: u32, prompt: &[u32]) -> Vec<Hypothesis> {
    top.into_iter()
        .map(|b| {
            let mut tokens = if b.seq.is_empty() { prompt.to_vec() } else { b.seq };
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

    /// Logits that depend only on each beam's sequence (a hash of it), with EOS (id 0) likely
    /// after source 1 and unlikely after source 2, so their searches end at different steps.
    struct Hashed;

    impl BeamModel for Hashed {
        fn step(&mut self, beams: &[Vec<u32>]) -> Result<(Vec<f32>, usize), DecodeError> {
            const V: usize = 7;
            let mut out = Vec::with_capacity(beams.len() * V);
            for seq in beams {
                let h = seq.iter().fold(0x9e37_79b9_u64, |h, &t| (h ^ u64::from(t)).wrapping_mul(0x100_0000_01b3));
                for v in 0..V as u64 {
                    let x = ((h.wrapping_add(v.wrapping_mul(0x2545_f491)) >> 17) % 1000) as f32 / 250.0;
                    out.push(if v == 0 { x + if seq[0] == 1 { 2.0 } else { -3.0 } } else { x });
                }
            }
            Ok((out, V))
        }

        fn reorder(&mut self, _src: &[usize]) -> Result<(), DecodeError> {
            Ok(())
        }
    }

    /// A batch searches each source as it is searched alone (transformers' batched beam search):
    /// the same hypotheses and scores, every sequence filled to the batch's longest.
    #[test]
    fn a_batch_gives_each_source_its_own_search() {
        let ids = BeamIds { eos: vec![0], pad: 6, forced_bos: None, forced_eos: None, max_new_tokens: 9 };
        for (early, lp, ngram) in
            [(EarlyStopping::False, 1.0, 0), (EarlyStopping::True, 0.6, 2), (EarlyStopping::Never, 2.0, 3)]
        {
            let bo = BeamOptions {
                num_beams: 3,
                length_penalty: lp,
                early_stopping: early,
                no_repeat_ngram_size: ngram,
                num_return_sequences: 2,
            };
            let prompts = [vec![1], vec![2]];
            let batch = search_batch(&mut Hashed, &prompts, &ids, &bo).unwrap();
            let alone: Vec<Vec<Hypothesis>> =
                prompts.iter().map(|p| search(&mut Hashed, p, &ids, &bo).unwrap()).collect();
            let longest = batch[0][0].tokens.len();
            assert!(alone.iter().flatten().all(|h| h.tokens.len() <= longest));
            let lens: Vec<usize> = alone.iter().map(|h| h[0].tokens.len()).collect();
            // (A length penalty of 2 with "never" favours the longest: both reach max_length.)
            if early != EarlyStopping::Never {
                assert_ne!(
                    lens[0], lens[1],
                    "{early:?}: both sources ended at the same length; the test shows nothing"
                );
            }
            for (b, a) in batch.iter().zip(&alone) {
                for (hb, ha) in b.iter().zip(a) {
                    let mut filled = ha.tokens.clone();
                    filled.resize(longest, ids.pad);
                    assert_eq!((&hb.tokens, hb.score), (&filled, ha.score), "{early:?}");
                }
            }
        }
    }
}
