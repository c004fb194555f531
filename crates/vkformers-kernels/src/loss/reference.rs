//! f64 reference of the mean cross-entropy (same ignore rule and count == 0 convention as the
//! kernels: a row counts iff `0 <= label < vocab`; with no counted row, loss and gradient are 0).

fn counted(label: i32, vocab: usize) -> bool {
    label >= 0 && (label as usize) < vocab
}

/// Number of counted rows.
pub fn count(labels: &[i32], vocab: usize) -> usize {
    labels.iter().filter(|&&l| counted(l, vocab)).count()
}

/// Log-sum-exp of each row of `logits [rows, vocab]`.
pub fn row_lse(logits: &[f64], vocab: usize) -> Vec<f64> {
    logits
        .chunks_exact(vocab)
        .map(|row| {
            let m = row.iter().copied().fold(f64::NEG_INFINITY, f64::max);
            m + row.iter().map(|x| (x - m).exp()).sum::<f64>().ln()
        })
        .collect()
}

/// Per-row losses `[rows]` (0 on ignored rows) and the mean over counted rows.
pub fn forward(logits: &[f64], labels: &[i32], vocab: usize) -> (Vec<f64>, f64) {
    let lse = row_lse(logits, vocab);
    let rows: Vec<f64> = labels
        .iter()
        .enumerate()
        .map(|(r, &l)| if counted(l, vocab) { lse[r] - logits[r * vocab + l as usize] } else { 0.0 })
        .collect();
    let c = count(labels, vocab);
    let mean = if c == 0 { 0.0 } else { rows.iter().sum::<f64>() / c as f64 };
    (rows, mean)
}

/// Gradient of `g * mean loss` with respect to `logits [rows, vocab]`.
pub fn backward(logits: &[f64], labels: &[i32], vocab: usize, g: f64) -> Vec<f64> {
    let lse = row_lse(logits, vocab);
    let c = count(labels, vocab);
    let mut d = vec![0.0; logits.len()];
    if c == 0 {
        return d;
    }
    let scale = g / c as f64;
    for (r, &l) in labels.iter().enumerate() {
        if !counted(l, vocab) {
            continue;
        }
        for j in 0..vocab {
            let p = (logits[r * vocab + j] - lse[r]).exp();
            d[r * vocab + j] = (p - if j == l as usize { 1.0 } else { 0.0 }) * scale;
        }
    }
    d
}
