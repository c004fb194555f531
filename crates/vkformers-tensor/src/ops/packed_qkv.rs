//! Training under autocast: q, k and v for 16-bit attention read in place from the packed q/k/v
//! product's f32 output `y [tokens, nq + nk + nv]`, and their gradients written into one packed
//! 16-bit gradient of y, with no split and no concat:
//!
//! - forward: RoPE of q and of k reads its columns of y (token rows of nq + nk + nv) and writes
//!   the 16-bit tensor attention reads (as `rope::rope_for_attention`); v's columns are rounded
//!   to the 16-bit v attention reads (`elementwise::cast_cols`, the cast `autocast_copy` makes);
//! - backward: RoPE's backward writes dq and dk straight into their columns of the packed dY
//!   (strided twin store), and attention's 16-bit dv is copied into its columns (one
//!   `copy_cols`); the q node, pushed first and so run last, hands dY to the product.
//!
//! The values are those of the split path (`packed_split` then `rope_for_attention`, v's cast):
//! the same kernels' math, only the addressing differs.

use std::cell::RefCell;
use std::rc::Rc;

use vkformers_kernels::dtype::Twin;
use vkformers_kernels::elementwise::{cast_cols, copy_cols};
use vkformers_kernels::rope::{self as k, Rope, RopeLayout};
use vkformers_vk::BufferView;

use super::packed_split::Join;
use crate::{DType, Graph, Result, Tensor};

/// Heads of q and of k/v, and the head dim, of a packed q/k/v output.
#[derive(Clone, Copy, Debug)]
pub struct QkvHeads {
    pub batch: usize,
    pub seq: usize,
    pub heads: usize,
    pub kv_heads: usize,
    pub head_dim: usize,
}

/// `(rope(q), rope(k), v)` `[B, T, H, D]` in the autocast type for attention, from the packed
/// product's output `y [B·T, (Hq + 2 Hkv) · D]` (see the module doc), or `None` where this does
/// not apply (then split and rotate): not a training forward under autocast with 16-bit
/// outputs and gradients between attention and its neighbours, or y not an f32 product output
/// taking 16-bit gradients of that shape.
pub fn qkv_for_attention(
    g: &Graph<'_>,
    y: &Tensor,
    s: QkvHeads,
    (pos, inv_freq): (&Tensor, &Tensor),
    (layout, rotary_dim, mscale): (RopeLayout, usize, f32),
) -> Result<Option<[Tensor; 3]>> {
    let tokens = s.batch * s.seq;
    let cols = [s.heads * s.head_dim, s.kv_heads * s.head_dim, s.kv_heads * s.head_dim];
    let width: usize = cols.iter().sum();
    let half = super::cast::half_output_for_rows(g, tokens).filter(|_| super::cast::half_grads_on(g));
    let fits = y.dtype() == DType::F32 && y.requires_grad() && g.takes_half_grad(y) && y.shape() == [tokens, width];
    let rope_fits = pos.numel() == tokens && inv_freq.numel() == rotary_dim / 2 && rotary_dim <= s.head_dim;
    let (Some(dt), true, true) = (half, fits, rope_fits) else { return Ok(None) };
    let u = |v: usize| u32::try_from(v).ok();
    // The kernels index the packed rows in 32 bits.
    let indexable = u(tokens * width).is_some();
    let (Some(b), Some(t), Some(d), Some(r), Some(w), Some(rows), true) =
        (u(s.batch), u(s.seq), u(s.head_dim), u(rotary_dim), u(width), u(tokens), indexable)
    else {
        return Ok(None);
    };
    let rope = |heads: usize| Rope {
        batch: b,
        seq: t,
        heads: heads as u32,
        head_dim: d,
        rotary_dim: r,
        layout,
        mscale,
        dtype: DType::F32,
    };
    let ps = [rope(s.heads), rope(s.kv_heads)];
    let outs: Vec<Tensor> = [s.heads, s.kv_heads, s.kv_heads]
        .iter()
        .map(|&h| g.output_as(&[s.batch, s.seq, h, s.head_dim], dt, &[y]))
        .collect::<Result<_>>()?;
    let join = Rc::new(RefCell::new(Join::new(rows, &cols)));
    let io = (pos.view(), inv_freq.view());
    g.record(|rec| {
        for (p, ps) in ps.iter().enumerate() {
            let x = from_column(y, join.borrow().place(p).0);
            k::rope_forward_twin_only_strided(rec, ps, (x, io.0, io.1), w, twin(&outs[p]))?;
        }
        let dims = (rows, cols[2] as u32, w);
        cast_cols(rec, from_column(y, join.borrow().place(2).0), dims, twin(&outs[2]))
    })?;
    let shape = y.shape().to_vec();
    for (p, out) in outs.iter().enumerate() {
        let (join, shape, pos, inv_freq) = (join.clone(), shape.clone(), pos.clone(), inv_freq.clone());
        let rope = ps.get(p).copied();
        g.push_node(
            out,
            vec![y.clone()],
            Box::new(move |g, dy| {
                // dy comes in the autocast type from attention (widened by the tape if summed).
                let dy = if dy.dtype() != dt { super::cast::cast(g, dy, dt)? } else { dy.clone() };
                let mut j = join.borrow_mut();
                let packed = j.packed(g, &shape, dt)?;
                let (col0, width) = j.place(p);
                match rope {
                    Some(ps) => {
                        let ins = (dy.view(), pos.view(), inv_freq.view());
                        let dst = Twin { view: from_column(&packed, col0), dtype: dt };
                        g.record(|rec| k::rope_backward_in16_twin_only_strided(rec, &ps, ins, dst, width as u32))?;
                    }
                    None => {
                        let dims = ((rows, cols[p] as u32), (width as u32, col0 as u32));
                        g.record(|rec| copy_cols(rec, (dy.view(), packed.view()), dims.0, dims.1, dt.bytes()))?;
                    }
                }
                j.mark(p);
                Ok(vec![if p == 0 { Some(j.finish(g)?) } else { None }])
            }),
        );
    }
    Ok(Some([outs[0].clone(), outs[1].clone(), outs[2].clone()]))
}

/// The view of `t [rows, width]` from column `col` on (the part's first column).
fn from_column(t: &Tensor, col: usize) -> BufferView<'_> {
    let v = t.view();
    let off = (col as u64 * t.dtype().bytes()).min(v.len);
    BufferView { buffer: v.buffer, offset: v.offset + off, len: v.len - off }
}

fn twin(t: &Tensor) -> Twin<'_> {
    Twin { view: t.view(), dtype: t.dtype() }
}
