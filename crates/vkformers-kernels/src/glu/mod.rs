//! Fused gated MLP activations: SwiGLU `out = silu(gate) * up` and GeGLU
//! `out = gelu(gate) * up` (exact or tanh GELU), forward and backward, for separate
//! gate/up tensors [rows, inner] or one fused gate_up tensor [rows, 2 inner] whose first
//! `inner` columns are the gate and last `inner` the up projection (HF Phi-3's
//! `gate_up_proj(x).chunk(2, dim=-1)`). Every tensor of a launch has one storage type `DType`
//! (f32, f16 or bf16); math is f32.

pub mod reference;

use vkformers_vk::{read, write, Arg, BufferView, KernelCode, Recorder, Result};

use crate::activation::Activation;
use crate::code;
use crate::code::{GluBackwardPush, GluBackwardPushOut16, GluForwardPush, GluForwardPushTwin};
use crate::dtype::{DType, Twin};
use crate::launch::{count, dispatch_elems, expect_len, expect_lens, pick, skip, Push};

/// A gated linear unit flavour.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Glu {
    /// silu(gate) * up.
    SwiGlu,
    /// gelu(gate) * up, exact GELU.
    GeGlu,
    /// gelu_tanh(gate) * up.
    GeGluTanh,
}

impl Glu {
    /// Every flavour, for tests.
    pub const ALL: [Glu; 3] = [Glu::SwiGlu, Glu::GeGlu, Glu::GeGluTanh];

    /// The activation applied to the gate.
    pub fn activation(self) -> Activation {
        match self {
            Glu::SwiGlu => Activation::Silu,
            Glu::GeGlu => Activation::Gelu,
            Glu::GeGluTanh => Activation::GeluTanh,
        }
    }

    /// This flavour's kernels.
    fn codes(self) -> Codes {
        use code::*;
        match self {
            Glu::SwiGlu => Codes {
                plain: [
                    [&GLU_FORWARD_SWIGLU, &GLU_FORWARD_SWIGLU_F16, &GLU_FORWARD_SWIGLU_BF16],
                    [&GLU_BACKWARD_SWIGLU, &GLU_BACKWARD_SWIGLU_F16, &GLU_BACKWARD_SWIGLU_BF16],
                ],
                twin: [&GLU_FORWARD_SWIGLU_TWIN, &GLU_BACKWARD_SWIGLU_TWIN, &GLU_BACKWARD_SWIGLU_SAVED16],
            },
            Glu::GeGlu => Codes {
                plain: [
                    [&GLU_FORWARD_GEGLU, &GLU_FORWARD_GEGLU_F16, &GLU_FORWARD_GEGLU_BF16],
                    [&GLU_BACKWARD_GEGLU, &GLU_BACKWARD_GEGLU_F16, &GLU_BACKWARD_GEGLU_BF16],
                ],
                twin: [&GLU_FORWARD_GEGLU_TWIN, &GLU_BACKWARD_GEGLU_TWIN, &GLU_BACKWARD_GEGLU_SAVED16],
            },
            Glu::GeGluTanh => Codes {
                plain: [
                    [&GLU_FORWARD_GEGLU_TANH, &GLU_FORWARD_GEGLU_TANH_F16, &GLU_FORWARD_GEGLU_TANH_BF16],
                    [&GLU_BACKWARD_GEGLU_TANH, &GLU_BACKWARD_GEGLU_TANH_F16, &GLU_BACKWARD_GEGLU_TANH_BF16],
                ],
                twin: [&GLU_FORWARD_GEGLU_TANH_TWIN, &GLU_BACKWARD_GEGLU_TANH_TWIN, &GLU_BACKWARD_GEGLU_TANH_SAVED16],
            },
        }
    }
}

/// The kernels of one flavour.
struct Codes {
    /// One storage type throughout: `[forward, backward]`, each `[f32, f16, bf16]`.
    plain: [[&'static KernelCode; 3]; 2],
    /// f32 kernels that write 16-bit twins: `[forward _twin, backward _twin, backward _saved16]`.
    twin: [&'static KernelCode; 3],
}

/// Rows of a launch: `rows` rows of `inner` outputs, read from rows of `stride` elements
/// (`inner`: separate gate and up; `2 inner`: a fused gate_up).
type Extent = (usize, usize, usize);

/// The checks and dispatch the plain (one storage type) forward and backward share, after their
/// own checks of the inputs: `rows * stride` counts below 2^32, `last` (the forward's out, the
/// backward's dout) holds `[rows, inner]` of `dt`; one thread per `[rows, inner]` element.
fn launch_plain<P: Push>(
    rec: &mut Recorder,
    k: &'static KernelCode,
    (rows, inner, stride): Extent,
    (last, dt): ((&str, &BufferView<'_>), DType),
    args: &[Arg<'_>],
    push: P,
) -> Result<()> {
    let n = count(k, &[rows, inner])?;
    count(k, &[rows, stride])?;
    expect_len(k, last.0, last.1, n.into(), dt)?;
    dispatch_elems(rec, k, args, &push, n.into())
}

/// The forward kernel `k` over gate and up (checked by the caller) into `out`.
fn launch_forward(
    rec: &mut Recorder,
    k: &'static KernelCode,
    (gate, up, out): (BufferView<'_>, BufferView<'_>, BufferView<'_>),
    (rows, inner, stride): Extent,
    dt: DType,
) -> Result<()> {
    let p = GluForwardPush { rows: rows as u32, inner: inner as u32, stride: stride as u32 };
    let args = [read(gate), read(up), write(out)];
    launch_plain(rec, k, (rows, inner, stride), (("out", &out), dt), &args, p)
}

/// [`forward`] of f32 tensors (separate gate and up `[rows, inner]`, or the fused gate_up
/// `[rows, 2 inner]` when `up` is `None`) that also writes `out` in 16 bits into `twin`
/// (rounded as `dtype::cast` rounds it): the copy the down projection reads, with no cast
/// dispatch. With `save` (separate gate and up only) gate and up are written in 16 bits too
/// (the twin's type), for a backward that keeps those ([`backward_saved16`]).
#[allow(clippy::too_many_arguments)]
pub fn forward_twin(
    rec: &mut Recorder,
    kind: Glu,
    (gate, up): (BufferView<'_>, Option<BufferView<'_>>),
    out: BufferView<'_>,
    twin: Twin<'_>,
    save: Option<[Twin<'_>; 2]>,
    rows: usize,
    inner: usize,
) -> Result<()> {
    forward_twins(rec, kind, (gate, up), Some(out), (twin, save), (rows, inner))
}

/// [`forward_twin`] writing only the 16-bit `twin` (and the saved 16-bit gate and up), not the
/// f32 `out`: training under autocast when the down projection is the output's only reader
/// (it reads the twin; the backward recomputes from the saved inputs), so the f32
/// `[rows, inner]` write (4 bytes an element) is skipped. Same kernel, the f32 store off.
pub fn forward_twin_only(
    rec: &mut Recorder,
    kind: Glu,
    (gate, up): (BufferView<'_>, Option<BufferView<'_>>),
    twin: Twin<'_>,
    save: Option<[Twin<'_>; 2]>,
    (rows, inner): (usize, usize),
) -> Result<()> {
    forward_twins(rec, kind, (gate, up), None, (twin, save), (rows, inner))
}

/// The `_twin` forward kernel; `out` None turns its f32 store off (push constant `save` bit 1).
fn forward_twins(
    rec: &mut Recorder,
    kind: Glu,
    (gate, up): (BufferView<'_>, Option<BufferView<'_>>),
    out: Option<BufferView<'_>>,
    (twin, save): (Twin<'_>, Option<[Twin<'_>; 2]>),
    (rows, inner): (usize, usize),
) -> Result<()> {
    let [k, _, _] = kind.codes().twin;
    let n = count(k, &[rows, inner])?;
    let (gate, up, stride) = match up {
        Some(up) => {
            expect_lens(k, &[("gate", &gate), ("up", &up)], n.into(), DType::F32)?;
            (gate, up, inner)
        }
        None => {
            expect_len(k, "gate_up", &gate, u64::from(count(k, &[rows, 2, inner])?), DType::F32)?;
            (gate, skip(gate, inner as u64, DType::F32), 2 * inner)
        }
    };
    if let Some(out) = &out {
        expect_len(k, "out", out, n.into(), DType::F32)?;
    }
    let half = twin.code(k.name, n.into())?;
    if let Some(saved) = &save {
        if saved.iter().any(|t| t.dtype != twin.dtype) {
            return Err(crate::launch::err(k, "16-bit gate and up of another type than the twin".into()));
        }
        // Saved in the inputs' layout: rows of `stride` (the last row's up ends inner after it).
        for t in saved {
            t.code(k.name, strided_len(rows, inner, stride))?;
        }
    }
    let [g16, u16] = save.map_or([twin.view; 2], |s| s.map(|t| t.view));
    // `save`: bit 0 writes the 16-bit gate and up, bit 1 skips the f32 out (given the twin's
    // address then, never written).
    let flags = u32::from(save.is_some()) | (u32::from(out.is_none()) << 1);
    let p =
        GluForwardPushTwin { rows: rows as u32, inner: inner as u32, stride: stride as u32, twin: half, save: flags };
    let args = [read(gate), read(up), write(out.unwrap_or(twin.view)), write(twin.view), write(g16), write(u16)];
    dispatch_elems(rec, k, &args, &p, n.into())
}

/// [`backward_twin`] from the 16-bit gate and up [`forward_twin`] saved (`saved`, of the twins'
/// type): dout, dgate, dup [rows, inner] f32, dgate and dup written to `twins` too.
pub fn backward_saved16(
    rec: &mut Recorder,
    kind: Glu,
    (saved, dout): ([Twin<'_>; 2], BufferView<'_>),
    (dgate, dup): (BufferView<'_>, BufferView<'_>),
    twins: [Twin<'_>; 2],
    (rows, inner): (usize, usize),
) -> Result<()> {
    backward_saved16_strided(rec, kind, (saved, dout), Some((dgate, dup)), twins, (rows, inner, inner))
}

/// [`backward_saved16`] writing dgate and dup only in 16 bits (`twins`), not in f32: training
/// under autocast when the gate and up products, whose backward reads nothing but the 16-bit
/// gradients, are their only consumers. The same kernel with the f32 stores off (push
/// constant `twin` bit 2).
pub fn backward_saved16_twin_only(
    rec: &mut Recorder,
    kind: Glu,
    (saved, dout): ([Twin<'_>; 2], BufferView<'_>),
    twins: [Twin<'_>; 2],
    (rows, inner): (usize, usize),
) -> Result<()> {
    backward_saved16_strided(rec, kind, (saved, dout), None, twins, (rows, inner, inner))
}

/// [`backward_saved16`] of a fused gate_up: from the 16-bit gate_up [rows, 2 inner] the `_twin`
/// forward of a fused input saved (`saved`) and dout [rows, inner] f32, dgate_up [rows, 2 inner]
/// written in 16 bits (`twin`) and, when `wide` is given, in f32 too: the gradient of the
/// training forward's packed gate/up product in its layout, which that product's one backward
/// product reads.
pub fn backward_fused_saved16(
    rec: &mut Recorder,
    kind: Glu,
    (saved, dout): (Twin<'_>, BufferView<'_>),
    wide: Option<BufferView<'_>>,
    twin: Twin<'_>,
    (rows, inner): (usize, usize),
) -> Result<()> {
    let i = inner as u64;
    let saved = [saved, Twin { view: skip(saved.view, i, saved.dtype), dtype: saved.dtype }];
    let twins = [twin, Twin { view: skip(twin.view, i, twin.dtype), dtype: twin.dtype }];
    let wide = wide.map(|d| (d, skip(d, i, DType::F32)));
    backward_saved16_strided(rec, kind, (saved, dout), wide, twins, (rows, inner, 2 * inner))
}

/// Elements a view of `rows` rows of `stride` holds when each row's `inner` values are read
/// (the last row ends `inner` into its stride).
fn strided_len(rows: usize, inner: usize, stride: usize) -> u64 {
    (rows.saturating_sub(1) * stride + inner) as u64
}

/// The saved-16-bit backward kernel over rows of `stride` (inner: separate tensors; 2 inner:
/// fused); `wide` None turns its f32 dgate/dup stores off.
fn backward_saved16_strided(
    rec: &mut Recorder,
    kind: Glu,
    (saved, dout): ([Twin<'_>; 2], BufferView<'_>),
    wide: Option<(BufferView<'_>, BufferView<'_>)>,
    twins: [Twin<'_>; 2],
    (rows, inner, stride): Extent,
) -> Result<()> {
    let [_, _, k] = kind.codes().twin;
    count(k, &[rows, stride])?;
    let n = strided_len(rows, inner, stride);
    let half = one_twin_code(k, &[twins[0], twins[1], saved[0], saved[1]], n, "16-bit gate, up and twins")?;
    let [g16, u16] = saved.map(|t| t.view);
    let only16 = if wide.is_none() { 4 } else { 0 };
    launch_twin_backward(rec, k, (g16, u16, dout), wide, twins, ((rows, inner, stride), half | only16))
}

/// The 16-bit type code shared by every twin in `ts` (each of `n` values), or an error naming
/// `what` when they differ.
fn one_twin_code(k: &KernelCode, ts: &[Twin<'_>], n: u64, what: &str) -> Result<u32> {
    let half = ts[0].code(k.name, n)?;
    for t in &ts[1..] {
        if t.code(k.name, n)? != half {
            return Err(crate::launch::err(k, format!("{what} of different types")));
        }
    }
    Ok(half)
}

/// One launch of an f32 backward kernel writing 16-bit twins of dgate and dup (`_twin`,
/// `_saved16`): checks the f32 views and dispatches; `half` is the twins' type code.
fn launch_twin_backward(
    rec: &mut Recorder,
    k: &'static KernelCode,
    (gate, up, dout): (BufferView<'_>, BufferView<'_>, BufferView<'_>),
    wide: Option<(BufferView<'_>, BufferView<'_>)>,
    twins: [Twin<'_>; 2],
    ((rows, inner, stride), half): (Extent, u32),
) -> Result<()> {
    let n = u64::from(count(k, &[rows, inner])?);
    expect_len(k, "dout", &dout, n, DType::F32)?;
    // No f32 dgate and dup (`half` bit 2): the twins' views stand in, never written.
    let (dgate, dup) = wide.unwrap_or((twins[0].view, twins[1].view));
    if wide.is_some() {
        // Separate tensors: exactly [rows, inner]; a fused dgate_up: its rows of `stride`.
        let need = strided_len(rows, inner, stride) * DType::F32.bytes();
        for (what, v) in [("dgate", &dgate), ("dup", &dup)] {
            match stride == inner {
                true => expect_len(k, what, v, n, DType::F32)?,
                false if v.len < need => {
                    return Err(crate::launch::err(k, format!("{what}: view of {} bytes, need {need}", v.len)))
                }
                false => {}
            }
        }
    }
    let base = GluBackwardPush { rows: rows as u32, inner: inner as u32, stride: stride as u32 };
    let p = GluBackwardPushOut16 { base, twin: half };
    let args = [read(gate), read(up), read(dout), write(dgate), write(dup), write(twins[0].view), write(twins[1].view)];
    dispatch_elems(rec, k, &args, &p, n)
}

/// `out = f(gate) * up`; gate, up, out [rows, inner] (separate tensors) of storage type `dt`.
#[allow(clippy::too_many_arguments)]
pub fn forward(
    rec: &mut Recorder,
    kind: Glu,
    gate: BufferView<'_>,
    up: BufferView<'_>,
    out: BufferView<'_>,
    rows: usize,
    inner: usize,
    dt: DType,
) -> Result<()> {
    let k = pick(rec, dt, kind.codes().plain[0])?;
    let n = u64::from(count(k, &[rows, inner])?);
    expect_lens(k, &[("gate", &gate), ("up", &up)], n, dt)?;
    launch_forward(rec, k, (gate, up, out), (rows, inner, inner), dt)
}

/// `out = f(gate_up[:, :inner]) * gate_up[:, inner:]`; gate_up [rows, 2 inner], out [rows, inner],
/// both of storage type `dt`.
pub fn forward_fused(
    rec: &mut Recorder,
    kind: Glu,
    gate_up: BufferView<'_>,
    out: BufferView<'_>,
    rows: usize,
    inner: usize,
    dt: DType,
) -> Result<()> {
    let k = pick(rec, dt, kind.codes().plain[0])?;
    expect_len(k, "gate_up", &gate_up, u64::from(count(k, &[rows, 2, inner])?), dt)?;
    let up = skip(gate_up, inner as u64, dt);
    launch_forward(rec, k, (gate_up, up, out), (rows, inner, 2 * inner), dt)
}

/// Views of one backward launch: inputs, upstream gradient, gradients written.
struct BackwardViews<'a> {
    gate: BufferView<'a>,
    up: BufferView<'a>,
    dout: BufferView<'a>,
    dgate: BufferView<'a>,
    dup: BufferView<'a>,
}

/// The backward kernel `k` over the views `v` (all but dout checked by the caller).
fn launch_backward(
    rec: &mut Recorder,
    k: &'static KernelCode,
    v: BackwardViews<'_>,
    (rows, inner, stride): Extent,
    dt: DType,
) -> Result<()> {
    let p = GluBackwardPush { rows: rows as u32, inner: inner as u32, stride: stride as u32 };
    let args = [read(v.gate), read(v.up), read(v.dout), write(v.dgate), write(v.dup)];
    launch_plain(rec, k, (rows, inner, stride), (("dout", &v.dout), dt), &args, p)
}

/// Backward of [`forward`]: `dgate = dout * up * f'(gate)`, `dup = dout * f(gate)`;
/// every tensor [rows, inner] of storage type `dt`.
#[allow(clippy::too_many_arguments)]
pub fn backward(
    rec: &mut Recorder,
    kind: Glu,
    gate: BufferView<'_>,
    up: BufferView<'_>,
    dout: BufferView<'_>,
    dgate: BufferView<'_>,
    dup: BufferView<'_>,
    rows: usize,
    inner: usize,
    dt: DType,
) -> Result<()> {
    let k = pick(rec, dt, kind.codes().plain[1])?;
    let n = u64::from(count(k, &[rows, inner])?);
    expect_lens(k, &[("gate", &gate), ("up", &up), ("dgate", &dgate), ("dup", &dup)], n, dt)?;
    launch_backward(rec, k, BackwardViews { gate, up, dout, dgate, dup }, (rows, inner, inner), dt)
}

/// [`backward`] of f32 tensors that also writes `dgate` and `dup` in 16 bits into `twins`
/// (rounded as `dtype::cast` rounds them): the copies the backward products of the gate and up
/// projections read, with no cast dispatch. gate, up, dout, dgate, dup [rows, inner].
pub fn backward_twin(
    rec: &mut Recorder,
    kind: Glu,
    (gate, up, dout): (BufferView<'_>, BufferView<'_>, BufferView<'_>),
    (dgate, dup): (BufferView<'_>, BufferView<'_>),
    twins: [Twin<'_>; 2],
    (rows, inner): (usize, usize),
) -> Result<()> {
    let [_, k, _] = kind.codes().twin;
    let n = u64::from(count(k, &[rows, inner])?);
    expect_lens(k, &[("gate", &gate), ("up", &up)], n, DType::F32)?;
    let half = one_twin_code(k, &twins, n, "the twins of dgate and dup")?;
    launch_twin_backward(rec, k, (gate, up, dout), Some((dgate, dup)), twins, ((rows, inner, inner), half))
}

/// Backward of [`forward_fused`]: writes the fused gradient `dgate_up` [rows, 2 inner]
/// (dgate in the first `inner` columns, dup in the last); dout [rows, inner]; all of storage
/// type `dt`.
#[allow(clippy::too_many_arguments)]
pub fn backward_fused(
    rec: &mut Recorder,
    kind: Glu,
    gate_up: BufferView<'_>,
    dout: BufferView<'_>,
    dgate_up: BufferView<'_>,
    rows: usize,
    inner: usize,
    dt: DType,
) -> Result<()> {
    let k = pick(rec, dt, kind.codes().plain[1])?;
    let n2 = u64::from(count(k, &[rows, 2, inner])?);
    expect_lens(k, &[("gate_up", &gate_up), ("dgate_up", &dgate_up)], n2, dt)?;
    let i = inner as u64;
    let (up, dup) = (skip(gate_up, i, dt), skip(dgate_up, i, dt));
    let views = BackwardViews { gate: gate_up, up, dout, dgate: dgate_up, dup };
    launch_backward(rec, k, views, (rows, inner, 2 * inner), dt)
}
