//! Inference: the products of one input by several weights of a layer (q, k and v; gate and up)
//! as one GEMV dispatch (`matmul::gemv::gemv_group`) when a decode step's few f32 rows would
//! run each through the GEMV anyway: one launch and one barrier instead of two or three, and
//! the small k and v products (a few hundred rows of W) share the grid with q's. The values are
//! those of one `linear` per weight, bit for bit (the same kernel, per-output sums unchanged).

use vkformers_kernels::attention::decode;
use vkformers_kernels::glu::Glu;
use vkformers_kernels::matmul::gemv::{gemv_applies, gemv_glu, gemv_group, glu_fusion_pays, GemvDesc};
use vkformers_kernels::rope::{Rope, RopeLayout};
use vkformers_tensor::{DType, Graph, Tensor};

use super::Weights;
use crate::error::Result;

/// `[x · W_pᵀ]` for the weights `names` (each `[n_p, k]`, no bias), or `None` where the
/// grouped GEMV does not apply: gradients on, x not f32 `[m, k]` with m in the GEMV's range,
/// a weight missing, of another dtype or shape, or adapted by LoRA.
pub(crate) fn products(g: &Graph<'_>, w: &Weights, x: &Tensor, names: &[String]) -> Result<Option<Vec<Tensor>>> {
    let xs = x.shape();
    if g.grad_enabled() || x.dtype() != DType::F32 || xs.len() != 2 || !(2..=3).contains(&names.len()) {
        return Ok(None);
    }
    let (m, k) = (xs[0], xs[1]);
    if m > u32::MAX as usize || k > u32::MAX as usize || !gemv_applies(m as u32, g.ctx().caps()) {
        return Ok(None);
    }
    let Some(ws) = gemv_weights(w, names, k) else { return Ok(None) };
    let ys: Vec<Tensor> = ws.iter().map(|t| g.empty(&[m, t.shape()[0]])).collect::<std::result::Result<_, _>>()?;
    let parts: Vec<_> = ws.iter().zip(&ys).map(|(t, y)| (t.shape()[0] as u32, t.view(), y.view())).collect();
    let desc = GemvDesc::packed(m as u32, parts[0].0, k as u32, ws[0].dtype());
    g.record(|rec| gemv_group(rec, &desc, x.view(), &parts))?;
    Ok(Some(ys))
}

/// The weights `names` of one grouped GEMV over `k` input columns: each `[n_p, k]` with
/// 0 < n_p ≤ u32::MAX, all of one dtype, none adapted by LoRA; `None` otherwise (the caller
/// then runs separate products).
pub(crate) fn gemv_weights<'w>(w: &'w Weights, names: &[String], k: usize) -> Option<Vec<&'w Tensor>> {
    let mut ws = Vec::with_capacity(names.len());
    for name in names {
        match w.opt(name) {
            Some(t) if w.lora().get(name).is_none() && t.shape().len() == 2 && t.shape()[1] == k => ws.push(t),
            _ => return None,
        }
    }
    let dtype = ws.first()?.dtype();
    let rows_fit = |t: &&Tensor| (1..=u32::MAX as usize).contains(&t.shape()[0]);
    ws.iter().all(|t| t.dtype() == dtype && rows_fit(t)).then_some(ws)
}

/// Whether to fold the GLU into the down projection: `VKFORMERS_FUSED_GLU=1` or `0` forces it on
/// or off (tests compare both on lavapipe), otherwise where it pays (`glu_fusion_pays`: not on
/// CPU devices).
fn fuse_glu(g: &Graph<'_>) -> bool {
    match std::env::var("VKFORMERS_FUSED_GLU").as_deref() {
        Ok("1") => true,
        Ok("0") => false,
        _ => glu_fusion_pays(g.ctx().caps()),
    }
}

/// `f(gate) ⊙ up · Wᵀ` for the down weight `name` (`[n, k]`, no bias) in one GEMV dispatch
/// (`gemv_glu`: the GLU computed while x is loaded, the same values as `glu` then `linear`), or
/// `None` where it does not apply: as [`products`] (gradients on, not f32 `[m, k]` rows in the
/// GEMV's range, weight missing, of another shape, or adapted by LoRA), or not worth it here.
pub(crate) fn glu_down(
    g: &Graph<'_>,
    w: &Weights,
    (gate, up, kind): (&Tensor, &Tensor, Glu),
    name: &str,
) -> Result<Option<Tensor>> {
    let xs = gate.shape();
    if g.grad_enabled() || gate.dtype() != DType::F32 || up.dtype() != DType::F32 || xs.len() != 2 || up.shape() != xs {
        return Ok(None);
    }
    let (m, k) = (xs[0], xs[1]);
    if m > u32::MAX as usize
        || k == 0
        || k > u32::MAX as usize
        || !gemv_applies(m as u32, g.ctx().caps())
        || !fuse_glu(g)
    {
        return Ok(None);
    }
    let wt = match w.opt(name) {
        Some(t) if w.lora().get(name).is_none() && t.shape().len() == 2 && t.shape()[1] == k => t,
        _ => return Ok(None),
    };
    let n = wt.shape()[0];
    if n == 0 || n > u32::MAX as usize {
        return Ok(None);
    }
    let y = g.empty(&[m, n])?;
    let desc = GemvDesc::packed(m as u32, n as u32, k as u32, wt.dtype());
    g.record(|rec| gemv_glu(rec, &desc, (gate.view(), up.view(), kind), wt.view(), None, y.view()))?;
    Ok(Some(y))
}

/// `(rope(q), rope(k))` of q `[B, T, Hq, D]` and k `[B, T, Hkv, D]` f32 in one dispatch
/// (`decode::rope_qk`, bit for bit two `rope` calls), or `None` where it does not apply:
/// gradients on, not f32 4-d tensors of one token grid and head dim, or pos / inv_freq of
/// other sizes.
pub(crate) fn rope_qk(
    g: &Graph<'_>,
    (q, k): (&Tensor, &Tensor),
    (pos, inv_freq): (&Tensor, &Tensor),
    (layout, rotary_dim, mscale): (RopeLayout, usize, f32),
) -> Result<Option<(Tensor, Tensor)>> {
    let (qs, ks) = (q.shape(), k.shape());
    if g.grad_enabled() || q.dtype() != DType::F32 || k.dtype() != DType::F32 || qs.len() != 4 || ks.len() != 4 {
        return Ok(None);
    }
    let fits = |v: usize| u32::try_from(v).ok();
    let (Some(b), Some(t), Some(hq), Some(hkv), Some(d), Some(r)) =
        (fits(qs[0]), fits(qs[1]), fits(qs[2]), fits(ks[2]), fits(qs[3]), fits(rotary_dim))
    else {
        return Ok(None);
    };
    if ks[..2] != qs[..2] || ks[3] != qs[3] || pos.numel() != qs[0] * qs[1] || inv_freq.numel() != rotary_dim / 2 {
        return Ok(None);
    }
    let p = Rope { batch: b, seq: t, heads: hq, head_dim: d, rotary_dim: r, layout, mscale, dtype: DType::F32 };
    let (qo, ko) = (g.empty(qs)?, g.empty(ks)?);
    let io = (pos.view(), inv_freq.view());
    g.record(|rec| decode::rope_qk(rec, &p, hkv, (q.view(), k.view()), io, (qo.view(), ko.view())))?;
    Ok(Some((qo, ko)))
}
