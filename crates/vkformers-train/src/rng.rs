//! The trainer's only randomness: a seeded permutation of the sequences per epoch. It is a
//! pure function of `(seed, epoch)` (SplitMix64 driving a Fisher–Yates shuffle), so the RNG
//! state a checkpoint needs is the seed and the data position, and a resumed run draws exactly
//! the permutations the straight run drew.

/// SplitMix64: a tiny, well-mixed 64-bit generator (Steele, Lea, Flood 2014).
pub struct SplitMix64(u64);

impl SplitMix64 {
    pub fn new(seed: u64) -> Self {
        SplitMix64(seed)
    }

    pub fn next_u64(&mut self) -> u64 {
        self.0 = self.0.wrapping_add(0x9E37_79B9_7F4A_7C15);
        let mut z = self.0;
        z = (z ^ (z >> 30)).wrapping_mul(0xBF58_476D_1CE4_E5B9);
        z = (z ^ (z >> 27)).wrapping_mul(0x94D0_49BB_1331_11EB);
        z ^ (z >> 31)
    }

    /// Uniform in `0..n` (n > 0) by rejection, so no index is favoured.
    pub fn below(&mut self, n: u64) -> u64 {
        let zone = u64::MAX - u64::MAX % n;
        loop {
            let x = self.next_u64();
            if x < zone {
                return x % n;
            }
        }
    }

    /// Uniform in `[0, 1)` with 53 random bits.
    pub fn unit_f64(&mut self) -> f64 {
        (self.next_u64() >> 11) as f64 / (1u64 << 53) as f64
    }
}

/// The order in which epoch `epoch` visits `n` sequences: identity without shuffling, else a
/// Fisher–Yates permutation seeded by `(seed, epoch)`.
pub fn epoch_order(n: usize, seed: u64, epoch: u64, shuffle: bool) -> Vec<usize> {
    let mut order: Vec<usize> = (0..n).collect();
    if shuffle {
        let mut rng = SplitMix64::new(seed ^ epoch.wrapping_mul(0xD1B5_4A32_D192_ED03));
        for i in (1..n).rev() {
            let j = rng.below(i as u64 + 1) as usize;
            order.swap(i, j);
        }
    }
    order
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn permutations_are_seeded_per_epoch_and_complete() {
        let a = epoch_order(50, 7, 0, true);
        assert_eq!(a, epoch_order(50, 7, 0, true), "same seed and epoch, same order");
        assert_ne!(a, epoch_order(50, 7, 1, true), "another epoch, another order");
        assert_ne!(a, epoch_order(50, 8, 0, true), "another seed, another order");
        let mut sorted = a.clone();
        sorted.sort();
        assert_eq!(sorted, (0..50).collect::<Vec<_>>(), "a permutation");
        assert_eq!(epoch_order(5, 7, 3, false), vec![0, 1, 2, 3, 4]);
    }
}
