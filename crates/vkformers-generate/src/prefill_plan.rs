//! Which newly admitted requests prefill together, and how wide: one left-padded forward
//! `[n, T]` (mask `0…0 1…1`; the KV cache stores only the real positions) instead of one forward
//! per prompt, so requests that arrive together get their first tokens after one forward.
//!
//! Bit-exact whatever the company: every prefill's width is its longest prompt rounded up to
//! [`ALIGN`] columns, alone or not. Then a prompt's padding differs between any two of its
//! prefills by a multiple of `ALIGN`, a multiple of every flash-attention key tile (`fwd.comp`:
//! 32/16/8 keys, `fwd_cm2.comp`: 64/32), so its real keys fall in the same places of the same
//! tiles; the leading tiles of padding are exact no-ops of the online softmax (masked scores
//! leave m, l and the accumulators as they start), and every other op is row-wise. So a request's
//! logits do not depend on what it prefills with (tests: `batched_prefill.rs`, and serve's 16
//! concurrent requests equal to one at a time, log-probabilities included).
//!
//! A group costs at most `max_pad` times the columns its members cost alone (sorted by length,
//! similar lengths share a group) and at most `max_tokens` columns in all (the activations of a
//! forward); only requests of one key share a forward (one model: the base or one adapter, and
//! one of LongRoPE's factor sets, which is chosen per forward).

/// Prefill widths are multiples of this many columns (see the module docs).
pub const ALIGN: usize = 64;

/// One admitted request: its slot, prompt length and what its forward must share with the
/// others of its group (its model, and whether its prefill runs on LongRoPE's long factors).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Admitted {
    pub slot: usize,
    pub len: usize,
    pub key: usize,
}

/// Padded tokens a prefill forward holds at most, unless one prompt alone is longer.
pub const MAX_PREFILL_TOKENS: usize = 16384;

/// The width of a prefill whose longest row has `len` columns.
pub fn width(len: usize) -> usize {
    len.div_ceil(ALIGN).max(1) * ALIGN
}

/// Groups of slots, each one forward (see the module docs). `max_pad` 1 keeps the groups to one
/// width.
pub fn prefill_groups(admitted: &[Admitted], max_pad: f64, max_tokens: usize) -> Vec<Vec<usize>> {
    let mut order = admitted.to_vec();
    // Longest first within each key: a group's width is its first member's.
    order.sort_by(|a, b| a.key.cmp(&b.key).then(b.len.cmp(&a.len)).then(a.slot.cmp(&b.slot)));
    let mut groups: Vec<Vec<usize>> = Vec::new();
    // The open group's width, the columns its members cost alone, and its key.
    let (mut w, mut alone, mut key) = (0usize, 0usize, 0usize);
    for a in order {
        let fits = groups.last().is_some_and(|g| {
            let cols = (g.len() + 1) * w;
            a.key == key && cols <= max_tokens && cols as f64 <= max_pad * (alone + width(a.len)) as f64
        });
        if fits {
            groups.last_mut().expect("a group").push(a.slot);
            alone += width(a.len);
        } else {
            groups.push(vec![a.slot]);
            (w, alone, key) = (width(a.len), width(a.len), a.key);
        }
    }
    groups
}

#[cfg(test)]
mod tests {
    use super::*;

    fn adm(v: &[(usize, usize)]) -> Vec<Admitted> {
        v.iter().enumerate().map(|(slot, &(len, key))| Admitted { slot, len, key }).collect()
    }

    #[test]
    fn widths_are_aligned() {
        assert_eq!((width(1), width(64), width(65), width(200)), (64, 64, 128, 256));
    }

    #[test]
    fn short_prompts_share_a_forward() {
        let a = adm(&[(5, 0), (70, 0), (6, 0), (3, 0)]);
        // 4 × 128 columns <= 2 × (128 + 3 × 64) alone.
        assert_eq!(prefill_groups(&a, 2.0, 1000), vec![vec![1, 2, 0, 3]]);
        // No extra padding: prompts of one width together.
        assert_eq!(prefill_groups(&a, 1.0, 1000), vec![vec![1], vec![2, 0, 3]]);
    }

    #[test]
    fn too_much_padding_or_too_many_tokens_splits() {
        let a = adm(&[(1000, 0), (2, 0), (3, 0)]);
        // 2 × 1024 columns > 1.5 × (1024 + 64) alone.
        assert_eq!(prefill_groups(&a, 1.5, 100_000), vec![vec![0], vec![2, 1]]);
        let b = adm(&[(10, 0), (10, 0), (10, 0)]);
        assert_eq!(prefill_groups(&b, 2.0, 128), vec![vec![0, 1], vec![2]]);
    }

    #[test]
    fn keys_never_mix() {
        let a = adm(&[(9, 1), (8, 0), (9, 0)]);
        assert_eq!(prefill_groups(&a, 2.0, 1000), vec![vec![2, 1], vec![0]]);
    }
}
