//! The keys of LoRA dropout: each input row's mask is drawn from the row's sample (its global
//! index in the training order) and its position in that sample, so a sample draws the same
//! masks in a batch of any size, on any rank of any world size (issue 22's "one RNG stream
//! keyed by global sample index").
//!
//! Rows whose count fits no layout fall back to the batch-wide element stream keyed by the
//! training step (no supported head makes such rows: decoder classifiers are refused).

use std::cell::Cell;
use std::rc::Rc;

use vkformers_tensor::ops::dropout::{sample_row_keys, token_row_keys};

/// The samples of the micro-batch being trained: global indices `[B]` and the padded length
/// `T` of its token rows `[B·T]` (and `T_dec` of an encoder-decoder's decoder rows
/// `[B·T_dec]`, 0 for other models).
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct SampleKeys {
    pub samples: Rc<Vec<u64>>,
    pub seq: usize,
    pub decoder_seq: usize,
}

/// How the rows of a LoRA input relate to the batch's samples.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Default)]
pub enum RowLayout {
    /// `[B·T]` token rows when the count matches (else unknown).
    #[default]
    Tokens,
    /// `[B]` rows, one per sample (a pooled classification head's input).
    Samples,
    /// Rows gathered from the `[B·T]` token rows at given positions (a sparse masked-LM
    /// head's target rows).
    Gathered,
}

impl SampleKeys {
    /// The `[rows, 3]` key words of `rows` input rows laid out as `layout`; `None` when the
    /// count does not fit the layout (rows the caller gathered or routed).
    /// `gathered`: the token positions of `RowLayout::Gathered` rows.
    pub fn keys(&self, rows: usize, layout: RowLayout, gathered: &[usize]) -> Option<Vec<i32>> {
        let (b, t) = (self.samples.len(), self.seq);
        match layout {
            // Token rows of either side: row (b, l) keyed (l, sample b) whatever the length.
            RowLayout::Tokens if b > 0 && (rows == b * t || rows == b * self.decoder_seq) => {
                Some(token_row_keys(&self.samples, rows / b))
            }
            RowLayout::Samples if rows == b => Some(sample_row_keys(&self.samples)),
            RowLayout::Gathered if rows == gathered.len() && gathered.iter().all(|&p| p < b * t) => {
                // Each row keyed as the token row it was gathered from.
                let key = |p: usize| {
                    [
                        (p % t) as u32 as i32,
                        self.samples[p / t] as u32 as i32,
                        (self.samples[p / t] >> 32) as u32 as i32,
                    ]
                };
                Some(gathered.iter().flat_map(|&p| key(p)).collect())
            }
            _ => None,
        }
    }
}

/// The Philox key of module `module`'s masks under run seed `seed` (modules draw apart; the
/// parts of one fused module share their module's mask, as PEFT drops the input once).
pub fn module_seed(seed: u64, module: u64) -> u64 {
    // splitmix64's finaliser of (seed + module · golden ratio): distinct modules, unrelated keys.
    let mut z = seed.wrapping_add(module.wrapping_add(1).wrapping_mul(0x9E37_79B9_7F4A_7C15));
    z = (z ^ (z >> 30)).wrapping_mul(0xBF58_476D_1CE4_E5B9);
    z = (z ^ (z >> 27)).wrapping_mul(0x94D0_49BB_1331_11EB);
    z ^ (z >> 31)
}

/// Runs `f` with the LoRA inputs laid out as `layout` (restored after, even on error).
pub(crate) fn with_layout<R>(cell: &Cell<RowLayout>, layout: RowLayout, f: impl FnOnce() -> R) -> R {
    let before = cell.replace(layout);
    let out = f();
    cell.set(before);
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn token_rows_are_keyed_by_position_and_sample_whatever_the_padding() {
        let short = SampleKeys { samples: Rc::new(vec![7, 1 << 33]), seq: 2, decoder_seq: 5 };
        let long = SampleKeys { samples: Rc::new(vec![1 << 33]), seq: 3, decoder_seq: 0 };
        let a = short.keys(4, RowLayout::Tokens, &[]).unwrap();
        let b = long.keys(3, RowLayout::Tokens, &[]).unwrap();
        // Sample 2^33's tokens 0 and 1: the same keys in both batches.
        assert_eq!(a[6..12], b[0..6]);
        assert_eq!(a[0..3], [0, 7, 0]);
        assert_eq!(b[6..9], [2, 0, 2]);
        assert_eq!(short.keys(3, RowLayout::Tokens, &[]), None, "rows of another count are not keyed");
        // Decoder rows [2·5]: sample 2^33's decoder tokens 0 and 1 keyed as its source tokens.
        assert_eq!(short.keys(10, RowLayout::Tokens, &[]).unwrap()[15..21], a[6..12]);
        assert_eq!(short.keys(2, RowLayout::Samples, &[]).unwrap()[3..6], [-1, 0, 2]);
        // Gathered rows are keyed as the token rows they came from.
        assert_eq!(short.keys(2, RowLayout::Gathered, &[3, 0]).unwrap(), [&a[9..12], &a[0..3]].concat());
        assert_eq!(short.keys(1, RowLayout::Gathered, &[4]), None, "a position past the batch");
    }

    #[test]
    fn modules_draw_apart() {
        assert_ne!(module_seed(3, 0), module_seed(3, 1));
        assert_ne!(module_seed(3, 0), module_seed(4, 0));
        assert_eq!(module_seed(3, 5), module_seed(3, 5));
    }
}
