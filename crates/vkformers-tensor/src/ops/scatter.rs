//! Row scatter, the inverse of the embedding's row gather: `y [rows, D]` zero, then
//! `y[ids[n], :] += x[n, :]` for int32 `ids [N]` (ids outside `[0, rows)` dropped; repeated ids
//! summed in increasing n, deterministically). With `ids` a permutation it puts each row where
//! `ids` says (JetMoE's attention experts: assignment order -> expert order, the inverse of the
//! gather by `Groups::slot`). Backward: `dx[n, :] = dy[ids[n], :]`, the gather.

use vkformers_kernels::dtype::DType;
use vkformers_kernels::elementwise;
use vkformers_kernels::embedding::{self as k, Embedding};

use crate::{Graph, Result, Tensor, VkError};

fn dim32(v: usize) -> Result<u32> {
    u32::try_from(v)
        .map_err(|_| VkError::Kernel { kernel: "scatter_rows".into(), message: format!("{v} does not fit in 32 bits") })
}

/// `y [rows, D]` with `y[ids[n], :] = sum of x[n, :]` over the n naming that row; `x [N, D]` f32.
pub fn scatter_rows(g: &Graph<'_>, x: &Tensor, ids: &Tensor, rows: usize) -> Result<Tensor> {
    let (n, d) = (x.rows(), x.last_dim());
    if ids.numel() != n {
        return Err(VkError::Kernel {
            kernel: "scatter_rows".into(),
            message: format!("x {:?} with {} ids", x.shape(), ids.numel()),
        });
    }
    let p = Embedding { vocab: dim32(rows)?, dim: dim32(d)?, tokens: dim32(n)?, dtype: DType::F32, padding_idx: None };
    let y = g.output(&[rows, d], &[x])?;
    let scratch = g.ctx().buffer(k::backward_scratch_bytes(p.vocab, p.tokens), "scatter_rows scratch")?;
    let s = scratch.slice(0, scratch.size());
    if crate::zero_fills() {
        g.record(|rec| {
            elementwise::fill(rec, y.view(), 0.0)?;
            k::embedding_backward(rec, &p, ids.view(), x.view(), y.view(), s)
        })?;
    } else {
        // Every row written (absent ones zero): no fill first.
        g.record(|rec| k::embedding_backward_fresh(rec, &p, ids.view(), x.view(), y.view(), s))?;
    }
    let saved_ids = ids.clone();
    g.push_node(
        &y,
        vec![x.clone(), ids.clone()],
        Box::new(move |g, dy| {
            let dx = g.empty(&[n, d])?;
            g.record(|rec| k::embedding_forward(rec, &p, dy.view(), saved_ids.view(), dx.view()))?;
            Ok(vec![Some(dx), None])
        }),
    );
    Ok(y)
}
