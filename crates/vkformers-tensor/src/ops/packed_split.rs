//! Training: the column split of a packed product's output `y [.., Σ n_p]` into contiguous
//! `[.., n_p]` tensors (q, k and v of the packed q/k/v product) WITH a backward: each part's
//! gradient is copied into its columns of one packed gradient `dY [.., Σ n_p]` (in the type it
//! comes in: 16 bits from attention and RoPE under autocast), which the packed product's
//! backward reads in one product.
//!
//! The tape runs one node per output; the parts' nodes share the packed gradient. They are
//! pushed in part order, so the first part's node runs last: it hands dY to the tape (zeros in
//! the columns of a part no gradient reached). The first part is q, which attention's backward
//! always gives a gradient when it gives k or v one.

use std::cell::RefCell;
use std::rc::Rc;

use vkformers_kernels::elementwise::{copy_cols, split_cols as split_kernel};

use crate::{DType, Graph, Result, Tensor, VkError};

fn err(message: String) -> VkError {
    VkError::Kernel { kernel: "split_cols_packed".into(), message }
}

/// `y [.., Σ n_p]` split by columns into `[.., n_p]` f32 tensors (two or three parts) whose
/// gradients flow back into one packed gradient of y. Without gradients it is `split_cols`.
pub fn split_cols_packed(g: &Graph<'_>, y: &Tensor, cols: &[usize]) -> Result<Vec<Tensor>> {
    if !(g.grad_enabled() && y.requires_grad()) {
        return super::split::split_cols(g, y, cols);
    }
    if y.dtype() != DType::F32 || y.shape().is_empty() || cols.iter().sum::<usize>() != y.last_dim() {
        return Err(err(format!("{:?} {:?} into columns {cols:?}", y.shape(), y.dtype())));
    }
    let rows = u32::try_from(y.rows()).map_err(|_| err(format!("{} rows", y.rows())))?;
    let lead = &y.shape()[..y.shape().len() - 1];
    let outs: Vec<Tensor> =
        cols.iter().map(|&n| g.output_as(&[lead, &[n]].concat(), DType::F32, &[y])).collect::<Result<_>>()?;
    let views: Vec<_> = outs.iter().map(Tensor::view).collect();
    g.record(|rec| split_kernel(rec, y.view(), &views, rows))?;
    // The parts take their gradients in 16 bits when y does (attention's dv, RoPE's dq, dk).
    if g.takes_half_grad(y) {
        outs.iter().for_each(|o| g.set_takes_half_grad(o));
    }
    let join = Rc::new(RefCell::new(Join::new(rows, cols)));
    for (p, o) in outs.iter().enumerate() {
        let join = join.clone();
        let shape = y.shape().to_vec();
        g.push_node(
            o,
            vec![y.clone()],
            Box::new(move |g, d| {
                let mut j = join.borrow_mut();
                j.write(g, p, d, &shape)?;
                Ok(vec![if p == 0 { Some(j.finish(g)?) } else { None }])
            }),
        );
    }
    Ok(outs)
}

/// The packed gradient `[rows, Σ n_p]` being gathered from the parts' nodes (shared by them;
/// the first part's node, which runs last, hands it over: `finish`).
pub(crate) struct Join {
    grad: Option<Tensor>,
    written: Vec<bool>,
    rows: u32,
    cols: Vec<usize>,
}

impl Join {
    pub(crate) fn new(rows: u32, cols: &[usize]) -> Join {
        Join { grad: None, written: vec![false; cols.len()], rows, cols: cols.to_vec() }
    }

    /// The packed gradient of `shape`, made on the first call in `dtype`.
    pub(crate) fn packed(&mut self, g: &Graph<'_>, shape: &[usize], dtype: DType) -> Result<Tensor> {
        if let Some(t) = &self.grad {
            return Ok(t.clone());
        }
        let t = g.empty_as(shape, dtype)?;
        self.grad = Some(t.clone());
        Ok(t)
    }

    /// First column of part `p` and the packed row width.
    pub(crate) fn place(&self, p: usize) -> (usize, usize) {
        (self.cols[..p].iter().sum(), self.cols.iter().sum())
    }

    /// Part `p`'s columns hold its gradient now.
    pub(crate) fn mark(&mut self, p: usize) {
        self.written[p] = true;
    }

    /// Copies part `p`'s gradient `d [.., n_p]` into its columns (the packed gradient made on the
    /// first call, in `d`'s type; a later part of the other type is cast to it: a 16-bit one
    /// widens exactly, an f32 one rounds as the product's backward would have rounded it, or
    /// is its kept twin).
    pub(crate) fn write(&mut self, g: &Graph<'_>, p: usize, d: &Tensor, shape: &[usize]) -> Result<()> {
        let packed = self.packed(g, shape, d.dtype())?;
        let d = match (d.dtype(), packed.dtype()) {
            (a, b) if a == b => d.clone(),
            // The 16-bit twin the op that wrote d kept (RoPE's backward), else a cast.
            (DType::F32, half) => super::cast::narrow(g, d, half)?,
            (_, wide) => super::cast::cast(g, d, wide)?,
        };
        self.copy(g, &d, &packed, p)?;
        self.written[p] = true;
        Ok(())
    }

    fn copy(&self, g: &Graph<'_>, d: &Tensor, packed: &Tensor, p: usize) -> Result<()> {
        let (col0, stride) = self.place(p);
        let to32 = |v: usize| u32::try_from(v).map_err(|_| err(format!("{v} columns")));
        let (n, stride, col0) = (to32(self.cols[p])?, to32(stride)?, to32(col0)?);
        let bytes = packed.dtype().bytes();
        g.record(|rec| copy_cols(rec, (d.view(), packed.view()), (self.rows, n), (stride, col0), bytes))
    }

    /// The packed gradient, with zeros in the columns of parts that got none.
    pub(crate) fn finish(&mut self, g: &Graph<'_>) -> Result<Tensor> {
        let packed = self.grad.take().ok_or_else(|| err("no part's gradient reached the split".into()))?;
        for p in 0..self.cols.len() {
            if !self.written[p] {
                // Zero bits are a zero in every storage type.
                let zeros = g.full(&[self.rows as usize * self.cols[p]], 0.0)?;
                self.copy(g, &zeros, &packed, p)?;
            }
        }
        Ok(packed)
    }
}
