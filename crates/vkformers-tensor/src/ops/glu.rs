//! Gated linear units `out = f(gate) * up` with `f` SiLU (SwiGLU) or GELU (GeGLU, exact or
//! tanh), from separate gate/up tensors [.., I] or one fused gate_up [.., 2I] whose first I
//! columns are the gate (HF Phi-3's `gate_up_proj(x).chunk(2, dim=-1)`).
//! Backward: `dgate = dout * up * f'(gate)`, `dup = dout * f(gate)`, from the saved inputs.

use vkformers_kernels::dtype::{DType, Twin};
use vkformers_kernels::glu as k;
pub use vkformers_kernels::glu::Glu;

use crate::{Graph, Result, Tensor, VkError};

/// `out = f(gate) * up`; gate, up, out [.., I] (gate and up of one shape).
pub fn glu(g: &Graph<'_>, gate: &Tensor, up: &Tensor, kind: Glu) -> Result<Tensor> {
    if gate.shape() != up.shape() || gate.shape().is_empty() {
        return Err(shape_error(format!("gate {:?} and up {:?} must have one shape", gate.shape(), up.shape())));
    }
    let (rows, inner) = (gate.rows(), gate.last_dim());
    let out = g.output(gate.shape(), &[gate, up])?;
    record_forward(g, kind, (gate, Some(up)), &out, (rows, inner))?;
    let (sg, su) = (gate.clone(), up.clone());
    g.push_node(
        &out,
        vec![gate.clone(), up.clone()],
        Box::new(move |g, dout| {
            let (dgate, dup) = (g.empty(sg.shape())?, g.empty(su.shape())?);
            // Under autocast the 16-bit copies the gate / up projections' backward reads.
            let twins = [crate::ops::cast::grad_twin(g, &dgate)?, crate::ops::cast::grad_twin(g, &dup)?];
            if let [Some(tg), Some(tu)] = &twins {
                let t = [tg, tu].map(|t| Twin { view: t.view(), dtype: t.dtype() });
                let ins = (sg.view(), su.view(), dout.view());
                g.record(|rec| k::backward_twin(rec, kind, ins, (dgate.view(), dup.view()), t, (rows, inner)))?;
                return Ok(vec![Some(dgate), Some(dup)]);
            }
            g.record(|rec| {
                k::backward(
                    rec,
                    kind,
                    sg.view(),
                    su.view(),
                    dout.view(),
                    dgate.view(),
                    dup.view(),
                    rows,
                    inner,
                    DType::F32,
                )
            })?;
            Ok(vec![Some(dgate), Some(dup)])
        }),
    );
    Ok(out)
}

/// `out = f(gate_up[.., :I]) * gate_up[.., I:]`; gate_up [.., 2I], out [.., I].
pub fn glu_fused(g: &Graph<'_>, gate_up: &Tensor, kind: Glu) -> Result<Tensor> {
    let two_inner = gate_up.last_dim();
    if gate_up.shape().is_empty() || !two_inner.is_multiple_of(2) {
        return Err(shape_error(format!("gate_up {:?} needs an even last dim", gate_up.shape())));
    }
    let (rows, inner) = (gate_up.rows(), two_inner / 2);
    let mut shape = gate_up.shape().to_vec();
    if let Some(last) = shape.last_mut() {
        *last = inner;
    }
    let out = g.output(&shape, &[gate_up])?;
    record_forward(g, kind, (gate_up, None), &out, (rows, inner))?;
    let saved = gate_up.clone();
    g.push_node(
        &out,
        vec![gate_up.clone()],
        Box::new(move |g, dout| {
            let dgate_up = g.empty(saved.shape())?;
            g.record(|rec| {
                k::backward_fused(rec, kind, saved.view(), dout.view(), dgate_up.view(), rows, inner, DType::F32)
            })?;
            Ok(vec![Some(dgate_up)])
        }),
    );
    Ok(out)
}

/// The forward kernel of separate gate and up (`up` given) or a fused gate_up, f32; under
/// autocast it also writes the 16-bit copy the down projection reads (no cast).
fn record_forward(
    g: &Graph<'_>,
    kind: Glu,
    (gate, up): (&Tensor, Option<&Tensor>),
    out: &Tensor,
    (rows, inner): (usize, usize),
) -> Result<()> {
    let twin = crate::ops::cast::twin(g, out)?;
    g.record(|rec| match (&twin, up) {
        (Some(t), _) => {
            let t = Twin { view: t.view(), dtype: t.dtype() };
            k::forward_twin(rec, kind, (gate.view(), up.map(Tensor::view)), out.view(), t, rows, inner)
        }
        (None, Some(up)) => k::forward(rec, kind, gate.view(), up.view(), out.view(), rows, inner, DType::F32),
        (None, None) => k::forward_fused(rec, kind, gate.view(), out.view(), rows, inner, DType::F32),
    })
}

fn shape_error(message: String) -> VkError {
    VkError::Kernel { kernel: "tensor glu".into(), message }
}
