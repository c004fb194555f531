//! Routed mixture of experts on the device: the router's top-k choice, the grouping of the
//! `S = n·k` token assignments by expert (counting sort, no host round trip), and the grouped
//! expert product with its backward.
//!
//! `grouped_linear`: `y [S, out] = x [S, in] ·_e W_eᵀ` with `W [E·out, in]` (E blocks in the
//! nn.Linear layout, transformers' packed `[E, out, in]` expert tensor) and e the expert of
//! each slot. Backward: `dx = dy ·_e W_e` (the same kernel, W untransposed) and
//! `dW_e = dy_eᵀ · x_e` over each expert's contiguous slots.

use vkformers_kernels::moe::{self as k, GroupTile, Storage};

use super::cast::{autocast_copy, narrow};
use crate::{DType, Graph, Result, Tensor, VkError};

fn err(message: String) -> VkError {
    VkError::Kernel { kernel: "tensor moe".into(), message }
}

/// A router's choice for n tokens: int32 `ids [n, k]` (experts, best first), int32
/// `flat [n, k]` (`token·E + expert`, to gather the chosen probabilities), f32 `sel [n, E]`
/// (1 where chosen). No gradient flows through the choice itself.
pub struct TopK {
    pub ids: Tensor,
    pub flat: Tensor,
    pub sel: Tensor,
}

/// The top `k` of each row of `scores [n, E]` (ties to the lower expert).
pub fn topk(g: &Graph<'_>, scores: &Tensor, k: usize) -> Result<TopK> {
    let (n, e) = (scores.rows(), scores.last_dim());
    let (ids, flat, sel) = (g.empty(&[n, k])?, g.empty(&[n, k])?, g.empty(&[n, e])?);
    g.record(|rec| k::topk(rec, scores.view(), (ids.view(), flat.view(), sel.view()), n, e, k))?;
    Ok(TopK { ids, flat, sel })
}

/// The assignments sorted by expert: int32 `offsets [E + 1]`, and per slot `token [S]`,
/// `expert [S]`, and per assignment `slot [S]` (where `token·k + j` went).
pub struct Groups {
    pub experts: usize,
    pub offsets: Tensor,
    pub token: Tensor,
    pub expert: Tensor,
    pub slot: Tensor,
}

/// Groups the assignments `ids [n, k]` of [`topk`] by expert.
pub fn group(g: &Graph<'_>, ids: &Tensor, experts: usize) -> Result<Groups> {
    let (slots, kk) = (ids.numel(), ids.last_dim());
    let e32 = u32::try_from(experts).map_err(|_| err(format!("{experts} experts")))?;
    let s32 = u32::try_from(slots).map_err(|_| err(format!("{slots} assignments")))?;
    let scratch = g.empty(&[(k::group_scratch_bytes(e32, s32) / 4) as usize])?;
    let offsets = g.empty(&[experts + 1])?;
    let (token, expert, slot) = (g.empty(&[slots])?, g.empty(&[slots])?, g.empty(&[slots])?);
    g.record(|rec| {
        let idx = (token.view(), expert.view(), slot.view());
        k::group(rec, ids.view(), e32, kk as u32, scratch.view(), offsets.view(), idx)
    })?;
    Ok(Groups { experts, offsets, token, expert, slot })
}

/// `y [S, out] = x [S, in] ·_e W_eᵀ` for `W [E·out, in]` or `[E, out, in]` (f32).
pub fn grouped_linear(g: &Graph<'_>, x: &Tensor, w: &Tensor, groups: &Groups) -> Result<Tensor> {
    let (slots, inp, e) = (x.rows(), x.last_dim(), groups.experts);
    let ws = w.shape();
    if w.last_dim() != inp || !w.numel().is_multiple_of(e * inp) || groups.token.numel() != slots {
        return Err(err(format!(
            "grouped_linear: x {:?}, W {ws:?}, {e} experts, {} slots",
            x.shape(),
            groups.token.numel()
        )));
    }
    let out = w.numel() / (e * inp);
    grouped(g, x, w, groups, (slots, inp, out, e), true)
}

/// `y [S, out] = x [S, in] ·_e W_e` for `W [E·in, out]`, each expert's block used as stored, not
/// transposed (DBRX's `w2`: every expert's down projection kept as `[I, H]`). Backward:
/// `dx = dy ·_e W_eᵀ` (the transposed form of the kernel) and `dW_e = x_eᵀ · dy_e`.
pub fn grouped_matmul(g: &Graph<'_>, x: &Tensor, w: &Tensor, groups: &Groups) -> Result<Tensor> {
    let (slots, inp, e) = (x.rows(), x.last_dim(), groups.experts);
    let ws = w.shape();
    if w.shape().len() != 2 || ws[0] != e * inp || groups.token.numel() != slots {
        return Err(err(format!(
            "grouped_matmul: x {:?}, W {ws:?} (want [{e}·{inp}, out]), {} slots",
            x.shape(),
            groups.token.numel()
        )));
    }
    grouped(g, x, w, groups, (slots, inp, ws[1], e), false)
}

/// The product of `grouped_linear` (`linear`: W_e stored `[out, in]`) or `grouped_matmul` (W_e
/// stored `[in, out]`) on `dims = (S, in, out, E)`, and its backward: `dx = dy ·_e op(W_e)ᵀ`
/// (the kernel with the other transpose) and `dW_e` = `dy_eᵀ · x_e` (`[out, in]`) or
/// `x_eᵀ · dy_e` (`[in, out]`). Operands are read in the storage type the dense products use
/// (`product_dtype`: the autocast type, else a 16-bit operand's type, else f32; 16-bit copies
/// through `autocast_copy`, so gradients are with respect to the tensors given); y and the
/// f32 products are f32, a 16-bit operand's gradient is rounded to its type.
fn grouped(
    g: &Graph<'_>,
    x: &Tensor,
    w: &Tensor,
    groups: &Groups,
    dims: (usize, usize, usize, usize),
    linear: bool,
) -> Result<Tensor> {
    let (slots, inp, out, e) = dims;
    let dt = product_dtype(g, x, w)?;
    let (x16, w16) = (autocast_copy(g, x, dt)?, autocast_copy(g, w, dt)?);
    let y = g.output_as(&[slots, out], DType::F32, &[x, w])?;
    let st = Storage::both(dt);
    let (xv, wv, yv) = (x16.view(), w16.view(), y.view());
    g.record(|rec| k::grouped_rows(rec, (xv, wv, yv), groups.offsets.view(), dims, linear, st, GroupTile::Auto))?;
    let offsets = groups.offsets.clone();
    let (xt, wt) = ((x.shape().to_vec(), x.dtype()), (w.shape().to_vec(), w.dtype()));
    let need = [x.requires_grad(), w.requires_grad()];
    g.push_node(
        &y,
        vec![x.clone(), w.clone()],
        Box::new(move |g, dy| {
            let dy16 = narrow(g, dy, dt)?;
            let dx = if need[0] {
                let dx = g.empty(&xt.0)?;
                let back = (slots, out, inp, e);
                let bufs = (dy16.view(), w16.view(), dx.view());
                g.record(|rec| k::grouped_rows(rec, bufs, offsets.view(), back, !linear, st, GroupTile::Auto))?;
                Some(as_type(g, dx, xt.1)?)
            } else {
                None
            };
            let dw = if need[1] {
                let dw = g.empty(&wt.0)?;
                // dW_e = dy_eᵀ · x_e ([out, in]) or x_eᵀ · dy_e ([in, out]).
                let (l, r, wd) = if linear {
                    (dy16.view(), x16.view(), (slots, out, inp, e))
                } else {
                    (x16.view(), dy16.view(), (slots, inp, out, e))
                };
                g.record(|rec| k::grouped_wgrad(rec, (l, r, dw.view()), offsets.view(), wd, st, GroupTile::Auto))?;
                Some(as_type(g, dw, wt.1)?)
            } else {
                None
            };
            Ok(vec![dx, dw])
        }),
    );
    Ok(y)
}

/// The storage type of a grouped product, as the dense products choose it: the autocast type
/// when mixed precision is on, else the 16-bit type of a 16-bit operand, else f32.
fn product_dtype(g: &Graph<'_>, x: &Tensor, w: &Tensor) -> Result<DType> {
    let half = [x.dtype(), w.dtype()].into_iter().find(|d| *d != DType::F32);
    let dt = g.autocast().or(half).unwrap_or(DType::F32);
    if [x, w].iter().any(|t| t.dtype() != DType::F32 && t.dtype() != dt) {
        return Err(err(format!("grouped product of {:?} and {:?} (16-bit types differ)", x.dtype(), w.dtype())));
    }
    Ok(dt)
}

/// An f32 gradient as the gradient of an operand stored as `dt`.
fn as_type(g: &Graph<'_>, wide: Tensor, dt: DType) -> Result<Tensor> {
    if dt == DType::F32 {
        return Ok(wide);
    }
    narrow(g, &wide, dt)
}
