//! Gradient of learned attention sinks (`shaders/attention/sink_grad.comp`). The forwards fold
//! head h's sink logit `s_h` into the saved lse (`lse' = logaddexp(lse, s_h)`), so the usual
//! backward kernels already give dq, dk, dv; the sink itself, one softmax entry with value 0 and
//! probability `P_s = e^(s_h − lse')`, gets `dS_s = P_s (0 − delta)`, summed over every row:
//! `ds_h = −Σ_{b,i} delta[b, h, i] · e^(s_h − lse'[b, h, i])`.

use vkformers_vk::{read, write, BufferView, Recorder, Result};

use super::{check_view, fail, Shape, MAX_GROUPS};
use crate::code::{self, AttentionSinkGradPush};
use crate::launch::dispatch;

/// Writes `ds` [Hq] (overwritten) from the forward's `lse` and the backward's `delta`
/// [B, Hq, Tq] and the sinks [Hq]; record after [`super::backward`] (or its cm2 twin), which
/// writes delta. One workgroup per head, a fixed reduction order: deterministic.
pub fn backward(
    rec: &mut Recorder,
    (lse, delta): (BufferView<'_>, BufferView<'_>),
    sinks: BufferView<'_>,
    ds: BufferView<'_>,
    s: &Shape,
) -> Result<()> {
    let code = &code::ATTENTION_SINK_GRAD;
    let rows = u64::from(s.batch) * u64::from(s.hq) * u64::from(s.tq);
    if rows == 0 || rows >= 1 << 32 || s.hq > MAX_GROUPS {
        return Err(fail(code.name, format!("shape {s:?}: empty, or beyond 2^32 rows / 65535 heads")));
    }
    check_view(code.name, "lse [B, Hq, Tq]", &lse, rows)?;
    check_view(code.name, "delta [B, Hq, Tq]", &delta, rows)?;
    check_view(code.name, "sinks [Hq]", &sinks, u64::from(s.hq))?;
    check_view(code.name, "ds [Hq]", &ds, u64::from(s.hq))?;
    let push = AttentionSinkGradPush { batch: s.batch, hq: s.hq, tq: s.tq };
    dispatch(rec, code, &[], &[read(lse), read(delta), read(sinks), write(ds)], &push, [s.hq, 1, 1])
}
