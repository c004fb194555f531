//! f64 reference of fused attention: naive `softmax(score(Q Kᵀ) + masks) V` with every option of
//! the GPU kernels, and its backward. Shapes as in [`super`]: q [B, Tq, Hq, D], k [B, Tk, Hkv, D],
//! v [B, Tk, Hkv, Dv], o [B, Tq, Hq, Dv], lse [B, Hq, Tq].

/// Sizes of one attention call (query head `h` uses kv head `h / (hq / hkv)`).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Shape {
    pub batch: usize,
    pub tq: usize,
    pub tk: usize,
    pub hq: usize,
    pub hkv: usize,
    pub d: usize,
    /// Value / output head dim (`d` but for multi-head latent attention).
    pub dv: usize,
}

impl Shape {
    /// Elements of q.
    pub fn q_len(&self) -> usize {
        self.batch * self.tq * self.hq * self.d
    }

    /// Elements of k.
    pub fn kv_len(&self) -> usize {
        self.batch * self.tk * self.hkv * self.d
    }

    /// Elements of o.
    pub fn o_len(&self) -> usize {
        self.batch * self.tq * self.hq * self.dv
    }

    /// Elements of v.
    pub fn v_len(&self) -> usize {
        self.batch * self.tk * self.hkv * self.dv
    }

    /// Elements of lse.
    pub fn lse_len(&self) -> usize {
        self.batch * self.hq * self.tq
    }
}

/// Options, as the GPU kernels take them.
#[derive(Clone, Copy, Debug)]
pub struct Options<'a> {
    /// Scores are `scale · q·k` (usually `1/sqrt(D)`).
    pub scale: f64,
    /// Query `i` sits at position `i + tk − tq` and sees keys `j <= ` that position.
    pub causal: bool,
    /// Sliding window `W` (0 = off): key `j` visible only if `qpos − j < W`.
    pub window: usize,
    /// Chunk `C` (0 = off): key `j` visible only if `⌊j/C⌋ = ⌊qpos/C⌋` (floor, qpos may be < 0).
    pub chunk: usize,
    /// Logit softcap `c` (0 = off): `s → c·tanh(s/c)`, after scaling, before masks and ALiBi.
    pub softcap: f64,
    /// Key padding mask [B, Tk]: 1 keep, 0 masked.
    pub kmask: Option<&'a [i32]>,
    /// ALiBi slopes [Hq]: `slope_h · (j − qpos)` is added to the score.
    pub slopes: Option<&'a [f64]>,
    /// Learned sink logits [Hq]: one more softmax entry per row with logit `s_h` and value 0.
    pub sinks: Option<&'a [f64]>,
}

impl Options<'_> {
    /// No masks or extras, scale `1/sqrt(d)`.
    pub fn new(d: usize) -> Self {
        Options {
            scale: 1.0 / (d as f64).sqrt(),
            causal: false,
            window: 0,
            chunk: 0,
            softcap: 0.0,
            kmask: None,
            slopes: None,
            sinks: None,
        }
    }
}

/// lse of a fully masked query row (its output and gradients are 0).
pub const LSE_MASKED: f64 = -1.0e30;

fn visible(s: &Shape, opt: &Options<'_>, b: usize, i: usize, j: usize) -> bool {
    let qpos = i as i64 + s.tk as i64 - s.tq as i64;
    let j = j as i64;
    if opt.causal && j > qpos {
        return false;
    }
    if opt.window > 0 && qpos - j >= opt.window as i64 {
        return false;
    }
    if opt.chunk > 0 && qpos.div_euclid(opt.chunk as i64) != j.div_euclid(opt.chunk as i64) {
        return false;
    }
    if let Some(m) = opt.kmask {
        if m[b * s.tk + j as usize] == 0 {
            return false;
        }
    }
    true
}

/// Score of a visible pair from `dot = q_i·k_j`, and `ds/d(scale·dot)`.
fn score(s: &Shape, opt: &Options<'_>, h: usize, i: usize, j: usize, dot: f64) -> (f64, f64) {
    let mut x = opt.scale * dot;
    let mut dcap = 1.0;
    if opt.softcap > 0.0 {
        let t = (x / opt.softcap).tanh();
        x = opt.softcap * t;
        dcap = 1.0 - t * t;
    }
    if let Some(sl) = opt.slopes {
        let qpos = i as f64 + s.tk as f64 - s.tq as f64;
        x += sl[h] * (j as f64 - qpos);
    }
    (x, dcap)
}

fn qi(s: &Shape, b: usize, i: usize, h: usize) -> usize {
    ((b * s.tq + i) * s.hq + h) * s.d
}

fn kj(s: &Shape, b: usize, j: usize, hk: usize) -> usize {
    ((b * s.tk + j) * s.hkv + hk) * s.d
}

/// Offsets of o row (b, i, h) and v row (b, j, hk): the q/k offsets at head width Dv.
fn oi(s: &Shape, b: usize, i: usize, h: usize) -> usize {
    ((b * s.tq + i) * s.hq + h) * s.dv
}

fn vj(s: &Shape, b: usize, j: usize, hk: usize) -> usize {
    ((b * s.tk + j) * s.hkv + hk) * s.dv
}

fn dot(a: &[f64], b: &[f64]) -> f64 {
    a.iter().zip(b).map(|(x, y)| x * y).sum()
}

/// Softmax row of query (b, h, i): (probabilities or None where masked, softcap derivative, lse).
/// A fully masked row has all None and lse = [`LSE_MASKED`] (`s_h` with sinks). With sinks the
/// denominator and lse include `e^(s_h)`, so the key probabilities sum to `1 − P_sink`.
fn row(
    s: &Shape,
    opt: &Options<'_>,
    q: &[f64],
    k: &[f64],
    (b, h, i): (usize, usize, usize),
) -> (Vec<Option<f64>>, Vec<f64>, f64) {
    let d = s.d;
    let hk = h / (s.hq / s.hkv);
    let qv = &q[qi(s, b, i, h)..][..d];
    let mut sc = vec![None; s.tk];
    let mut dcap = vec![1.0; s.tk];
    for j in 0..s.tk {
        if visible(s, opt, b, i, j) {
            let (x, dc) = score(s, opt, h, i, j, dot(qv, &k[kj(s, b, j, hk)..][..d]));
            sc[j] = Some(x);
            dcap[j] = dc;
        }
    }
    let sink = opt.sinks.map(|sk| sk[h]);
    let m = sc.iter().flatten().chain(&sink).fold(f64::NEG_INFINITY, |a, &x| a.max(x));
    if m == f64::NEG_INFINITY {
        return (sc, dcap, LSE_MASKED);
    }
    let l: f64 = sc.iter().flatten().chain(&sink).map(|x| (x - m).exp()).sum();
    let p = sc.iter().map(|x| x.map(|x| (x - m).exp() / l)).collect();
    (p, dcap, m + l.ln())
}

/// Every query row `(b, h, i)` of `s` (b, then h, then i ascending: the order the gradients are
/// summed in), with `hk`, the kv head of `h`: `(b, h, hk, i)`.
fn query_rows(s: &Shape) -> impl Iterator<Item = (usize, usize, usize, usize)> + '_ {
    let group = s.hq / s.hkv;
    (0..s.batch).flat_map(move |b| (0..s.hq).flat_map(move |h| (0..s.tq).map(move |i| (b, h, h / group, i))))
}

/// Forward: returns (o [B, Tq, Hq, Dv], lse [B, Hq, Tq]).
pub fn forward(q: &[f64], k: &[f64], v: &[f64], s: &Shape, opt: &Options<'_>) -> (Vec<f64>, Vec<f64>) {
    let dv = s.dv;
    let mut o = vec![0.0; s.o_len()];
    let mut lse = vec![0.0; s.lse_len()];
    for (b, h, hk, i) in query_rows(s) {
        let (p, _, l) = row(s, opt, q, k, (b, h, i));
        lse[(b * s.hq + h) * s.tq + i] = l;
        let out = &mut o[oi(s, b, i, h)..][..dv];
        for (j, pj) in p.iter().enumerate() {
            if let Some(pj) = pj {
                for (od, vd) in out.iter_mut().zip(&v[vj(s, b, j, hk)..][..dv]) {
                    *od += pj * vd;
                }
            }
        }
    }
    (o, lse)
}

/// Backward of [`forward`] given `do_` = dL/do: returns (dq, dk, dv), shaped like q, k, v.
/// dk/dv of a kv head sum over the query heads of its group.
pub fn backward(
    q: &[f64],
    k: &[f64],
    v: &[f64],
    do_: &[f64],
    s: &Shape,
    opt: &Options<'_>,
) -> (Vec<f64>, Vec<f64>, Vec<f64>) {
    let (d, dvw) = (s.d, s.dv);
    let mut dq = vec![0.0; s.q_len()];
    let mut dk = vec![0.0; s.kv_len()];
    let mut dv = vec![0.0; s.v_len()];
    for (b, h, hk, i) in query_rows(s) {
        let (p, dcap, _) = row(s, opt, q, k, (b, h, i));
        let qo = qi(s, b, i, h);
        let dov = &do_[oi(s, b, i, h)..][..dvw];
        // dP_j = do·v_j; D_i = Σ_j P_j dP_j (= do·o); dS_j = P_j (dP_j − D_i) · dcap_j
        let dp: Vec<f64> = (0..s.tk).map(|j| dot(dov, &v[vj(s, b, j, hk)..][..dvw])).collect();
        let di: f64 = p.iter().zip(&dp).filter_map(|(p, dp)| p.map(|p| p * dp)).sum();
        for (j, pj) in p.iter().enumerate() {
            let Some(pj) = *pj else { continue };
            let ds = pj * (dp[j] - di) * dcap[j];
            let ko = kj(s, b, j, hk);
            for x in 0..d {
                dq[qo + x] += opt.scale * ds * k[ko + x];
                dk[ko + x] += opt.scale * ds * q[qo + x];
            }
            let vo = vj(s, b, j, hk);
            for x in 0..dvw {
                dv[vo + x] += pj * dov[x];
            }
        }
    }
    (dq, dk, dv)
}

/// Gradient of the sinks [Hq] for `do_` = dL/do: the sink of row (b, h, i) has probability
/// `P_s = 1 − Σ_j P_j` and value 0, so `dS_s = P_s (0 − Σ_j P_j dP_j)` with `dP_j = do·v_j`;
/// `ds_h` sums that over b and i. Zeros without sinks.
pub fn sinks_backward(q: &[f64], k: &[f64], v: &[f64], do_: &[f64], s: &Shape, opt: &Options<'_>) -> Vec<f64> {
    let mut ds = vec![0.0; s.hq];
    let Some(sinks) = opt.sinks else { return ds };
    for (b, h, hk, i) in query_rows(s) {
        let (p, _, lse) = row(s, opt, q, k, (b, h, i));
        let dov = &do_[oi(s, b, i, h)..][..s.dv];
        let di: f64 =
            p.iter().enumerate().filter_map(|(j, pj)| pj.map(|pj| pj * dot(dov, &v[vj(s, b, j, hk)..][..s.dv]))).sum();
        ds[h] -= (sinks[h] - lse).exp() * di;
    }
    ds
}
