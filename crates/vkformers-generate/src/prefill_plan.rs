//! Which newly admitted requests prefill together: one left-padded forward `[n, T_max]` (mask
//! `0…0 1…1`, the KV cache stores only the real positions) instead of one forward per prompt
//! length, so requests that arrive together get their first tokens after one forward. A group
//! pads at most `max_pad` times its real tokens (sorted by length, similar lengths share a group)
//! and `max_tokens` padded tokens in all (the activations of a forward), and never mixes prompts
//! on LongRoPE's long factors with prompts on its short ones (the factor is chosen per forward).

/// One admitted request: its slot, prompt length and whether its prefill runs on the long factors.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Admitted {
    pub slot: usize,
    pub len: usize,
    pub long: bool,
}

/// Padded tokens a prefill forward holds at most, unless one prompt alone is longer.
pub const MAX_PREFILL_TOKENS: usize = 16384;

/// Groups of slots, each one forward (see the module docs). `max_pad` 1 keeps the groups to one
/// length (no padding at all).
pub fn prefill_groups(admitted: &[Admitted], max_pad: f64, max_tokens: usize) -> Vec<Vec<usize>> {
    let mut order = admitted.to_vec();
    // Longest first within each factor set: a group's width is its first member's length.
    order.sort_by(|a, b| a.long.cmp(&b.long).then(b.len.cmp(&a.len)).then(a.slot.cmp(&b.slot)));
    let mut groups: Vec<Vec<usize>> = Vec::new();
    let (mut width, mut real, mut long) = (0usize, 0usize, false);
    for a in order {
        let fits = groups.last().is_some_and(|g| {
            let padded = (g.len() + 1) * width;
            a.long == long && padded <= max_tokens && padded as f64 <= max_pad * (real + a.len) as f64
        });
        if fits {
            groups.last_mut().expect("a group").push(a.slot);
            real += a.len;
        } else {
            groups.push(vec![a.slot]);
            (width, real, long) = (a.len, a.len, a.long);
        }
    }
    groups
}

#[cfg(test)]
mod tests {
    use super::*;

    fn adm(v: &[(usize, bool)]) -> Vec<Admitted> {
        v.iter().enumerate().map(|(slot, &(len, long))| Admitted { slot, len, long }).collect()
    }

    #[test]
    fn similar_lengths_share_a_forward() {
        let a = adm(&[(5, false), (7, false), (6, false), (3, false)]);
        // Padded 4 × 7 = 28 <= 2 × 21 real.
        assert_eq!(prefill_groups(&a, 2.0, 1000), vec![vec![1, 2, 0, 3]]);
        // No padding: one forward per length.
        assert_eq!(prefill_groups(&a, 1.0, 1000), vec![vec![1], vec![2], vec![0], vec![3]]);
    }

    #[test]
    fn too_much_padding_or_too_many_tokens_splits() {
        let a = adm(&[(100, false), (2, false), (3, false)]);
        // 2 × 100 padded > 1.5 × 103 real.
        assert_eq!(prefill_groups(&a, 1.5, 1000), vec![vec![0], vec![2, 1]]);
        let b = adm(&[(10, false), (10, false), (10, false)]);
        assert_eq!(prefill_groups(&b, 2.0, 20), vec![vec![0, 1], vec![2]]);
    }

    #[test]
    fn long_and_short_factors_never_mix() {
        let a = adm(&[(9, true), (8, false), (9, false)]);
        assert_eq!(prefill_groups(&a, 2.0, 1000), vec![vec![2, 1], vec![0]]);
    }
}
