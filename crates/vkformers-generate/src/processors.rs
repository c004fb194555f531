//! transformers' logits processors on one row of f32 logits, each a port of the rule in
//! `transformers/generation/logits_process.py` (5.24), with the same f32 arithmetic where it decides
//! which entries survive. Filtered entries become `-inf`.
//!
//! NaN logits are not supported (torch orders NaN above every number; here they compare equal).

use std::cmp::Ordering;

use crate::error::GenerateError;
use crate::softmax::softmax;

/// One logits processor, with its parameters already validated.
#[derive(Debug, Clone, PartialEq)]
pub enum LogitsProcessor {
    /// `RepetitionPenaltyLogitsProcessor`: every distinct id of the history (prompt + generated
    /// tokens; ids `>= V` are ignored) has its score divided by `penalty` when `>= 0`, multiplied
    /// when `< 0` — once, however often the id occurs.
    RepetitionPenalty {
        /// `> 0`; above 1 discourages repeats, below 1 encourages them.
        penalty: f64,
    },
    /// `TemperatureLogitsWarper`: `scores / temperature` in f32.
    Temperature {
        /// `> 0`.
        temperature: f64,
    },
    /// `TopKLogitsWarper`: keeps every score `>=` the k-th largest (`k = max(top_k,
    /// min_tokens_to_keep)`, clipped to `V`), so ties with the k-th are all kept.
    TopK {
        /// `>= 1`.
        top_k: usize,
        /// `>= 1`.
        min_tokens_to_keep: usize,
    },
    /// `TopPLogitsWarper`: sorts ascending, takes the f32 softmax of the sorted scores and its running
    /// sum (accumulated in f64 and rounded to f32 per entry, as torch's CPU `cumsum`), removes the
    /// entries whose running sum is `<= 1 - top_p`, except the last `min_tokens_to_keep`. The sort is
    /// stable (tied scores in index order). torch's CPU sort is not stable for long rows, so when a
    /// group of tied scores straddles the boundary transformers may remove different members of it.
    TopP {
        /// In `[0, 1]`.
        top_p: f64,
        /// `>= 1`.
        min_tokens_to_keep: usize,
    },
    /// `MinPLogitsWarper`: removes entries whose probability is `< min_p * max probability`, except
    /// the `min_tokens_to_keep` most probable (ties: lowest index first).
    MinP {
        /// In `[0, 1]`.
        min_p: f64,
        /// `>= 1`.
        min_tokens_to_keep: usize,
    },
}

fn invalid(name: &'static str, value: f64, why: &'static str) -> GenerateError {
    GenerateError::InvalidParam { name, value, why }
}

fn check_keep(min_tokens_to_keep: usize) -> Result<(), GenerateError> {
    if min_tokens_to_keep < 1 {
        return Err(invalid("min_tokens_to_keep", min_tokens_to_keep as f64, "must be >= 1"));
    }
    Ok(())
}

/// Descending by value (stable: ties keep index order).
fn desc(a: f32, b: f32) -> Ordering {
    b.partial_cmp(&a).unwrap_or(Ordering::Equal)
}

impl LogitsProcessor {
    /// Repetition penalty, rejected unless `penalty > 0`.
    pub fn repetition_penalty(penalty: f64) -> Result<Self, GenerateError> {
        if penalty.is_nan() || penalty <= 0.0 {
            return Err(invalid("repetition_penalty", penalty, "must be > 0"));
        }
        Ok(Self::RepetitionPenalty { penalty })
    }

    /// Temperature, rejected unless `temperature > 0` (use greedy decoding for 0).
    pub fn temperature(temperature: f64) -> Result<Self, GenerateError> {
        if temperature.is_nan() || temperature <= 0.0 {
            return Err(invalid("temperature", temperature, "must be > 0 (for 0, decode greedily)"));
        }
        Ok(Self::Temperature { temperature })
    }

    /// Top-k, rejected unless `top_k >= 1` and `min_tokens_to_keep >= 1`.
    pub fn top_k(top_k: usize, min_tokens_to_keep: usize) -> Result<Self, GenerateError> {
        if top_k < 1 {
            return Err(invalid("top_k", top_k as f64, "must be >= 1"));
        }
        check_keep(min_tokens_to_keep)?;
        Ok(Self::TopK { top_k, min_tokens_to_keep })
    }

    /// Top-p, rejected unless `0 <= top_p <= 1` and `min_tokens_to_keep >= 1`.
    pub fn top_p(top_p: f64, min_tokens_to_keep: usize) -> Result<Self, GenerateError> {
        if !(0.0..=1.0).contains(&top_p) {
            return Err(invalid("top_p", top_p, "must be in [0, 1]"));
        }
        check_keep(min_tokens_to_keep)?;
        Ok(Self::TopP { top_p, min_tokens_to_keep })
    }

    /// Min-p, rejected unless `0 <= min_p <= 1` and `min_tokens_to_keep >= 1`.
    pub fn min_p(min_p: f64, min_tokens_to_keep: usize) -> Result<Self, GenerateError> {
        if !(0.0..=1.0).contains(&min_p) {
            return Err(invalid("min_p", min_p, "must be in [0, 1]"));
        }
        check_keep(min_tokens_to_keep)?;
        Ok(Self::MinP { min_p, min_tokens_to_keep })
    }

    /// Applies this processor in place to `scores` (`[V]`); `history` (prompt + generated ids) is
    /// only read by the repetition penalty.
    pub fn apply(&self, scores: &mut [f32], history: &[u32]) {
        match *self {
            Self::RepetitionPenalty { penalty } => repetition_penalty(scores, history, penalty as f32),
            Self::Temperature { temperature } => {
                let t = temperature as f32;
                scores.iter_mut().for_each(|s| *s /= t);
            }
            Self::TopK { top_k, min_tokens_to_keep } => top_k_filter(scores, top_k.max(min_tokens_to_keep)),
            Self::TopP { top_p, min_tokens_to_keep } => top_p_filter(scores, top_p, min_tokens_to_keep),
            Self::MinP { min_p, min_tokens_to_keep } => min_p_filter(scores, min_p, min_tokens_to_keep),
        }
    }
}

fn repetition_penalty(scores: &mut [f32], history: &[u32], penalty: f32) {
    let mut ids: Vec<usize> = history.iter().map(|&i| i as usize).filter(|&i| i < scores.len()).collect();
    ids.sort_unstable();
    ids.dedup();
    for i in ids {
        let s = scores[i];
        scores[i] = if s < 0.0 { s * penalty } else { s / penalty };
    }
}

fn top_k_filter(scores: &mut [f32], k: usize) {
    let k = k.min(scores.len());
    if k == 0 {
        return;
    }
    let mut v = scores.to_vec();
    let (_, kth, _) = v.select_nth_unstable_by(k - 1, |a, b| desc(*a, *b));
    let kth = *kth;
    scores.iter_mut().filter(|s| **s < kth).for_each(|s| *s = f32::NEG_INFINITY);
}

fn top_p_filter(scores: &mut [f32], top_p: f64, min_keep: usize) {
    let n = scores.len();
    let mut order: Vec<usize> = (0..n).collect();
    order.sort_by(|&a, &b| scores[a].partial_cmp(&scores[b]).unwrap_or(Ordering::Equal));
    let sorted: Vec<f32> = order.iter().map(|&i| scores[i]).collect();
    let probs = softmax(&sorted);
    // torch compares the f32 running sum with the Python float `1 - top_p` cast to f32.
    let threshold = (1.0 - top_p) as f32;
    let protected_from = n.saturating_sub(min_keep);
    let mut cum = 0.0f64;
    for (j, (&i, &p)) in order.iter().zip(&probs).enumerate() {
        cum += f64::from(p);
        if j < protected_from && (cum as f32) <= threshold {
            scores[i] = f32::NEG_INFINITY;
        }
    }
}

fn min_p_filter(scores: &mut [f32], min_p: f64, min_keep: usize) {
    let probs = softmax(scores);
    let top = probs.iter().copied().fold(0.0f32, f32::max);
    let threshold = (min_p as f32) * top;
    let mut remove: Vec<bool> = probs.iter().map(|&p| p < threshold).collect();
    let mut order: Vec<usize> = (0..probs.len()).collect();
    order.sort_by(|&a, &b| desc(probs[a], probs[b]));
    order.iter().take(min_keep).for_each(|&i| remove[i] = false);
    scores.iter_mut().zip(remove).filter(|(_, r)| *r).for_each(|(s, _)| *s = f32::NEG_INFINITY);
}

/// Processors in the order they run.
#[derive(Debug, Clone, Default, PartialEq)]
pub struct Pipeline {
    /// The processors, first applied first.
    pub processors: Vec<LogitsProcessor>,
}

impl Pipeline {
    /// Applies every processor in order, in place.
    pub fn apply(&self, scores: &mut [f32], history: &[u32]) {
        self.processors.iter().for_each(|p| p.apply(scores, history));
    }
}

/// The sampling fields of transformers' `GenerationConfig` that vkformers supports.
#[derive(Debug, Clone, PartialEq)]
pub struct SamplingParams {
    /// Sample (true) or decode greedily (false). The warpers (temperature, top-k, top-p, min-p)
    /// only run when sampling, as in transformers.
    pub do_sample: bool,
    /// `1.0` = off.
    pub temperature: f64,
    /// `0` = off.
    pub top_k: usize,
    /// `1.0` = off.
    pub top_p: f64,
    /// `None` = off.
    pub min_p: Option<f64>,
    /// `1.0` = off.
    pub repetition_penalty: f64,
    /// Passed to top-k, top-p and min-p; `generate` uses 1 outside beam search.
    pub min_tokens_to_keep: usize,
}

impl SamplingParams {
    /// Greedy decoding with no processors (transformers' `GenerationConfig()` defaults).
    pub fn greedy() -> Self {
        Self { do_sample: false, ..Self::sampling() }
    }

    /// `do_sample=True` with transformers' other defaults: temperature 1, top-k 50, top-p 1.
    pub fn sampling() -> Self {
        Self {
            do_sample: true,
            temperature: 1.0,
            top_k: 50,
            top_p: 1.0,
            min_p: None,
            repetition_penalty: 1.0,
            min_tokens_to_keep: 1,
        }
    }

    /// The processors `generate` builds for these parameters (`GenerationMixin._get_logits_processor`),
    /// in its order: repetition penalty, then — only when sampling — temperature, top-k, top-p, min-p.
    pub fn processors(&self) -> Result<Pipeline, GenerateError> {
        let mut processors = Vec::new();
        if self.repetition_penalty != 1.0 {
            processors.push(LogitsProcessor::repetition_penalty(self.repetition_penalty)?);
        }
        if self.do_sample {
            let keep = self.min_tokens_to_keep;
            if self.temperature != 1.0 {
                processors.push(LogitsProcessor::temperature(self.temperature)?);
            }
            if self.top_k != 0 {
                processors.push(LogitsProcessor::top_k(self.top_k, keep)?);
            }
            if self.top_p < 1.0 {
                processors.push(LogitsProcessor::top_p(self.top_p, keep)?);
            }
            if let Some(min_p) = self.min_p {
                processors.push(LogitsProcessor::min_p(min_p, keep)?);
            }
        }
        Ok(Pipeline { processors })
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn rejects_what_transformers_rejects() {
        assert!(LogitsProcessor::temperature(0.0).is_err());
        assert!(LogitsProcessor::repetition_penalty(-1.0).is_err());
        assert!(LogitsProcessor::top_k(0, 1).is_err());
        assert!(LogitsProcessor::top_p(1.5, 1).is_err());
        assert!(LogitsProcessor::top_p(0.5, 0).is_err());
        assert!(LogitsProcessor::min_p(-0.1, 1).is_err());
        assert!(SamplingParams { temperature: 0.0, ..SamplingParams::sampling() }.processors().is_err());
    }

    #[test]
    fn greedy_skips_warpers() {
        let p = SamplingParams { repetition_penalty: 1.2, temperature: 0.5, ..SamplingParams::greedy() };
        assert_eq!(p.processors().unwrap().processors, vec![LogitsProcessor::RepetitionPenalty { penalty: 1.2 }]);
    }
}
