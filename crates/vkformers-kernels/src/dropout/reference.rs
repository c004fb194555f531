//! Reference of the dropout RNG and of dropout forward/backward (f64 data). The RNG is exact
//! integer arithmetic, so the kernels must match it bit for bit.

const M0: u32 = 0xD251_1F53;
const M1: u32 = 0xCD9E_8D57;
const W0: u32 = 0x9E37_79B9;
const W1: u32 = 0xBB67_AE85;

fn mulhilo(a: u32, b: u32) -> (u32, u32) {
    let p = u64::from(a) * u64::from(b);
    ((p >> 32) as u32, p as u32)
}

/// Philox4x32 with 10 rounds (Random123's `philox4x32_10`).
pub fn philox4x32_10(mut c: [u32; 4], mut k: [u32; 2]) -> [u32; 4] {
    for r in 0..10 {
        if r > 0 {
            k = [k[0].wrapping_add(W0), k[1].wrapping_add(W1)];
        }
        let (hi0, lo0) = mulhilo(M0, c[0]);
        let (hi1, lo1) = mulhilo(M1, c[2]);
        c = [hi1 ^ c[1] ^ k[0], lo1, hi0 ^ c[3] ^ k[1], lo0];
    }
    c
}

/// The random word of element index `idx` of `seed`'s stream.
pub fn random_u32(seed: u64, idx: u64) -> u32 {
    let blk = idx >> 2;
    let r = philox4x32_10([blk as u32, (blk >> 32) as u32, 0, 0], [seed as u32, (seed >> 32) as u32]);
    r[(idx & 3) as usize]
}

/// Uniform in [0, 1) with 24 random bits (exactly the kernels' f32 value).
pub fn uniform(seed: u64, idx: u64) -> f64 {
    f64::from(random_u32(seed, idx) >> 8) / f64::from(1u32 << 24)
}

/// The dropout mask of `n` elements starting at element index `offset`: keep iff uniform >= p.
pub fn mask(n: usize, p: f32, seed: u64, offset: u64) -> Vec<bool> {
    (0..n as u64).map(|i| uniform(seed, offset.wrapping_add(i)) >= f64::from(p)).collect()
}

fn apply(x: &[f64], p: f32, seed: u64, offset: u64) -> Vec<f64> {
    let scale = if p >= 1.0 { 0.0 } else { 1.0 / (1.0 - f64::from(p)) };
    x.iter().zip(mask(x.len(), p, seed, offset)).map(|(&v, keep)| if keep { v * scale } else { 0.0 }).collect()
}

/// `y = x · mask / (1 − p)`.
pub fn forward(x: &[f64], p: f32, seed: u64, offset: u64) -> Vec<f64> {
    apply(x, p, seed, offset)
}

/// `dx = dy · mask / (1 − p)` (the same mask as [`forward`]).
pub fn backward(dy: &[f64], p: f32, seed: u64, offset: u64) -> Vec<f64> {
    apply(dy, p, seed, offset)
}

/// The row-keyed dropout mask of `[keys.len(), cols]` (see `dropout::rows`): element `(r, c)`
/// draws word `c & 3` of `philox4x32_10([c >> 2, keys[r]], seed)`; keep iff uniform >= p.
pub fn row_mask(keys: &[[u32; 3]], cols: usize, p: f32, seed: u64) -> Vec<bool> {
    let key = [seed as u32, (seed >> 32) as u32];
    let mut out = Vec::with_capacity(keys.len() * cols);
    for k in keys {
        for c in 0..cols {
            let w = philox4x32_10([(c >> 2) as u32, k[0], k[1], k[2]], key)[c & 3];
            out.push(f64::from(w >> 8) / f64::from(1u32 << 24) >= f64::from(p));
        }
    }
    out
}

/// Row-keyed dropout of `x [keys.len(), cols]` (forward and backward alike).
pub fn rows_apply(x: &[f64], keys: &[[u32; 3]], cols: usize, p: f32, seed: u64) -> Vec<f64> {
    let scale = if p >= 1.0 { 0.0 } else { 1.0 / (1.0 - f64::from(p)) };
    let mask = row_mask(keys, cols, p, seed);
    x.iter().zip(mask).map(|(&v, keep)| if keep { v * scale } else { 0.0 }).collect()
}
