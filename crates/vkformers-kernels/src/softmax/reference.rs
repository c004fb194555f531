//! f64 CPU reference of softmax over the last dim, forward and backward.

/// y[r, :] = softmax(x[r, :]); x [rows, d].
pub fn forward(x: &[f64], d: usize) -> Vec<f64> {
    x.chunks_exact(d)
        .flat_map(|row| {
            let m = row.iter().copied().fold(f64::NEG_INFINITY, f64::max);
            let e: Vec<f64> = row.iter().map(|v| (v - m).exp()).collect();
            let s: f64 = e.iter().sum();
            e.into_iter().map(move |v| v / s)
        })
        .collect()
}

/// dx[r, j] = y[r, j] (dy[r, j] - sum_k dy[r, k] y[r, k]), y the forward's output.
pub fn backward(y: &[f64], dy: &[f64], d: usize) -> Vec<f64> {
    y.chunks_exact(d)
        .zip(dy.chunks_exact(d))
        .flat_map(|(yr, gr)| {
            let dot: f64 = yr.iter().zip(gr).map(|(a, b)| a * b).sum();
            yr.iter().zip(gr).map(move |(a, b)| a * (b - dot))
        })
        .collect()
}
