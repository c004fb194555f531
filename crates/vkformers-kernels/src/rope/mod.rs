//! Rotary position embeddings (RoPE) on `x [batch, seq, heads, head_dim]` (contiguous, stored in
//! [`Rope::dtype`]: f32, f16 or bf16, rotated in f32 math),
//! with int32 positions `pos [batch, seq]` and a host-computed `inv_freq [rotary_dim / 2]`
//! (f32). Pair `i` rotates by `theta = pos * inv_freq[i]` (an f32 product), scaled by `mscale`
//! (YaRN / LongRoPE attention factor; 1 otherwise). Dims `rotary_dim..head_dim` pass through
//! (partial rotary). The backward is the transpose: rotation by `-theta` with the same scale.

pub mod reference;

use vkformers_vk::{read, read_write, write, BufferView, KernelCode, Recorder, Result, VkError};

use crate::code;
use crate::code::{RopeRopePush, RopeRopePushTwin};
use crate::dtype::{DType, Twin};
use crate::launch::dispatch_elems;

/// Which dims form a rotation pair.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum RopeLayout {
    /// Pairs `(i, i + R/2)`: Llama, NeoX (`rotate_half`).
    HalfSplit,
    /// Pairs `(2i, 2i + 1)`: GPT-J, Cohere.
    Interleaved,
}

/// Shape and options of a RoPE application.
#[derive(Clone, Copy, Debug)]
pub struct Rope {
    pub batch: u32,
    pub seq: u32,
    pub heads: u32,
    pub head_dim: u32,
    /// Rotated dims `R` (even, `<= head_dim`); `inv_freq` holds `R / 2` values.
    pub rotary_dim: u32,
    pub layout: RopeLayout,
    /// Multiplies cos and sin (1.0 for plain RoPE).
    pub mscale: f32,
    /// Storage type of `x`, `out`, `dy`, `dx` (positions are int32, `inv_freq` f32).
    pub dtype: DType,
}

impl Rope {
    /// Number of `head_dim` rows: `batch * seq * heads`.
    pub fn rows(&self) -> u64 {
        u64::from(self.batch) * u64::from(self.seq) * u64::from(self.heads)
    }
}

/// The `rope/rope` variant of a storage type.
fn kernel(dtype: DType) -> &'static KernelCode {
    crate::launch::variant(dtype, [&code::ROPE_ROPE_F32, &code::ROPE_ROPE_F16, &code::ROPE_ROPE_BF16])
}

/// Errors name the kernel `rope/rope`, or `rope/rope:f16` / `rope/rope:bf16`.
fn err(p: &Rope, message: String) -> VkError {
    crate::launch::err_plain(kernel(p.dtype), message)
}

/// Checks that `v` holds `elems` values of `size` bytes.
fn check_len(p: &Rope, what: &str, v: &BufferView<'_>, elems: u64, size: u64) -> Result<()> {
    crate::launch::expect_values(kernel(p.dtype), what, v, elems, size)
}

/// Validates the shape and every view; returns the number of values of `x`.
fn check(p: &Rope, x: &BufferView<'_>, pos: &BufferView<'_>, inv_freq: &BufferView<'_>) -> Result<u64> {
    let n = p.rows() * u64::from(p.head_dim);
    if p.rows() == 0
        || p.head_dim == 0
        || !p.rotary_dim.is_multiple_of(2)
        || p.rotary_dim > p.head_dim
        || n > u64::from(u32::MAX)
    {
        return Err(err(
            p,
            format!(
                "shape [{}, {}, {}, {}] with rotary dim {}: need non-empty dims, an even rotary dim <= head dim, \
             and fewer than 2^32 elements",
                p.batch, p.seq, p.heads, p.head_dim, p.rotary_dim
            ),
        ));
    }
    check_len(p, "x", x, n, p.dtype.bytes())?;
    check_len(p, "pos", pos, u64::from(p.batch) * u64::from(p.seq), 4)?;
    check_len(p, "inv_freq", inv_freq, u64::from(p.rotary_dim / 2), 4)?;
    Ok(n)
}

/// Records one `rope/rope` dispatch; `out` `None` means in place on `x`.
fn dispatch(
    rec: &mut Recorder,
    p: &Rope,
    x: BufferView<'_>,
    pos: BufferView<'_>,
    inv_freq: BufferView<'_>,
    out: Option<BufferView<'_>>,
    sign: f32,
) -> Result<()> {
    let n = check(p, &x, &pos, &inv_freq)?;
    if let Some(o) = &out {
        check_len(p, "out", o, n, p.dtype.bytes())?;
    }
    let copy_tail = out.is_some();
    let units = u64::from(p.rotary_dim / 2) + if copy_tail { u64::from(p.head_dim - p.rotary_dim) } else { 0 };
    let work = p.rows() * units;
    if work == 0 {
        return Ok(());
    }
    let params = rope_push(p, copy_tail, sign);
    let args = match out {
        Some(o) => [read(x), write(o), read(pos), read(inv_freq)],
        None => [read_write(x), read_write(x), read(pos), read(inv_freq)],
    };
    dispatch_elems(rec, kernel(p.dtype), &args, &params, work)
}

/// `out = rope(x)`: rotates each pair by `theta = pos * inv_freq[i]`, scaled by `mscale`.
pub fn rope_forward(
    rec: &mut Recorder,
    p: &Rope,
    x: BufferView<'_>,
    pos: BufferView<'_>,
    inv_freq: BufferView<'_>,
    out: BufferView<'_>,
) -> Result<()> {
    dispatch(rec, p, x, pos, inv_freq, Some(out), 1.0)
}

/// [`rope_forward`] of f32 tensors that also writes `out` in 16 bits into `twin` (rounded as
/// `dtype::cast` rounds it): the copy 16-bit attention reads, with no cast dispatch.
pub fn rope_forward_twin(
    rec: &mut Recorder,
    p: &Rope,
    (x, pos, inv_freq): (BufferView<'_>, BufferView<'_>, BufferView<'_>),
    out: BufferView<'_>,
    twin: Twin<'_>,
) -> Result<()> {
    dispatch_twin(rec, p, (x, pos, inv_freq), (out, twin), 1.0)
}

/// [`rope_forward_twin`] writing only the 16-bit `twin`, not the f32 out: training under
/// autocast when 16-bit attention is the output's only reader (the backward needs no saved
/// output). The same kernel with the f32 store off (push constant `twin` bit 2).
pub fn rope_forward_twin_only(
    rec: &mut Recorder,
    p: &Rope,
    (x, pos, inv_freq): (BufferView<'_>, BufferView<'_>, BufferView<'_>),
    twin: Twin<'_>,
) -> Result<()> {
    dispatch_twin_of(rec, p, (x, pos, inv_freq), (None, twin), (1.0, false))
}

/// [`rope_backward`] of f32 tensors that also writes `dx` in 16 bits into `twin` (rounded as
/// `dtype::cast` rounds it): the copy the q / k projection's backward products read.
pub fn rope_backward_twin(
    rec: &mut Recorder,
    p: &Rope,
    (dy, pos, inv_freq): (BufferView<'_>, BufferView<'_>, BufferView<'_>),
    dx: BufferView<'_>,
    twin: Twin<'_>,
) -> Result<()> {
    dispatch_twin(rec, p, (dy, pos, inv_freq), (dx, twin), -1.0)
}

/// [`rope_backward_twin`] of a 16-bit `dy` (in the twin's type, widened exactly as a cast
/// would): `dx` in f32 and in 16 bits from the gradient attention's backward wrote in 16 bits,
/// with no widening cast before. `p.dtype` is f32 (the type of `dx`).
pub fn rope_backward_twin_in16(
    rec: &mut Recorder,
    p: &Rope,
    (dy, pos, inv_freq): (BufferView<'_>, BufferView<'_>, BufferView<'_>),
    dx: BufferView<'_>,
    twin: Twin<'_>,
) -> Result<()> {
    dispatch_twin_of(rec, p, (dy, pos, inv_freq), (Some(dx), twin), (-1.0, true))
}

/// [`rope_backward_twin_in16`] writing dx only in 16 bits (`twin`), not in f32: training under
/// autocast when the q / k product, whose backward reads nothing but the 16-bit gradient,
/// produced the rotated input. The same kernel with the f32 store off (`twin` bit 2).
pub fn rope_backward_in16_twin_only(
    rec: &mut Recorder,
    p: &Rope,
    (dy, pos, inv_freq): (BufferView<'_>, BufferView<'_>, BufferView<'_>),
    twin: Twin<'_>,
) -> Result<()> {
    dispatch_twin_of(rec, p, (dy, pos, inv_freq), (None, twin), (-1.0, true))
}

/// [`rope_forward_twin_only`] reading x as token rows of `x_stride` elements (x: the view from
/// the part's first column of a packed `[tokens, x_stride]` tensor): training reads q and k in
/// place from the packed q/k/v product's f32 output, with no split. The twin is contiguous.
pub fn rope_forward_twin_only_strided(
    rec: &mut Recorder,
    p: &Rope,
    (x, pos, inv_freq): (BufferView<'_>, BufferView<'_>, BufferView<'_>),
    x_stride: u32,
    twin: Twin<'_>,
) -> Result<()> {
    let strides = (x_stride, p.heads * p.head_dim);
    dispatch_strided(rec, p, (x, pos, inv_freq), (None, twin), (1.0, false), strides)
}

/// [`rope_backward_in16_twin_only`] writing dx as token rows of `out_stride` elements (`twin`:
/// the view from the part's first column of a packed `[tokens, out_stride]` 16-bit gradient):
/// training writes dq and dk straight into their columns of the packed q/k/v product's
/// gradient, which one backward product reads. dy is contiguous.
pub fn rope_backward_in16_twin_only_strided(
    rec: &mut Recorder,
    p: &Rope,
    (dy, pos, inv_freq): (BufferView<'_>, BufferView<'_>, BufferView<'_>),
    twin: Twin<'_>,
    out_stride: u32,
) -> Result<()> {
    let strides = (p.heads * p.head_dim, out_stride);
    dispatch_strided(rec, p, (dy, pos, inv_freq), (None, twin), (-1.0, true), strides)
}

/// One out-of-place `rope/rope:twin_f32` dispatch (`sign` 1: forward, -1: backward).
fn dispatch_twin(
    rec: &mut Recorder,
    p: &Rope,
    xs: (BufferView<'_>, BufferView<'_>, BufferView<'_>),
    outs: (BufferView<'_>, Twin<'_>),
    sign: f32,
) -> Result<()> {
    dispatch_twin_of(rec, p, xs, (Some(outs.0), outs.1), (sign, false))
}

/// [`dispatch_twin`], or with `in16` `rope/rope:twin_in16`: x in the twin's 16-bit type; with
/// no f32 `out`, the twin alone is written.
fn dispatch_twin_of(
    rec: &mut Recorder,
    p: &Rope,
    xs: (BufferView<'_>, BufferView<'_>, BufferView<'_>),
    outs: (Option<BufferView<'_>>, Twin<'_>),
    (sign, in16): (f32, bool),
) -> Result<()> {
    let row = p.heads * p.head_dim;
    dispatch_strided(rec, p, xs, outs, (sign, in16), (row, row))
}

/// [`dispatch_twin_of`] with x and out (and the twin) as token rows of `x_stride` and
/// `out_stride` elements (`heads * head_dim`: contiguous, checked exactly; wider: the views
/// must reach the last token row's heads).
fn dispatch_strided(
    rec: &mut Recorder,
    p: &Rope,
    (x, pos, inv_freq): (BufferView<'_>, BufferView<'_>, BufferView<'_>),
    (out, twin): (Option<BufferView<'_>>, Twin<'_>),
    (sign, in16): (f32, bool),
    (x_stride, out_stride): (u32, u32),
) -> Result<()> {
    let k = if in16 { &code::ROPE_ROPE_TWIN_IN16 } else { &code::ROPE_ROPE_TWIN_F32 };
    if p.dtype != DType::F32 {
        return Err(crate::launch::err_plain(k, format!("a 16-bit twin of {:?} storage", p.dtype)));
    }
    let row = p.heads * p.head_dim;
    if x_stride < row || out_stride < row {
        return Err(crate::launch::err_plain(k, format!("token strides {x_stride}, {out_stride} under {row}")));
    }
    // x is checked in its own storage type (the twin's with `in16`).
    let x_type = Rope { dtype: if in16 { twin.dtype } else { p.dtype }, ..*p };
    let tokens = u64::from(p.batch) * u64::from(p.seq);
    let reach = |stride: u32| (tokens.saturating_sub(1)) * u64::from(stride) + u64::from(row);
    let n = match x_stride == row {
        true => check(&x_type, &x, &pos, &inv_freq)?,
        false => {
            let contiguous = BufferView { len: p.rows() * u64::from(p.head_dim) * x_type.dtype.bytes(), ..x };
            let n = check(&x_type, &contiguous, &pos, &inv_freq)?;
            if x.len < reach(x_stride) * x_type.dtype.bytes() {
                return Err(err(p, format!("x of {} bytes for {tokens} rows of stride {x_stride}", x.len)));
            }
            n
        }
    };
    if let Some(out) = &out {
        // An f32 out is contiguous (only the 16-bit twin is ever written strided).
        if out_stride != row {
            return Err(err(p, format!("an f32 out of token stride {out_stride}")));
        }
        check_len(p, "out", out, n, 4)?;
    }
    let need_out = if out_stride == row { n } else { reach(out_stride) };
    let half = twin.code(k.name, need_out)? | if out.is_none() { 4 } else { 0 };
    let work = p.rows() * u64::from(p.rotary_dim / 2 + (p.head_dim - p.rotary_dim));
    if work == 0 {
        return Ok(());
    }
    let params = RopeRopePushTwin { base: rope_push(p, true, sign), twin: half, x_stride, out_stride };
    let args = [read(x), write(out.unwrap_or(twin.view)), read(pos), read(inv_freq), write(twin.view)];
    dispatch_elems(rec, k, &args, &params, work)
}

/// The push constants after the pointers: shape, layout, tail copy, scale and direction.
fn rope_push(p: &Rope, copy_tail: bool, sign: f32) -> RopeRopePush {
    RopeRopePush {
        rows: p.rows() as u32,
        heads: p.heads,
        head_dim: p.head_dim,
        rot_dim: p.rotary_dim,
        interleaved: u32::from(p.layout == RopeLayout::Interleaved),
        copy_tail: u32::from(copy_tail),
        mscale: p.mscale,
        sign,
    }
}

/// `x = rope(x)` in place.
pub fn rope_forward_in_place(
    rec: &mut Recorder,
    p: &Rope,
    x: BufferView<'_>,
    pos: BufferView<'_>,
    inv_freq: BufferView<'_>,
) -> Result<()> {
    dispatch(rec, p, x, pos, inv_freq, None, 1.0)
}

/// `dx = rope^T(dy)`: rotation by `-theta` with the same `mscale`.
pub fn rope_backward(
    rec: &mut Recorder,
    p: &Rope,
    dy: BufferView<'_>,
    pos: BufferView<'_>,
    inv_freq: BufferView<'_>,
    dx: BufferView<'_>,
) -> Result<()> {
    dispatch(rec, p, dy, pos, inv_freq, Some(dx), -1.0)
}

/// `dy = rope^T(dy)` in place.
pub fn rope_backward_in_place(
    rec: &mut Recorder,
    p: &Rope,
    dy: BufferView<'_>,
    pos: BufferView<'_>,
    inv_freq: BufferView<'_>,
) -> Result<()> {
    dispatch(rec, p, dy, pos, inv_freq, None, -1.0)
}
