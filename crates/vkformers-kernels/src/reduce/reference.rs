//! f64 CPU reference of the sum/mean reductions, forward and backward.

/// out[r] = sum_j x[r, j]; x [rows, d].
pub fn sum_rows(x: &[f64], d: usize) -> Vec<f64> {
    x.chunks_exact(d).map(|r| r.iter().sum()).collect()
}

/// out[r] = mean_j x[r, j]; x [rows, d].
pub fn mean_rows(x: &[f64], d: usize) -> Vec<f64> {
    x.chunks_exact(d).map(|r| r.iter().sum::<f64>() / d as f64).collect()
}

/// dx[r, j] = dy[r]; dx [rows, d].
pub fn sum_rows_backward(dy: &[f64], d: usize) -> Vec<f64> {
    dy.iter().flat_map(|&g| std::iter::repeat_n(g, d)).collect()
}

/// dx[r, j] = dy[r] / d.
pub fn mean_rows_backward(dy: &[f64], d: usize) -> Vec<f64> {
    dy.iter().flat_map(|&g| std::iter::repeat_n(g / d as f64, d)).collect()
}

/// sum_i x[i].
pub fn sum_all(x: &[f64]) -> f64 {
    x.iter().sum()
}

/// mean_i x[i].
pub fn mean_all(x: &[f64]) -> f64 {
    sum_all(x) / x.len() as f64
}

/// dx[i] = dy for i < n.
pub fn sum_all_backward(dy: f64, n: usize) -> Vec<f64> {
    vec![dy; n]
}

/// dx[i] = dy / n for i < n.
pub fn mean_all_backward(dy: f64, n: usize) -> Vec<f64> {
    vec![dy / n as f64; n]
}
