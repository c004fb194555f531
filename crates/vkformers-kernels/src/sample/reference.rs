//! CPU reference of the sampling kernels: argmax here. The draw kernel's reference is the host
//! pipeline and sampler of `vkformers-generate` (`Pipeline::apply` + `Sampler::sample_row`, f64
//! softmax and draw), which depends on this crate, so the comparison lives in
//! `vkformers-generate/tests/device_sampling.rs`.

/// Index of the largest of `row`, the first on ties, NaN skipped; `None` when every entry is NaN
/// (or the row is empty).
pub fn argmax(row: &[f32]) -> Option<u32> {
    let mut best: Option<(usize, f32)> = None;
    for (i, &v) in row.iter().enumerate() {
        if !v.is_nan() && best.is_none_or(|(_, b)| v > b) {
            best = Some((i, v));
        }
    }
    best.map(|(i, _)| i as u32)
}

/// [`argmax`] of the last column of each of `rows` rows of logits `[rows * t, v]`.
pub fn argmax_last(logits: &[f32], rows: usize, t: usize, v: usize) -> Vec<Option<u32>> {
    (0..rows).map(|r| argmax(&logits[(r * t + t - 1) * v..][..v])).collect()
}
