//! Helpers shared by the integration tests.
#![allow(dead_code)]

use std::path::Path;

/// Deterministic pseudo-random f32 values covering normal, tiny, huge and special values.
pub fn values(n: usize, seed: u32) -> Vec<f32> {
    let mut x = seed.wrapping_mul(2_654_435_761).wrapping_add(1);
    let specials = [0.0, -0.0, 1.0, -1.0, 65504.0, 1e-8, 3.0e38, f32::INFINITY, f32::NEG_INFINITY, 1.0 / 3.0];
    (0..n)
        .map(|i| {
            x ^= x << 13;
            x ^= x >> 17;
            x ^= x << 5;
            if i < specials.len() {
                specials[i]
            } else {
                (x as f32 / u32::MAX as f32 - 0.5) * 8.0
            }
        })
        .collect()
}

/// Names of the files in a folder, sorted.
pub fn file_names(dir: &Path) -> Vec<String> {
    let mut names: Vec<String> =
        std::fs::read_dir(dir).unwrap().map(|e| e.unwrap().file_name().to_string_lossy().into_owned()).collect();
    names.sort();
    names
}
