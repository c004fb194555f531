//! Training: `y = x · Wᵀ (+ b)` for the weights of a layer that read one input (q, k and v;
//! gate and up) as ONE product, forward and backward, where the weights are parameters of
//! their own (stepped, clipped, saved under their names) that are row blocks of one packed f32
//! storage `W [Σ n_p, in]` (`Graph::parameter_rows`).
//!
//! - Forward: one GEMM of x by the packed weight (its 16-bit copy under autocast: one cast of
//!   the storage whose row blocks are kept as the parts' copies, so the fused AdamW, which
//!   rewrites each part's copy, rewrites the packed copy in place).
//! - dX = dY · W: one GEMM over K = Σ n_p (instead of one per part, each adding into dX).
//! - dW = dYᵀ · X: one GEMM written straight into the packed gradient `[Σ n_p, in]`, whose row
//!   blocks ARE the parts' gradients (views; no split, no copy); later micro-batches add into it
//!   (`beta = 1`). Where a part's gradient lives elsewhere (a reader outside this op reached it
//!   first) the packed result is handed to the tape as views, which adds them as before.
//! - db: the column sums of dY into the packed bias gradient the same way.

use vkformers_kernels::matmul::GemmDesc;

use super::cast::{autocast_copy, narrow};
use super::matmul::{few_rows, grad_a, grad_b, grad_bias, record_gemm, Operand, Product};
use crate::{DType, Graph, Result, Tensor, VkError};

fn err(message: String) -> VkError {
    VkError::Kernel { kernel: "packed_linear".into(), message }
}

/// A packed parameter: the f32 storage `[Σ n_p, ..]` and its parts, parameters made of its row
/// blocks by `Graph::parameter_rows`, in row order, covering it.
#[derive(Clone, Copy)]
pub struct Packed<'a> {
    pub storage: &'a Tensor,
    pub parts: &'a [Tensor],
}

impl Packed<'_> {
    /// The first row of each part, after checking the parts are f32 parameters lying on the
    /// storage's consecutive row blocks.
    fn row0s(&self) -> Result<Vec<usize>> {
        let shape = self.storage.shape();
        let bad = || err(format!("{} parts do not tile the packed {shape:?}", self.parts.len()));
        let Some((&total, rest)) = shape.split_first() else { return Err(bad()) };
        let mut row0 = 0;
        let mut out = Vec::with_capacity(self.parts.len());
        for p in self.parts {
            let fits = p.is_leaf() && p.dtype() == DType::F32 && p.shape().get(1..) == Some(rest);
            if !fits || !lies_at(p, self.storage, row0) {
                return Err(bad());
            }
            out.push(row0);
            row0 += p.shape()[0];
        }
        if row0 != total || self.storage.dtype() != DType::F32 {
            return Err(bad());
        }
        Ok(out)
    }
}

/// Whether `t` lies on `base`'s storage from row `row0` on (`base`'s rows, `t`'s dtype).
fn lies_at(t: &Tensor, base: &Tensor, row0: usize) -> bool {
    let row_elems: usize = base.shape().iter().skip(1).product();
    let (tv, bv) = (t.view(), base.view());
    let offset = bv.offset + (row0 * row_elems) as u64 * base.dtype().bytes();
    tv.buffer.id() == bv.buffer.id() && tv.offset == offset && t.dtype() == base.dtype()
}

/// `y [.., Σ n_p] = x [.., in] · Wᵀ (+ b)` of the packed weight `w` (and packed bias `b`): one
/// product, whose backward is one product for dX and one for dW (see the module doc). The
/// columns of each part are those of its own `linear` (the same sums over `in`).
pub fn packed_linear(g: &Graph<'_>, x: &Tensor, w: Packed<'_>, bias: Option<Packed<'_>>) -> Result<Tensor> {
    let (xs, ws) = (x.shape(), w.storage.shape());
    if xs.is_empty() || ws.len() != 2 || ws[1] != x.last_dim() {
        return Err(err(format!("x {xs:?} and W {ws:?} (need x [.., in] and W [out, in])")));
    }
    if bias.is_some_and(|b| b.storage.shape() != [ws[0]]) {
        return Err(err(format!("a packed bias for {} outputs of another length", ws[0])));
    }
    let w_rows = w.row0s()?;
    let b_rows = bias.map(|b| b.row0s()).transpose()?;
    let dim = |what: &str, v: usize| u32::try_from(v).map_err(|_| err(format!("{what} = {v} over 32 bits")));
    let p = Product { batch: 1, m: dim("rows", x.rows())?, k: dim("in", ws[1])?, n: dim("out", ws[0])?, trans_b: true };
    let mut out_shape = xs.to_vec();
    *out_shape.last_mut().expect("x is not a scalar") = ws[0];
    let mut inputs = vec![x];
    inputs.extend(w.parts);
    inputs.extend(bias.iter().flat_map(|b| b.parts));
    let c = g.output_as(&out_shape, DType::F32, &inputs)?;
    let b_storage = bias.map(|b| b.storage);
    // A few f32 rows: the GEMV, as `linear` takes it (same kernel, same per-output sums).
    let few = few_rows(g, (x, w.storage), b_storage, p, &c)?;
    if few && !c.requires_grad() {
        return Ok(c);
    }
    let dt = g.autocast().unwrap_or(x.dtype());
    if x.dtype() != DType::F32 && x.dtype() != dt {
        return Err(err(format!("x {xs:?} {:?} under autocast {dt:?}", x.dtype())));
    }
    let (x16, w16) = (autocast_copy(g, x, dt)?, packed_copy(g, w, &w_rows, dt)?);
    if !few {
        let mut desc = GemmDesc::packed(p.m, p.n, p.k, false, true);
        desc.has_bias = bias.is_some();
        desc.dtype = dt;
        record_gemm(g, &desc, &x16, &w16, b_storage, &c)?;
    }
    if bias.is_none() {
        // dY may come in 16 bits (the GLU's and attention's backward write it so).
        super::cast::takes_half_grad(g, &c);
    }
    let saved = Saved {
        p,
        dt,
        x: (x.requires_grad(), x.id(), x_grad_operand(g, x)),
        x16,
        w16,
        w: (ws.to_vec(), w.parts.to_vec(), w_rows),
        b: bias.zip(b_rows).map(|(b, rows)| (vec![ws[0]], b.parts.to_vec(), rows)),
    };
    let n_inputs = inputs.len();
    g.push_node(&c, inputs.into_iter().cloned().collect(), Box::new(move |g, dy| saved.backward(g, dy, n_inputs)));
    Ok(c)
}

/// Shape and type of x's gradient: f32 for a 16-bit x whose producer takes an f32 gradient.
fn x_grad_operand(g: &Graph<'_>, x: &Tensor) -> Operand {
    let dtype = if super::cast::wants_wide_grad(g, x) { DType::F32 } else { x.dtype() };
    Operand { shape: x.shape().to_vec(), dtype }
}

/// A packed parameter as the backward sees it: storage shape, parts, their first rows.
type PackedParts = (Vec<usize>, Vec<Tensor>, Vec<usize>);

/// What the backward of one packed product keeps.
struct Saved {
    p: Product,
    dt: DType,
    /// Whether x takes a gradient, its id (to add into the gradient it already gathered), and
    /// that gradient's shape and type.
    x: (bool, u64, Operand),
    x16: Tensor,
    w16: Tensor,
    w: PackedParts,
    b: Option<PackedParts>,
}

impl Saved {
    /// Gradients of `[x, w parts.., b parts..]` from dY: dX in one product, dW in one product
    /// into the packed gradient, db into the packed bias gradient.
    fn backward(&self, g: &Graph<'_>, dy: &Tensor, n_inputs: usize) -> Result<Vec<Option<Tensor>>> {
        let dy16 = narrow(g, dy, self.dt)?;
        let mut grads = Vec::with_capacity(n_inputs);
        let (need_x, x_id, op) = &self.x;
        grads.push(if *need_x {
            // dX adds into the gradient x already gathered from its other readers.
            let into = if op.dtype == DType::F32 { g.take_gathered_grad_in_place(*x_id, &op.shape) } else { None };
            Some(grad_a(g, self.p, &dy16, &self.w16, op, into)?)
        } else {
            None
        });
        let (w_shape, w_parts, w_rows) = &self.w;
        let op = Operand { shape: w_shape.clone(), dtype: DType::F32 };
        let acc = accumulator(g, w_parts, w_rows, w_shape);
        let into = if let Target::Packed(t) = &acc { Some(t.clone()) } else { None };
        let dw = grad_b(g, self.p, &self.x16, &dy16, &op, into)?;
        grads.extend(acc.hand_over(g, dw, w_parts, w_rows)?);
        if let Some((b_shape, b_parts, b_rows)) = &self.b {
            let wide = if dy.dtype() == DType::F32 { dy.clone() } else { super::cast::cast(g, dy, DType::F32)? };
            let db = grad_bias(g, self.p, &wide, b_shape)?;
            let acc = accumulator(g, b_parts, b_rows, b_shape);
            if let Target::Packed(t) = &acc {
                g.record(|rec| vkformers_kernels::broadcast::axpy(rec, 1.0, db.view(), t.view(), DType::F32))?;
            }
            grads.extend(acc.hand_over(g, db, b_parts, b_rows)?);
        }
        Ok(grads)
    }
}

/// Where a packed gradient goes.
enum Target {
    /// The parts' gradients are the row blocks of this tensor: add into it.
    Packed(Tensor),
    /// No part has a gradient yet: the fresh packed result becomes theirs (as views).
    Fresh,
    /// Some parts' gradients live elsewhere: the tape adds the result's row blocks.
    Apart,
}

/// The target of the packed gradient of `parts` (first rows `rows`, storage `shape`).
fn accumulator(g: &Graph<'_>, parts: &[Tensor], rows: &[usize], shape: &[usize]) -> Target {
    if parts.iter().all(|p| p.grad().is_none()) {
        return Target::Fresh;
    }
    let accs: Option<Vec<Tensor>> = parts.iter().map(|p| g.leaf_grad_accumulator(p)).collect();
    let Some(accs) = accs else { return Target::Apart };
    let packed = g.rows_from(&accs[0], shape);
    let tiled = accs.iter().zip(rows).all(|(a, &r)| lies_at(a, &packed, r));
    if tiled {
        Target::Packed(packed)
    } else {
        Target::Apart
    }
}

impl Target {
    /// The gradients to return for `parts` once the packed result `d` is written: none where it
    /// was written in place (`Packed`) or became the parts' gradients (`Fresh`: each part's is a
    /// view of its rows), else each part's rows for the tape to add.
    fn hand_over(self, g: &Graph<'_>, d: Tensor, parts: &[Tensor], rows: &[usize]) -> Result<Vec<Option<Tensor>>> {
        let view = |p: &Tensor, r0: usize| g.view_rows(&d, r0, p.shape()[0]);
        match self {
            Target::Packed(_) => Ok(vec![None; parts.len()]),
            Target::Fresh => {
                for (p, &r0) in parts.iter().zip(rows) {
                    *p.0.grad.borrow_mut() = Some(view(p, r0)?);
                }
                Ok(vec![None; parts.len()])
            }
            Target::Apart => parts.iter().zip(rows).map(|(p, &r0)| view(p, r0).map(Some)).collect(),
        }
    }
}

/// The packed weight in the product's type `dt`: the storage itself (f32), or its 16-bit copy
/// whose row blocks are the parts' kept copies. Made once (one cast) and kept; remade when a
/// part's copy is not its block (made apart, or forgotten by an optimizer step).
fn packed_copy(g: &Graph<'_>, w: Packed<'_>, rows: &[usize], dt: DType) -> Result<Tensor> {
    if dt == w.storage.dtype() {
        return Ok(w.storage.clone());
    }
    if let Some(c) = g.cached_cast(w.storage, dt) {
        let blocks =
            w.parts.iter().zip(rows).all(|(p, &r0)| g.cached_cast(p, dt).is_some_and(|pc| lies_at(&pc, &c, r0)));
        if blocks {
            return Ok(c);
        }
        g.forget_cast(w.storage);
    }
    let c = autocast_copy(g, w.storage, dt)?;
    for (p, &r0) in w.parts.iter().zip(rows) {
        g.keep_cast(p, &g.view_rows(&c, r0, p.shape()[0])?);
    }
    Ok(c)
}
