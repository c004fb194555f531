//! Softmax of one row, accumulated in f64 and rounded once to f32.

/// `softmax(x)` over the whole row. `-inf` entries get probability 0. Accumulating in f64 keeps
/// every probability within an ulp or two of torch's f32 `softmax`. A row with no finite maximum
/// (empty, all `-inf`) gives all zeros.
pub fn softmax(x: &[f32]) -> Vec<f32> {
    softmax_f64(x).into_iter().map(|p| p as f32).collect()
}

/// [`softmax`] in f64, unrounded (the sampler draws from these).
pub(crate) fn softmax_f64(x: &[f32]) -> Vec<f64> {
    let max = x.iter().copied().filter(|v| !v.is_nan()).fold(f32::NEG_INFINITY, f32::max);
    if max == f32::NEG_INFINITY || max.is_nan() {
        return vec![0.0; x.len()];
    }
    let m = f64::from(max);
    let mut e: Vec<f64> = x.iter().map(|&v| if v.is_nan() { 0.0 } else { (f64::from(v) - m).exp() }).collect();
    let sum: f64 = e.iter().sum();
    e.iter_mut().for_each(|p| *p /= sum);
    e
}
