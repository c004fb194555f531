//! OpenAI's presence and frequency penalties, and the log-probabilities the API reports.

/// `logits[t] -= presence · [count(t) > 0] + frequency · count(t)` over the tokens generated so
/// far (OpenAI's definition; the prompt does not count). Both 0 = off.
#[derive(Debug, Clone, Copy, Default, PartialEq)]
pub struct Penalties {
    pub presence: f32,
    pub frequency: f32,
}

impl Penalties {
    pub fn is_off(&self) -> bool {
        self.presence == 0.0 && self.frequency == 0.0
    }

    /// Applies the penalties of the tokens in `generated` to `logits [V]`, in place.
    pub fn apply(&self, logits: &mut [f32], generated: &[u32]) {
        if self.is_off() {
            return;
        }
        let mut counts = std::collections::HashMap::<u32, u32>::new();
        generated.iter().for_each(|&t| *counts.entry(t).or_default() += 1);
        for (t, c) in counts {
            if let Some(l) = logits.get_mut(t as usize) {
                *l -= self.presence + self.frequency * c as f32;
            }
        }
    }
}

/// `log_softmax(logits)` `[V]`, computed in f64 (entries of `-inf` stay `-inf`).
pub fn log_probs(logits: &[f32]) -> Vec<f32> {
    let max = logits.iter().copied().filter(|v| !v.is_nan()).fold(f32::NEG_INFINITY, f32::max) as f64;
    let sum: f64 = logits.iter().map(|&v| (v as f64 - max).exp()).filter(|e| !e.is_nan()).sum();
    let log_sum = max + sum.ln();
    logits.iter().map(|&v| (v as f64 - log_sum) as f32).collect()
}

/// A chosen token's log-probability and the most likely alternatives (most likely first; the
/// lower id first on ties).
#[derive(Debug, Clone, PartialEq)]
pub struct TokenLogprob {
    pub token: u32,
    pub logprob: f32,
    pub top: Vec<(u32, f32)>,
}

impl TokenLogprob {
    /// `token`'s entry of `log_probs [V]` and the `top` largest entries.
    pub fn of(log_probs: &[f32], token: u32, top: usize) -> Self {
        let mut order: Vec<u32> = (0..log_probs.len() as u32).collect();
        let key = |i: &u32| log_probs[*i as usize];
        order.sort_by(|a, b| key(b).partial_cmp(&key(a)).unwrap_or(std::cmp::Ordering::Equal).then(a.cmp(b)));
        let top = order.into_iter().take(top).map(|i| (i, log_probs[i as usize])).collect();
        TokenLogprob { token, logprob: log_probs.get(token as usize).copied().unwrap_or(f32::NEG_INFINITY), top }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn penalties_follow_openai() {
        let mut l = vec![1.0f32, 1.0, 1.0];
        Penalties { presence: 0.5, frequency: 0.25 }.apply(&mut l, &[2, 2, 0]);
        assert_eq!(l, [1.0 - 0.75, 1.0, 1.0 - 1.0]);
    }

    #[test]
    fn log_probs_sum_to_one_and_top_is_sorted() {
        let lp = log_probs(&[0.0, 2.0, f32::NEG_INFINITY, 1.0]);
        let total: f64 = lp.iter().map(|&v| (v as f64).exp()).sum();
        assert!((total - 1.0).abs() < 1e-6);
        assert_eq!(lp[2], f32::NEG_INFINITY);
        let t = TokenLogprob::of(&lp, 3, 2);
        assert_eq!(t.top.iter().map(|x| x.0).collect::<Vec<_>>(), [1, 3]);
        assert_eq!(t.logprob, lp[3]);
    }
}
