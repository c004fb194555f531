//! The column split of a packed product's output: `x [.., Σ n_p]` into contiguous
//! `[.., n_p]` tensors in one dispatch (inference: q, k and v of one packed q/k/v product).

use vkformers_kernels::elementwise::split_cols as split_kernel;

use crate::{DType, Graph, Result, Tensor, VkError};

/// `x [.., n_0 + n_1 (+ n_2)]` split by columns into `[.., n_p]` f32 tensors (two or three
/// parts). No backward: it runs where no gradient flows (an error otherwise).
pub fn split_cols(g: &Graph<'_>, x: &Tensor, cols: &[usize]) -> Result<Vec<Tensor>> {
    let bad = |message: String| VkError::Kernel { kernel: "split_cols".into(), message };
    if g.grad_enabled() && x.requires_grad() {
        return Err(bad("split_cols has no backward: it runs without gradients".into()));
    }
    if x.dtype() != DType::F32 || x.shape().is_empty() || cols.iter().sum::<usize>() != x.last_dim() {
        return Err(bad(format!("{:?} {:?} into columns {cols:?}", x.shape(), x.dtype())));
    }
    let rows = u32::try_from(x.rows()).map_err(|_| bad(format!("{} rows", x.rows())))?;
    let lead = &x.shape()[..x.shape().len() - 1];
    let outs: Vec<Tensor> = cols.iter().map(|&n| g.empty(&[lead, &[n]].concat())).collect::<Result<_>>()?;
    let views: Vec<_> = outs.iter().map(Tensor::view).collect();
    g.record(|rec| split_kernel(rec, x.view(), &views, rows))?;
    Ok(outs)
}
