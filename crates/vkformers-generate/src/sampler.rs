//! Choosing the next token from processed logits: greedy argmax or seeded multinomial sampling.

use crate::error::GenerateError;
use crate::rng::uniform_f64;
use crate::softmax::softmax_f64;

/// Index of the largest logit; the first one on ties (as `torch.argmax`). NaN entries are skipped.
/// `None` for an empty row or one of only NaN.
pub fn argmax(logits: &[f32]) -> Option<u32> {
    let mut best: Option<(usize, f32)> = None;
    for (i, &v) in logits.iter().enumerate() {
        if v.is_nan() {
            continue;
        }
        if best.is_none_or(|(_, b)| v > b) {
            best = Some((i, v));
        }
    }
    best.map(|(i, _)| i as u32)
}

/// How the next token is chosen.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Sampler {
    /// `argmax` of the logits.
    Greedy,
    /// A draw from `softmax(logits)`; the uniform variate of step `step` (and batch row `row`) is
    /// Philox4x32-10 of counter `(step, row)` under key `seed`, so a run repeats exactly given
    /// the seed. (It does not reproduce torch's RNG stream.)
    Seeded {
        /// The run's seed.
        seed: u64,
    },
}

impl Sampler {
    /// The token for generation step `step` of batch row 0.
    pub fn sample(&self, logits: &[f32], step: u64) -> Result<u32, GenerateError> {
        self.sample_row(logits, step, 0)
    }

    /// The token for generation step `step` of batch row `row`.
    pub fn sample_row(&self, logits: &[f32], step: u64, row: u32) -> Result<u32, GenerateError> {
        match *self {
            Self::Greedy => argmax(logits).ok_or(GenerateError::NothingToSample),
            Self::Seeded { seed } => {
                let probs = softmax_f64(logits);
                draw(&probs, uniform_f64(seed, step, row))
            }
        }
    }
}

/// The seeded sampler's draw from `softmax(logits)` at uniform variate `u` in `[0, 1)` (tests use it
/// to find draws that land within rounding of a boundary between two tokens).
pub fn sample_at(logits: &[f32], u: f64) -> Result<u32, GenerateError> {
    draw(&softmax_f64(logits), u)
}

/// Inverse-CDF draw: the first index whose running sum of `probs` exceeds `u * sum`; entries of
/// probability 0 are never chosen.
fn draw(probs: &[f64], u: f64) -> Result<u32, GenerateError> {
    let total: f64 = probs.iter().sum();
    if total.is_nan() || total <= 0.0 {
        return Err(GenerateError::NothingToSample);
    }
    let target = u * total;
    let mut cum = 0.0;
    let mut last = None;
    for (i, &p) in probs.iter().enumerate() {
        if p <= 0.0 {
            continue;
        }
        cum += p;
        last = Some(i);
        if cum > target {
            return Ok(i as u32);
        }
    }
    // Rounding can leave the running sum a hair below `target`: take the last possible token.
    last.map(|i| i as u32).ok_or(GenerateError::NothingToSample)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn draw_edges() {
        assert_eq!(draw(&[0.0, 1.0, 0.0], 0.0), Ok(1));
        assert_eq!(draw(&[0.0, 1.0, 0.0], 0.999_999_999), Ok(1));
        assert_eq!(draw(&[0.5, 0.0, 0.5], 0.5), Ok(2));
        assert_eq!(draw(&[0.0, 0.0], 0.3), Err(GenerateError::NothingToSample));
    }
}
