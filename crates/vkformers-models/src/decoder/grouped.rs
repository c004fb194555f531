//! Inference: the products of one input by several weights of a layer (q, k and v; gate and up)
//! as one GEMV dispatch (`matmul::gemv::gemv_group`) when a decode step's few f32 rows would
//! run each through the GEMV anyway: one launch and one barrier instead of two or three, and
//! the small k and v products (a few hundred rows of W) share the grid with q's. The values are
//! those of one `linear` per weight, bit for bit (the same kernel, per-output sums unchanged).

use vkformers_kernels::matmul::gemv::{gemv_applies, gemv_group, GemvDesc};
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
    let mut ws = Vec::with_capacity(names.len());
    for name in names {
        match w.opt(name) {
            Some(t) if w.lora().get(name).is_none() && t.shape().len() == 2 && t.shape()[1] == k => ws.push(t),
            _ => return Ok(None),
        }
    }
    let dtype = ws[0].dtype();
    if ws.iter().any(|t| t.dtype() != dtype || t.shape()[0] > u32::MAX as usize) {
        return Ok(None);
    }
    let ys: Vec<Tensor> = ws.iter().map(|t| g.empty(&[m, t.shape()[0]])).collect::<std::result::Result<_, _>>()?;
    let parts: Vec<_> = ws.iter().zip(&ys).map(|(t, y)| (t.shape()[0] as u32, t.view(), y.view())).collect();
    let desc = GemvDesc::packed(m as u32, parts[0].0, k as u32, dtype);
    g.record(|rec| gemv_group(rec, &desc, x.view(), &parts))?;
    Ok(Some(ys))
}
