//! f64 CPU references of the GEMM and of the matmul backward.

use super::GemmDesc;

/// Element `(r, c)` of a stored matrix (row stride `ld`) at `base`.
fn at(x: &[f64], base: u64, ld: u32, r: u32, c: u32) -> f64 {
    x[(base + u64::from(r) * u64::from(ld) + u64::from(c)) as usize]
}

/// `C = alpha · op(A) · op(B) (+ bias) (+ beta · C)` with exactly the addressing of
/// [`super::gemm`] (offsets, leading dimensions, batch strides, transposes; dtype ignored).
/// `bias` `[N]` is used iff `desc.has_bias`; with `beta == 0` C is not read.
pub fn gemm(desc: &GemmDesc, a: &[f64], b: &[f64], bias: Option<&[f64]>, c: &mut [f64]) {
    for bz in 0..u64::from(desc.batch) {
        let (ab, bb, cb) = (
            desc.a_offset + bz * desc.stride_a,
            desc.b_offset + bz * desc.stride_b,
            desc.c_offset + bz * desc.stride_c,
        );
        for m in 0..desc.m {
            for n in 0..desc.n {
                let mut s = 0.0;
                for k in 0..desc.k {
                    let av = if desc.trans_a { at(a, ab, desc.lda, k, m) } else { at(a, ab, desc.lda, m, k) };
                    let bv = if desc.trans_b { at(b, bb, desc.ldb, n, k) } else { at(b, bb, desc.ldb, k, n) };
                    s += av * bv;
                }
                let ci = (cb + u64::from(m) * u64::from(desc.ldc) + u64::from(n)) as usize;
                let mut v = f64::from(desc.alpha) * s;
                if desc.has_bias {
                    v += bias.map_or(0.0, |bv| bv[n as usize]);
                }
                if desc.beta != 0.0 {
                    v += f64::from(desc.beta) * c[ci];
                }
                c[ci] = v;
            }
        }
    }
}

/// `C = A · B`: a `[m, k]`, b `[k, n]`, row-major; returns C `[m, n]`.
pub fn matmul(a: &[f64], b: &[f64], m: usize, k: usize, n: usize) -> Vec<f64> {
    let mut c = vec![0.0; m * n];
    for i in 0..m {
        for p in 0..k {
            let av = a[i * k + p];
            for j in 0..n {
                c[i * n + j] += av * b[p * n + j];
            }
        }
    }
    c
}

/// Backward of [`matmul`]: given dC `[m, n]`, returns (dA = dC · Bᵀ `[m, k]`, dB = Aᵀ · dC `[k, n]`).
pub fn matmul_backward(a: &[f64], b: &[f64], dc: &[f64], m: usize, k: usize, n: usize) -> (Vec<f64>, Vec<f64>) {
    let mut da = vec![0.0; m * k];
    let mut db = vec![0.0; k * n];
    for i in 0..m {
        for p in 0..k {
            let mut s = 0.0;
            for j in 0..n {
                s += dc[i * n + j] * b[p * n + j];
                db[p * n + j] += a[i * k + p] * dc[i * n + j];
            }
            da[i * k + p] = s;
        }
    }
    (da, db)
}

/// Backward of a bias `[n]` added to every row of C `[m, n]`: d bias = column sums of dC.
pub fn bias_backward(dc: &[f64], m: usize, n: usize) -> Vec<f64> {
    (0..n).map(|j| (0..m).map(|i| dc[i * n + j]).sum()).collect()
}
