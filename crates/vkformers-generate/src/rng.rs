//! Philox4x32-10 (Salmon et al., "Parallel random numbers: as easy as 1, 2, 3", Random123's
//! `philox4x32_10`): a counter-based RNG, so draw `(seed, step, row)` is a pure function of its
//! arguments and a seeded generation repeats exactly, in any order and on any thread.

/// The same Philox the dropout and sampling kernels use (their reference, matched bit for bit).
pub use vkformers_kernels::dropout::reference::philox4x32_10;

/// A uniform draw in `[0, 1)` with 53 random bits, from the block of counter
/// `[lo(step), hi(step), row, 0]` and key `[lo(seed), hi(seed)]`.
pub fn uniform_f64(seed: u64, step: u64, row: u32) -> f64 {
    let r = philox4x32_10([step as u32, (step >> 32) as u32, row, 0], [seed as u32, (seed >> 32) as u32]);
    let bits = (u64::from(r[0]) << 21) ^ u64::from(r[1] >> 11);
    (bits & ((1 << 53) - 1)) as f64 * (1.0 / (1u64 << 53) as f64)
}

#[cfg(test)]
mod tests {
    use super::*;

    /// Random123's known-answer vectors for philox4x32_10.
    #[test]
    fn known_answers() {
        assert_eq!(philox4x32_10([0; 4], [0; 2]), [0x6627_e8d5, 0xe169_c58d, 0xbc57_ac4c, 0x9b00_dbd8]);
        assert_eq!(philox4x32_10([u32::MAX; 4], [u32::MAX; 2]), [0x408f_276d, 0x41c8_3b0e, 0xa20b_c7c6, 0x6d54_51fd]);
        assert_eq!(
            philox4x32_10([0x243f_6a88, 0x85a3_08d3, 0x1319_8a2e, 0x0370_7344], [0xa409_3822, 0x299f_31d0]),
            [0xd16c_fe09, 0x94fd_cceb, 0x5001_e420, 0x2412_6ea1]
        );
    }

    #[test]
    fn uniform_in_range_and_mean() {
        let n = 100_000;
        let mut sum = 0.0;
        for s in 0..n {
            let u = uniform_f64(7, s, 0);
            assert!((0.0..1.0).contains(&u));
            sum += u;
        }
        // Mean of n uniforms has sd 1/sqrt(12 n) ~ 9e-4; 5 sd.
        assert!((sum / n as f64 - 0.5).abs() < 5e-3);
    }
}
