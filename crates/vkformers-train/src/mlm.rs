//! Masked-LM masking as transformers' `DataCollatorForLanguageModeling` does it: each token that
//! is not special is chosen with probability `p`; a chosen token becomes a target (its label is
//! the original id, every other label -100) and its input is replaced by the mask token 80% of
//! the time, by a uniformly drawn token 10% of the time, and kept 10% of the time. The draws
//! come from a seeded generator (not torch's), keyed by the row's place in the data order.

use vkformers_data::Example;

use crate::batching::IGNORE;
use crate::error::{Result, TrainError};
use crate::rng::SplitMix64;

/// The masking of one run.
#[derive(Clone, Debug, PartialEq)]
pub struct MlmMasking {
    /// Chance that a non-special token becomes a target (`--mlm-probability`).
    pub probability: f64,
    /// The mask token's id (`[MASK]`, `<mask>`).
    pub mask_id: u32,
    /// Random replacements are drawn from `0..vocab` (the tokenizer's size).
    pub vocab: u32,
    /// Ids that are never chosen: the tokenizer's special tokens (CLS, SEP, PAD, ...).
    pub special: Vec<u32>,
    pub seed: u64,
}

impl MlmMasking {
    pub fn new(probability: f64, mask_id: u32, vocab: u32, special: Vec<u32>, seed: u64) -> Result<Self> {
        if !(probability > 0.0 && probability < 1.0) {
            return Err(TrainError::Config(format!("--mlm-probability must lie in (0, 1), got {probability}")));
        }
        if vocab == 0 || mask_id >= vocab {
            return Err(TrainError::Config(format!("mask token id {mask_id} is outside the vocabulary of {vocab}")));
        }
        Ok(MlmMasking { probability, mask_id, vocab, special, seed })
    }

    /// `row` masked with the draws of `key` (labels: the original ids at chosen positions).
    pub fn mask(&self, row: &Example, key: u64) -> Example {
        let mut rng = SplitMix64::new(self.seed ^ key.wrapping_mul(0x9E6C_63D0_676A_9A99) ^ 0x4D4C_4D00);
        let mut out = row.clone();
        for (id, label) in out.input_ids.iter_mut().zip(out.labels.iter_mut()) {
            *label = IGNORE;
            if self.special.contains(id) || rng.unit_f64() >= self.probability {
                continue;
            }
            *label = *id as i32;
            let r = rng.unit_f64();
            if r < 0.8 {
                *id = self.mask_id;
            } else if r < 0.9 {
                *id = rng.below(u64::from(self.vocab)) as u32;
            }
        }
        out
    }

    /// Every row masked once (a fixed evaluation set), row `i` with key `u64::MAX - i` (draws no
    /// training batch uses).
    pub fn mask_all(&self, rows: &[Example]) -> Vec<Example> {
        rows.iter().enumerate().map(|(i, r)| self.mask(r, u64::MAX - i as u64)).collect()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn chooses_p_of_the_tokens_and_replaces_80_10_10() {
        let m = MlmMasking::new(0.15, 3, 1000, vec![1, 2], 7).unwrap();
        // 1 and 2 are special (CLS/SEP): never chosen.
        let ids: Vec<u32> = (0..20_000).map(|i| if i % 10 == 0 { 1 } else { 100 + (i % 800) as u32 }).collect();
        let row = Example::new(ids.clone(), ids.iter().map(|&t| t as i32).collect());
        let out = m.mask(&row, 5);
        assert_eq!(out, m.mask(&row, 5), "seeded");
        assert_ne!(out, m.mask(&row, 6), "another key draws again");
        let (mut chosen, mut masked, mut kept) = (0, 0, 0);
        for ((&orig, &now), &label) in ids.iter().zip(&out.input_ids).zip(&out.labels) {
            if label == IGNORE {
                assert_eq!(orig, now, "an unchosen token is left alone");
                continue;
            }
            assert_ne!(orig, 1, "a special token is never chosen");
            assert_eq!(label, orig as i32);
            chosen += 1;
            masked += usize::from(now == 3);
            kept += usize::from(now == orig);
        }
        let eligible = 18_000.0;
        let p = chosen as f64 / eligible;
        assert!((p - 0.15).abs() < 0.01, "chosen fraction {p}");
        let (fm, fk) = (masked as f64 / chosen as f64, kept as f64 / chosen as f64);
        assert!((fm - 0.8).abs() < 0.03, "masked fraction {fm}");
        // Kept: the 10% left alone plus random draws that hit the same id (1 in 1000).
        assert!((fk - 0.1).abs() < 0.02, "kept fraction {fk}");
    }

    #[test]
    fn refuses_a_probability_outside_0_1_and_a_mask_outside_the_vocabulary() {
        assert!(MlmMasking::new(0.0, 3, 10, vec![], 0).is_err());
        assert!(MlmMasking::new(1.0, 3, 10, vec![], 0).is_err());
        assert!(MlmMasking::new(0.15, 10, 10, vec![], 0).is_err());
    }
}
