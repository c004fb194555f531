//! f64/integer references of the mixture-of-experts kernels (see `super`).

/// Top-k per row of `probs [rows, experts]`: `(ids, flat, sel)` as the kernel writes them.
pub fn topk(probs: &[f64], experts: usize, k: usize) -> (Vec<i32>, Vec<i32>, Vec<f64>) {
    let rows = probs.len() / experts;
    let (mut ids, mut flat, mut sel) = (Vec::new(), Vec::new(), vec![0.0; probs.len()]);
    for r in 0..rows {
        let row = &probs[r * experts..(r + 1) * experts];
        let mut order: Vec<usize> = (0..experts).collect();
        // Descending, ties to the lower index (a stable sort keeps index order among equals).
        order.sort_by(|&a, &b| row[b].partial_cmp(&row[a]).unwrap_or(std::cmp::Ordering::Equal));
        for &e in &order[..k] {
            ids.push(e as i32);
            flat.push((r * experts + e) as i32);
            sel[r * experts + e] = 1.0;
        }
    }
    (ids, flat, sel)
}

/// `(offsets, slot_token, slot_expert, assign_slot)` of assignments `ids [rows·k]`.
pub fn group(ids: &[i32], experts: usize, k: usize) -> (Vec<i32>, Vec<i32>, Vec<i32>, Vec<i32>) {
    let mut offsets = vec![0i32; experts + 1];
    for &e in ids {
        offsets[e as usize + 1] += 1;
    }
    for e in 0..experts {
        offsets[e + 1] += offsets[e];
    }
    let mut perm: Vec<usize> = (0..ids.len()).collect();
    perm.sort_by_key(|&a| ids[a]); // stable
    let slot_token = perm.iter().map(|&a| (a / k) as i32).collect();
    let slot_expert = perm.iter().map(|&a| ids[a]).collect();
    let mut assign_slot = vec![0i32; ids.len()];
    for (s, &a) in perm.iter().enumerate() {
        assign_slot[a] = s as i32;
    }
    (offsets, slot_token, slot_expert, assign_slot)
}

/// `C [rows, cols] = A ·_e op(B_e)` (see `super::grouped_rows`).
pub fn grouped_rows(a: &[f64], b: &[f64], slot_expert: &[i32], inner: usize, cols: usize, trans_b: bool) -> Vec<f64> {
    let rows = slot_expert.len();
    let mut c = vec![0.0; rows * cols];
    for s in 0..rows {
        let m = slot_expert[s] as usize * cols * inner;
        for col in 0..cols {
            c[s * cols + col] = (0..inner)
                .map(|j| a[s * inner + j] * if trans_b { b[m + col * inner + j] } else { b[m + j * cols + col] })
                .sum();
        }
    }
    c
}

/// `D_e = L_eᵀ · R_e` over each expert's slots (see `super::grouped_wgrad`).
pub fn grouped_wgrad(l: &[f64], r: &[f64], offsets: &[i32], li: usize, rj: usize) -> Vec<f64> {
    let experts = offsets.len() - 1;
    let mut d = vec![0.0; experts * li * rj];
    for e in 0..experts {
        for s in offsets[e] as usize..offsets[e + 1] as usize {
            for i in 0..li {
                for j in 0..rj {
                    d[(e * li + i) * rj + j] += l[s * li + i] * r[s * rj + j];
                }
            }
        }
    }
    d
}
