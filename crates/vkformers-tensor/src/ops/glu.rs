//! Gated linear units `out = f(gate) * up` with `f` SiLU (SwiGLU) or GELU (GeGLU, exact or
//! tanh), from separate gate/up tensors [.., I] or one fused gate_up [.., 2I] whose first I
//! columns are the gate (HF Phi-3's `gate_up_proj(x).chunk(2, dim=-1)`).
//! Backward: `dgate = dout * up * f'(gate)`, `dup = dout * f(gate)`, from the saved inputs.

use vkformers_kernels::dtype::{cast as cast_kernel, DType, Twin};
use vkformers_kernels::glu as k;
pub use vkformers_kernels::glu::Glu;

use crate::ops::push_one_kernel_grad;
use crate::{Graph, Result, Tensor, VkError};

/// `out = f(gate) * up`; gate, up, out [.., I] (gate and up of one shape). Under autocast in
/// training the backward keeps 16-bit copies of gate and up (written by the forward kernel; cast
/// after it with `VKFORMERS_NO_TWINS=1`) instead of the f32 tensors, as `torch.autocast` keeps
/// the 16-bit outputs of the products.
pub fn glu(g: &Graph<'_>, gate: &Tensor, up: &Tensor, kind: Glu) -> Result<Tensor> {
    if gate.shape() != up.shape() || gate.shape().is_empty() {
        return Err(shape_error(format!("gate {:?} and up {:?} must have one shape", gate.shape(), up.shape())));
    }
    let (rows, inner) = (gate.rows(), gate.last_dim());
    let out = g.output(gate.shape(), &[gate, up])?;
    let saved = match record_forward(g, kind, (gate, Some(up)), &out, (rows, inner))? {
        Some(half) => Saved::Half(half),
        None => Saved::Wide(gate.clone(), up.clone()),
    };
    g.push_node(
        &out,
        vec![gate.clone(), up.clone()],
        Box::new(move |g, dout| {
            let (dgate, dup) = backward(g, kind, &saved, dout, (rows, inner))?;
            Ok(vec![Some(dgate), Some(dup)])
        }),
    );
    Ok(out)
}

/// [`glu`] for a product that reads the output next and nothing else (the MLP's down
/// projection): in training under autocast the output is the 16-bit tensor the product reads,
/// and the f32 `[.., I]` one is never written (4 bytes an element saved; the backward works from
/// the saved 16-bit gate and up and takes dout in f32 as [`glu`]'s, so the values are the same).
/// Else (inference, autocast off, `VKFORMERS_WIDE_OUTPUTS=1`) [`glu`] itself.
pub fn glu_for_product(g: &Graph<'_>, gate: &Tensor, up: &Tensor, kind: Glu) -> Result<Tensor> {
    let dt = crate::ops::cast::half_output_for_rows(g, gate.rows());
    let wide = [gate, up].iter().all(|t| t.dtype() == DType::F32 && t.requires_grad());
    let Some(dt) = dt.filter(|_| wide && gate.shape() == up.shape() && !gate.shape().is_empty()) else {
        return glu(g, gate, up, kind);
    };
    let (rows, inner) = (gate.rows(), gate.last_dim());
    let out = g.output_as(gate.shape(), dt, &[gate, up])?;
    let half = [g.empty_as(gate.shape(), dt)?, g.empty_as(gate.shape(), dt)?];
    g.record(|rec| {
        let save = Some(half.each_ref().map(twin_of));
        k::forward_twin_only(rec, kind, (gate.view(), Some(up.view())), twin_of(&out), save, (rows, inner))
    })?;
    crate::ops::cast::takes_wide_grad(g, &out);
    // gate and up come from products with nothing else reading them (the MLP's): when those
    // take 16-bit gradients, dgate and dup are written in 16 bits only.
    let half_grads = [gate, up].iter().all(|t| g.takes_half_grad(t));
    g.push_node(
        &out,
        vec![gate.clone(), up.clone()],
        Box::new(move |g, dout| {
            let (dgate, dup) = match half_grads {
                true => backward_half(g, kind, &half, dout, (rows, inner))?,
                false => backward(g, kind, &Saved::Half(half.clone()), dout, (rows, inner))?,
            };
            Ok(vec![Some(dgate), Some(dup)])
        }),
    );
    Ok(out)
}

/// `(dgate, dup)` [.., I] in the saved 16-bit type only, from the saved 16-bit gate and up and
/// an f32 dout: the values the f32 backward's twins hold (same kernel, f32 stores off).
fn backward_half(
    g: &Graph<'_>,
    kind: Glu,
    half: &[Tensor; 2],
    dout: &Tensor,
    ri: (usize, usize),
) -> Result<(Tensor, Tensor)> {
    let (dgate, dup) = (g.empty_as(dout.shape(), half[0].dtype())?, g.empty_as(dout.shape(), half[0].dtype())?);
    let ins = (half.each_ref().map(twin_of), dout.view());
    g.record(|rec| k::backward_saved16_twin_only(rec, kind, ins, [twin_of(&dgate), twin_of(&dup)], ri))?;
    Ok((dgate, dup))
}

/// What the backward of separate gate and up keeps: the f32 tensors, or their 16-bit copies.
enum Saved {
    Wide(Tensor, Tensor),
    Half([Tensor; 2]),
}

fn twin_of(t: &Tensor) -> Twin<'_> {
    Twin { view: t.view(), dtype: t.dtype() }
}

/// `(dgate, dup)` [.., I] f32 from dout [.., I]; under autocast with 16-bit twins for the gate
/// and up projections' backward products.
fn backward(g: &Graph<'_>, kind: Glu, saved: &Saved, dout: &Tensor, ri: (usize, usize)) -> Result<(Tensor, Tensor)> {
    let shape = dout.shape();
    let (dgate, dup) = (g.empty(shape)?, g.empty(shape)?);
    let outs = (dgate.view(), dup.view());
    let twins = [crate::ops::cast::grad_twin(g, &dgate)?, crate::ops::cast::grad_twin(g, &dup)?];
    match (saved, twins) {
        (Saved::Half(half), twins) => {
            // Twins of the saved type even if autocast was turned off since (then not kept).
            let [tg, tu] = match twins {
                [Some(a), Some(b)] => [a, b],
                _ => [g.empty_as(shape, half[0].dtype())?, g.empty_as(shape, half[0].dtype())?],
            };
            let ins = (half.each_ref().map(twin_of), dout.view());
            g.record(|rec| k::backward_saved16(rec, kind, ins, outs, [twin_of(&tg), twin_of(&tu)], ri))?;
        }
        (Saved::Wide(sg, su), [Some(tg), Some(tu)]) => {
            let ins = (sg.view(), su.view(), dout.view());
            g.record(|rec| k::backward_twin(rec, kind, ins, outs, [twin_of(&tg), twin_of(&tu)], ri))?;
        }
        (Saved::Wide(sg, su), _) => {
            let (rows, inner) = ri;
            let (sg, su, dv) = (sg.view(), su.view(), dout.view());
            g.record(|rec| k::backward(rec, kind, sg, su, dv, outs.0, outs.1, rows, inner, DType::F32))?;
        }
    }
    Ok((dgate, dup))
}

/// `out = f(gate_up[.., :I]) * gate_up[.., I:]`; gate_up [.., 2I], out [.., I].
pub fn glu_fused(g: &Graph<'_>, gate_up: &Tensor, kind: Glu) -> Result<Tensor> {
    let Some((shape, rows, inner)) = fused_shape(gate_up) else {
        return Err(shape_error(format!("gate_up {:?} needs an even last dim", gate_up.shape())));
    };
    let out = g.output(&shape, &[gate_up])?;
    record_forward(g, kind, (gate_up, None), &out, (rows, inner))?;
    let saved = gate_up.clone();
    push_one_kernel_grad(g, &out, gate_up, move |rec, dout, dgate_up| {
        k::backward_fused(rec, kind, saved.view(), dout, dgate_up, rows, inner, DType::F32)
    });
    Ok(out)
}

/// [`glu_fused`] of the training forward's packed gate/up product (`gate_up [.., 2I]`) for the
/// down projection, its only reader, under autocast: as [`glu`] / [`glu_for_product`] do for
/// separate gate and up, gate_up is saved in 16 bits, the output is the 16-bit tensor down
/// reads (or f32 with its twin), and the backward writes dgate_up `[.., 2I]` in the packed
/// layout the gate/up product's one backward product reads (no concat): in 16 bits only when
/// that product takes 16-bit gradients, else in f32 with its 16-bit twin. The values are those
/// of the separate path. Else (no autocast, inference, a checkpointed forward) [`glu_fused`].
pub fn glu_fused_for_product(g: &Graph<'_>, gate_up: &Tensor, kind: Glu) -> Result<Tensor> {
    let shaped = fused_shape(gate_up).filter(|_| gate_up.dtype() == DType::F32);
    let Some((shape, rows, inner)) = shaped else { return glu_fused(g, gate_up, kind) };
    if let Some(dt) = crate::ops::cast::inference_half_output(g, rows) {
        return inference_half(g, gate_up, kind, (&shape, rows, inner), dt);
    }
    let trains = g.grad_enabled() && !g.discarding_nodes() && gate_up.requires_grad();
    let Some(dt) = g.autocast().filter(|_| trains) else {
        return glu_fused(g, gate_up, kind);
    };
    let (out, twin) = match crate::ops::cast::half_output_for_rows(g, rows) {
        Some(dt) => (g.output_as(&shape, dt, &[gate_up])?, None),
        None => {
            let out = g.output(&shape, &[gate_up])?;
            let twin = crate::ops::cast::twin(g, &out)?;
            (out, twin)
        }
    };
    // gate_up saved in 16 bits whether the forward kernel writes the copy or (no twins) a cast
    // does: the backward reads the same saved values either way.
    let saved = g.empty_as(gate_up.shape(), dt)?;
    g.record(|rec| {
        let (gu, save) = ((gate_up.view(), None), Some(halves(&saved, inner)));
        match &twin {
            Some(t) => k::forward_twin(rec, kind, gu, out.view(), twin_of(t), save, rows, inner),
            None if out.dtype() != DType::F32 => {
                k::forward_twin_only(rec, kind, gu, twin_of(&out), save, (rows, inner))
            }
            None => {
                k::forward_fused(rec, kind, gate_up.view(), out.view(), rows, inner, DType::F32)?;
                cast_kernel(rec, gate_up.view(), DType::F32, saved.view(), dt)
            }
        }
    })?;
    if out.dtype() != DType::F32 {
        crate::ops::cast::takes_wide_grad(g, &out);
    }
    let half_grad = g.takes_half_grad(gate_up);
    g.push_node(
        &out,
        vec![gate_up.clone()],
        Box::new(move |g, dout| {
            let dout =
                if dout.dtype() == DType::F32 { dout.clone() } else { crate::ops::cast::cast(g, dout, DType::F32)? };
            let ri = (rows, inner);
            if half_grad {
                let d16 = g.empty_as(saved.shape(), dt)?;
                let ins = (twin_of(&saved), dout.view());
                g.record(|rec| k::backward_fused_saved16(rec, kind, ins, None, twin_of(&d16), ri))?;
                return Ok(vec![Some(d16)]);
            }
            let d = g.empty(saved.shape())?;
            // The twin the product's backward reads (`narrow`); not kept if autocast is off now.
            let d16 = match crate::ops::cast::grad_twin(g, &d)? {
                Some(t) => t,
                None => g.empty_as(saved.shape(), dt)?,
            };
            let ins = (twin_of(&saved), dout.view());
            g.record(|rec| k::backward_fused_saved16(rec, kind, ins, Some(d.view()), twin_of(&d16), ri))?;
            Ok(vec![Some(d)])
        }),
    );
    Ok(out)
}

/// The gate and up halves of a 16-bit gate_up `[.., 2 inner]` (up: the view `inner` values on).
fn halves(t: &Tensor, inner: usize) -> [Twin<'_>; 2] {
    let v = t.view();
    let off = (inner as u64 * t.dtype().bytes()).min(v.len);
    let up = vkformers_vk::BufferView { buffer: v.buffer, offset: v.offset + off, len: v.len - off };
    [twin_of(t), Twin { view: up, dtype: t.dtype() }]
}

/// `(out shape, rows, inner)` of a fused GLU over `gate_up [.., 2I]` (out `[.., I]`), or None
/// when gate_up has no dims or an odd last one.
fn fused_shape(gate_up: &Tensor) -> Option<(Vec<usize>, usize, usize)> {
    let two_inner = gate_up.last_dim();
    if gate_up.shape().is_empty() || !two_inner.is_multiple_of(2) {
        return None;
    }
    let mut shape = gate_up.shape().to_vec();
    if let Some(last) = shape.last_mut() {
        *last = two_inner / 2;
    }
    Some((shape, gate_up.rows(), two_inner / 2))
}

/// [`glu_fused_for_product`] in inference where down reads a 16-bit twin (a prefill, a decode
/// step past the GEMV's rows, under autocast: `cast::inference_half_output` gave `dt`): the
/// twin alone, no f32 `[.., I]` output (the largest of a prefill's per-column activations after
/// gate_up itself).
fn inference_half(
    g: &Graph<'_>,
    gate_up: &Tensor,
    kind: Glu,
    (shape, rows, inner): (&[usize], usize, usize),
    dt: DType,
) -> Result<Tensor> {
    let out = g.empty_as(shape, dt)?;
    g.record(|rec| k::forward_twin_only(rec, kind, (gate_up.view(), None), twin_of(&out), None, (rows, inner)))?;
    Ok(out)
}

/// The forward kernel of separate gate and up (`up` given) or a fused gate_up, f32; under
/// autocast it also writes the 16-bit copy the down projection reads (no cast) and, for
/// separate gate and up whose output takes gradients, 16-bit copies of them for the backward
/// (returned).
fn record_forward(
    g: &Graph<'_>,
    kind: Glu,
    (gate, up): (&Tensor, Option<&Tensor>),
    out: &Tensor,
    (rows, inner): (usize, usize),
) -> Result<Option<[Tensor; 2]>> {
    let twin = crate::ops::cast::twin(g, out)?;
    // Under autocast in training the backward of separate gate and up reads 16-bit copies of
    // them, with the twins or without (then cast after the f32 forward: the same values).
    let trains = g.grad_enabled() && out.requires_grad() && !g.discarding_nodes();
    let keep = g.autocast().filter(|_| up.is_some() && trains);
    let saved =
        keep.map(|dt| -> Result<[Tensor; 2]> { Ok([g.empty_as(gate.shape(), dt)?, g.empty_as(gate.shape(), dt)?]) });
    let saved = saved.transpose()?;
    g.record(|rec| match (&twin, up) {
        (Some(t), _) => {
            let save = saved.as_ref().map(|s| s.each_ref().map(twin_of));
            let ins = (gate.view(), up.map(Tensor::view));
            k::forward_twin(rec, kind, ins, out.view(), twin_of(t), save, rows, inner)
        }
        (None, Some(up)) => {
            k::forward(rec, kind, gate.view(), up.view(), out.view(), rows, inner, DType::F32)?;
            for (x, s) in [gate, up].into_iter().zip(saved.iter().flatten()) {
                cast_kernel(rec, x.view(), DType::F32, s.view(), s.dtype())?;
            }
            Ok(())
        }
        (None, None) => k::forward_fused(rec, kind, gate.view(), out.view(), rows, inner, DType::F32),
    })?;
    Ok(saved)
}

fn shape_error(message: String) -> VkError {
    VkError::Kernel { kernel: "tensor glu".into(), message }
}
