//! f64 CPU references of the norm kernels, forward and backward. Shapes as in the launchers:
//! `x`, `dy` `[rows, dim]` row-major, `w`, `b` `[dim]`.

/// The gain of RMSNorm at column `d`: 1, `w[d]` or `1 + w[d]`.
fn gain(w: Option<&[f64]>, unit_offset: bool, d: usize) -> f64 {
    match w {
        None => 1.0,
        Some(w) if unit_offset => 1.0 + w[d],
        Some(w) => w[d],
    }
}

/// RMSNorm forward: returns `(y [rows, dim], rstd [rows])` with
/// `rstd = 1 / sqrt(mean(x^2) + eps)` and `y = x * rstd * g`, `g` = 1, `w` or `1 + w`.
pub fn rms_norm(x: &[f64], w: Option<&[f64]>, dim: usize, eps: f64, unit_offset: bool) -> (Vec<f64>, Vec<f64>) {
    let mut y = vec![0.0; x.len()];
    let rstd: Vec<f64> = x
        .chunks(dim)
        .zip(y.chunks_mut(dim))
        .map(|(xr, yr)| {
            let r = 1.0 / (xr.iter().map(|v| v * v).sum::<f64>() / dim as f64 + eps).sqrt();
            for (d, (yv, xv)) in yr.iter_mut().zip(xr).enumerate() {
                *yv = xv * r * gain(w, unit_offset, d);
            }
            r
        })
        .collect();
    (y, rstd)
}

/// RMSNorm backward: returns `(dx [rows, dim], dw [dim])`, `dw = sum_rows dy * x * rstd`
/// (the same with and without the unit offset; meaningless without a weight).
pub fn rms_norm_backward(
    x: &[f64],
    w: Option<&[f64]>,
    dy: &[f64],
    dim: usize,
    eps: f64,
    unit_offset: bool,
) -> (Vec<f64>, Vec<f64>) {
    let (_, rstd) = rms_norm(x, w, dim, eps, unit_offset);
    let mut dx = vec![0.0; x.len()];
    let mut dw = vec![0.0; dim];
    for (row, &r) in rstd.iter().enumerate() {
        let xr = &x[row * dim..][..dim];
        let gr = &dy[row * dim..][..dim];
        let c: f64 = (0..dim).map(|d| gr[d] * gain(w, unit_offset, d) * xr[d]).sum();
        for d in 0..dim {
            dx[row * dim + d] = r * gain(w, unit_offset, d) * gr[d] - xr[d] * r * r * r * c / dim as f64;
            dw[d] += gr[d] * xr[d] * r;
        }
    }
    (dx, dw)
}

/// Per-row `(mean, rstd)` of LayerNorm, biased variance.
fn moments(xr: &[f64], eps: f64) -> (f64, f64) {
    let n = xr.len() as f64;
    let mean = xr.iter().sum::<f64>() / n;
    let var = xr.iter().map(|v| (v - mean) * (v - mean)).sum::<f64>() / n;
    (mean, 1.0 / (var + eps).sqrt())
}

/// LayerNorm forward: returns `(y [rows, dim], mean [rows], rstd [rows])` with
/// `y = (x - mean) * rstd * w + b` (`w` = 1 and `b` = 0 when absent).
pub fn layer_norm(
    x: &[f64],
    w: Option<&[f64]>,
    b: Option<&[f64]>,
    dim: usize,
    eps: f64,
) -> (Vec<f64>, Vec<f64>, Vec<f64>) {
    let mut y = vec![0.0; x.len()];
    let (mut means, mut rstds) = (Vec::new(), Vec::new());
    for (xr, yr) in x.chunks(dim).zip(y.chunks_mut(dim)) {
        let (mean, r) = moments(xr, eps);
        for (d, (yv, xv)) in yr.iter_mut().zip(xr).enumerate() {
            *yv = (xv - mean) * r * w.map_or(1.0, |w| w[d]) + b.map_or(0.0, |b| b[d]);
        }
        means.push(mean);
        rstds.push(r);
    }
    (y, means, rstds)
}

/// LayerNorm backward: returns `(dx [rows, dim], dw [dim], db [dim])` with
/// `dw = sum_rows dy * xhat` and `db = sum_rows dy` (meaningful when the forward had them).
pub fn layer_norm_backward(
    x: &[f64],
    w: Option<&[f64]>,
    dy: &[f64],
    dim: usize,
    eps: f64,
) -> (Vec<f64>, Vec<f64>, Vec<f64>) {
    let mut dx = vec![0.0; x.len()];
    let (mut dw, mut db) = (vec![0.0; dim], vec![0.0; dim]);
    let n = dim as f64;
    for (row, (xr, gr)) in x.chunks(dim).zip(dy.chunks(dim)).enumerate() {
        let (mean, r) = moments(xr, eps);
        let xh: Vec<f64> = xr.iter().map(|v| (v - mean) * r).collect();
        let gg: Vec<f64> = (0..dim).map(|d| gr[d] * w.map_or(1.0, |w| w[d])).collect();
        let a = gg.iter().sum::<f64>() / n;
        let c = gg.iter().zip(&xh).map(|(g, h)| g * h).sum::<f64>() / n;
        for d in 0..dim {
            dx[row * dim + d] = r * (gg[d] - a - xh[d] * c);
            dw[d] += gr[d] * xh[d];
            db[d] += gr[d];
        }
    }
    (dx, dw, db)
}
