//! Normalisation over the last dimension: RMSNorm (optionally Gemma's `1 + w` gain) and
//! LayerNorm (weight and bias, weight only, or parameter-free), forward and backward.
//!
//! Every tensor is a row-major view: `x`, `y`, `dy`, `dx` are `[rows, dim]`, weights and biases
//! `[dim]`, all in the descriptor's storage [`DType`] (f32, f16 or bf16; math is f32). The saved
//! statistics `mean`, `rstd` `[rows]`, the parameter gradients `dw`, `db` `[dim]` and their
//! scratch are always f32. The backward
//! sums weight gradients over rows deterministically: each of `G = min(rows, 256)` workgroups
//! writes its own partial sums into a scratch view (see [`weight_grad_scratch_bytes`]), then one
//! more kernel adds the `G` partial rows in a fixed order. No float atomics.

mod add_layer;
pub mod col_sum_plan;
pub mod reference;

pub use add_layer::add_layer_norm_forward;
pub use col_sum_plan::ColSum;

use vkformers_vk::{read, read_write, write, BufferView, KernelCode, Recorder, Result};

use crate::code;
use crate::code::{
    NormColSumPush, NormLayerBackwardPush, NormLayerForwardPush, NormRmsBackwardPush, NormRmsBackwardPushAcc,
    NormRmsForwardPush, NormRmsForwardPushTwin,
};
use crate::dtype::{DType, Twin};
use crate::launch::MAX_GROUPS_32 as MAX_GROUPS;
use crate::launch::{dispatch, err_named as err, expect_len_named as check_len_of, variant, Push};

/// Workgroups sharing out the rows of a backward (and rows of partial sums to add).
const GRAD_BLOCKS: u32 = 1024;
/// Threads per workgroup of `norm/col_sum` (its shader's, from the reflection).
const COL_LOCAL: u32 = <NormColSumPush as Push>::LOCAL_X;
const _: () = assert!(COL_LOCAL > 0);

/// Shape and options of an RMSNorm over the last dimension of `[rows, dim]`.
#[derive(Clone, Copy, Debug)]
pub struct RmsNorm {
    pub rows: u32,
    pub dim: u32,
    pub eps: f32,
    /// Gemma: scale by `1 + w` instead of `w` (ignored without a weight).
    pub unit_offset: bool,
    /// Storage type of `x`, `w`, `y`, `dy`, `dx`.
    pub dtype: DType,
}

/// Shape and epsilon of a LayerNorm over the last dimension of `[rows, dim]`.
#[derive(Clone, Copy, Debug)]
pub struct LayerNorm {
    pub rows: u32,
    pub dim: u32,
    pub eps: f32,
    /// Storage type of `x`, `w`, `b`, `y`, `dy`, `dx`.
    pub dtype: DType,
}

/// Where a backward writes its parameter gradients (`[dim]` each) and the scratch it needs
/// for the partial sums ([`weight_grad_scratch_bytes`] bytes at least). With `accumulate` the
/// gradients are added to what the views hold (gradient accumulation), else overwritten.
#[derive(Clone, Copy, Debug)]
pub struct ParamGrads<'a> {
    pub dw: BufferView<'a>,
    /// LayerNorm only: the bias gradient; must be `None` for RMSNorm.
    pub db: Option<BufferView<'a>>,
    pub scratch: BufferView<'a>,
    pub accumulate: bool,
}

/// Bytes of scratch a backward needs for its parameter gradients: `[2, min(rows, 256), dim]`
/// f32 (LayerNorm fills both halves, RMSNorm the first; both check the full size).
pub fn weight_grad_scratch_bytes(rows: u32, dim: u32) -> u64 {
    2 * u64::from(grad_blocks(rows)) * u64::from(dim) * 4
}

fn grad_blocks(rows: u32) -> u32 {
    rows.clamp(1, GRAD_BLOCKS)
}

/// Name of `k` in errors: without the `:f32` suffix (the f32 kernels keep their plain names).
fn kname(k: &KernelCode) -> &'static str {
    // Errors name the kernel as on every device: no `_cpu` workgroup suffix.
    let name = k.name.strip_suffix("_cpu").unwrap_or(k.name);
    name.strip_suffix(":f32").unwrap_or(name)
}

/// Checks that `v` holds exactly `elems` f32 values.
fn check_len(kernel: &str, what: &str, v: &BufferView<'_>, elems: u64) -> Result<()> {
    check_len_of(kernel, what, v, elems, DType::F32)
}

fn check_shape(kernel: &str, rows: u32, dim: u32) -> Result<()> {
    if rows == 0 || dim == 0 || u64::from(rows) * u64::from(dim) > u64::from(u32::MAX) {
        return Err(err(kernel, format!("shape [{rows}, {dim}]: both must be >= 1 with rows * dim < 2^32")));
    }
    Ok(())
}

fn row_groups(rows: u32) -> [u32; 3] {
    [rows.clamp(1, MAX_GROUPS), 1, 1]
}

/// Whether to run the `_cpu` variants (one 8-lane workgroup per row): a CPU device with
/// 8-lane subgroups, where llvmpipe switches the subgroups of a 256-thread workgroup as
/// coroutines at each of the tree sum's barriers.
fn cpu_variant(rec: &Recorder) -> bool {
    let c = rec.caps();
    c.is_cpu() && c.subgroup_size == 8
}

/// The RMSNorm forward kernel of `p` and its grid: plain or fused with a residual add,
/// storage type, CPU or not; one workgroup per row (the tree sum, in training and inference
/// alike, so a row's values never depend on the grad mode).
fn rms_forward_launch(rec: &Recorder, p: &RmsNorm, add: bool) -> (&'static KernelCode, [u32; 3]) {
    (rms_forward_code(p.dtype, add, cpu_variant(rec)), row_groups(p.rows))
}

/// The RMSNorm forward variant: plain or fused with a residual add, storage type, CPU or not.
fn rms_forward_code(dtype: DType, add: bool, cpu: bool) -> &'static KernelCode {
    let table = [
        [
            [&code::NORM_RMS_FORWARD_F32, &code::NORM_RMS_FORWARD_F16, &code::NORM_RMS_FORWARD_BF16],
            [&code::NORM_RMS_FORWARD_F32_CPU, &code::NORM_RMS_FORWARD_F16_CPU, &code::NORM_RMS_FORWARD_BF16_CPU],
        ],
        [
            [&code::NORM_RMS_FORWARD_ADD_F32, &code::NORM_RMS_FORWARD_ADD_F16, &code::NORM_RMS_FORWARD_ADD_BF16],
            [
                &code::NORM_RMS_FORWARD_ADD_F32_CPU,
                &code::NORM_RMS_FORWARD_ADD_F16_CPU,
                &code::NORM_RMS_FORWARD_ADD_BF16_CPU,
            ],
        ],
    ];
    variant(dtype, table[usize::from(add)][usize::from(cpu)])
}

/// Named views of one launch, in the order their errors are reported.
type Named<'a, 'b> = &'a [(&'static str, &'a BufferView<'b>)];

/// The checks every norm launch makes, in this order: the shape `[rows, dim]`, the `tensors`
/// `[rows, dim]` of storage type `dt`, the f32 statistics `stats` `[rows]` (mean, rstd), and
/// the parameters given of `params` (w, b) `[dim]` of `dt`.
fn check_views(
    name: &str,
    (rows, dim, dt): (u32, u32, DType),
    (tensors, stats): (Named<'_, '_>, Named<'_, '_>),
    params: &[(&'static str, Option<&BufferView<'_>>)],
) -> Result<()> {
    check_shape(name, rows, dim)?;
    for (what, v) in tensors {
        check_len_of(name, what, v, u64::from(rows) * u64::from(dim), dt)?;
    }
    for (what, v) in stats {
        check_len(name, what, v, rows.into())?;
    }
    for (what, v) in params {
        if let Some(v) = v {
            check_len_of(name, what, v, dim.into(), dt)?;
        }
    }
    Ok(())
}

/// Checks the views of an RMSNorm forward: x, y `[rows, dim]`, rstd `[rows]`, w `[dim]`.
fn check_rms_forward(
    name: &str,
    p: &RmsNorm,
    (x, y, rstd): (&BufferView<'_>, &BufferView<'_>, &BufferView<'_>),
    w: Option<&BufferView<'_>>,
) -> Result<()> {
    check_views(name, (p.rows, p.dim, p.dtype), (&[("x", x), ("y", y)], &[("rstd", rstd)]), &[("w", w)])
}

/// [`add_rms_norm_forward`] of f32 tensors that also writes `y` in 16 bits into `twin`
/// (rounded as `dtype::cast` rounds it): a training step's residual add and the norm after it
/// in one dispatch, with the copy the next 16-bit products read.
#[allow(clippy::too_many_arguments)]
pub fn add_rms_norm_forward_twin(
    rec: &mut Recorder,
    p: &RmsNorm,
    (x, r): (BufferView<'_>, BufferView<'_>),
    w: Option<BufferView<'_>>,
    h: BufferView<'_>,
    y: BufferView<'_>,
    twin: Twin<'_>,
    rstd: BufferView<'_>,
) -> Result<()> {
    rms_twin(rec, p, (x, w), Some((r, h)), Some(y), (twin, rstd))
}

/// [`add_rms_norm_forward_twin`] writing y only in 16 bits (`twin`), not in f32: training
/// under autocast when products are y's only readers (they read the twin; the backward works
/// from h and rstd). The same kernel with the f32 store off (push constant `twin` bit 2).
pub fn add_rms_norm_forward_twin_only(
    rec: &mut Recorder,
    p: &RmsNorm,
    (x, r): (BufferView<'_>, BufferView<'_>),
    w: Option<BufferView<'_>>,
    h: BufferView<'_>,
    twin: Twin<'_>,
    rstd: BufferView<'_>,
) -> Result<()> {
    rms_twin(rec, p, (x, w), Some((r, h)), None, (twin, rstd))
}

/// [`rms_norm_forward_twin`] writing y only in 16 bits (`twin`), not in f32 (see
/// [`add_rms_norm_forward_twin_only`]).
pub fn rms_norm_forward_twin_only(
    rec: &mut Recorder,
    p: &RmsNorm,
    (x, w): (BufferView<'_>, Option<BufferView<'_>>),
    twin: Twin<'_>,
    rstd: BufferView<'_>,
) -> Result<()> {
    rms_twin(rec, p, (x, w), None, None, (twin, rstd))
}

/// RMSNorm forward: `y = x * rstd * g` with `rstd = 1 / sqrt(mean(x^2) + eps)` per row and
/// `g = 1` (no weight), `w`, or `1 + w` (`unit_offset`). Writes `y [rows, dim]` and the
/// per-row `rstd [rows]` that [`rms_norm_backward`] needs.
pub fn rms_norm_forward(
    rec: &mut Recorder,
    p: &RmsNorm,
    x: BufferView<'_>,
    w: Option<BufferView<'_>>,
    y: BufferView<'_>,
    rstd: BufferView<'_>,
) -> Result<()> {
    let (k, grid) = rms_forward_launch(rec, p, false);
    check_rms_forward(kname(k), p, (&x, &y, &rstd), w.as_ref())?;
    let params = rms_push(p, w.is_some());
    let args = [read(x), read(w.unwrap_or(x)), write(y), write(rstd)];
    dispatch(rec, k, &[], &args, &params, grid)
}

/// The kernel of a twin RMSNorm forward (`(cpu, gpu)` variants, by device) and its twin code,
/// after the checks both twin launchers share: f32 storage, the plain forward's views, and a
/// `[rows, dim]` twin.
fn twin_forward_checks(
    rec: &Recorder,
    (cpu, gpu): (&'static KernelCode, &'static KernelCode),
    p: &RmsNorm,
    views: (&BufferView<'_>, &BufferView<'_>, &BufferView<'_>),
    w: Option<&BufferView<'_>>,
    twin: &Twin<'_>,
) -> Result<(&'static KernelCode, u32)> {
    let k = if cpu_variant(rec) { cpu } else { gpu };
    let name = kname(k);
    if p.dtype != DType::F32 {
        return Err(err(name, format!("a 16-bit twin of {:?} storage", p.dtype)));
    }
    check_rms_forward(name, p, views, w)?;
    Ok((k, twin.code(name, u64::from(p.rows) * u64::from(p.dim))?))
}

/// [`rms_norm_forward`] of f32 tensors that also writes `y` in 16 bits into `twin` (rounded
/// as `dtype::cast` rounds it): the copy a 16-bit product reads, with no cast dispatch.
pub fn rms_norm_forward_twin(
    rec: &mut Recorder,
    p: &RmsNorm,
    (x, w): (BufferView<'_>, Option<BufferView<'_>>),
    y: BufferView<'_>,
    twin: Twin<'_>,
    rstd: BufferView<'_>,
) -> Result<()> {
    rms_twin(rec, p, (x, w), None, Some(y), (twin, rstd))
}

/// Every twin RMSNorm forward: with `add` (r, h) the residual add fused before it; with no f32
/// `y` only the twin is written (push constant `twin` bit 2), and the twin's view stands in
/// for y's pointer. Pointers: x, [r, h], w, y, rstd, twin.
fn rms_twin(
    rec: &mut Recorder,
    p: &RmsNorm,
    (x, w): (BufferView<'_>, Option<BufferView<'_>>),
    add: Option<(BufferView<'_>, BufferView<'_>)>,
    y: Option<BufferView<'_>>,
    (twin, rstd): (Twin<'_>, BufferView<'_>),
) -> Result<()> {
    let kernels = match add {
        Some(_) => (&code::NORM_RMS_FORWARD_ADD_TWIN_F32_CPU, &code::NORM_RMS_FORWARD_ADD_TWIN_F32),
        None => (&code::NORM_RMS_FORWARD_TWIN_F32_CPU, &code::NORM_RMS_FORWARD_TWIN_F32),
    };
    // x stands for an absent y in the length checks (both f32 [rows, dim]).
    let (k, half) = twin_forward_checks(rec, kernels, p, (&x, y.as_ref().unwrap_or(&x), &rstd), w.as_ref(), &twin)?;
    let mut args = vec![read(x)];
    if let Some((r, h)) = add {
        let n = u64::from(p.rows) * u64::from(p.dim);
        check_len(kname(k), "r", &r, n)?;
        check_len(kname(k), "h", &h, n)?;
        args.extend([read(r), write(h)]);
    }
    args.extend([read(w.unwrap_or(x)), write(y.unwrap_or(twin.view)), write(rstd), write(twin.view)]);
    let no_f32 = if y.is_none() { 4 } else { 0 };
    let params = NormRmsForwardPushTwin { base: rms_push(p, w.is_some()), twin: half | no_f32 };
    dispatch(rec, k, &[], &args, &params, row_groups(p.rows))
}

/// A residual add fused with the RMSNorm after it (inference; no backward): `h = x + r`, then
/// [`rms_norm_forward`] of h (as stored in `p.dtype`) into `y` and `rstd`. Every value
/// equals the add kernel followed by that forward; one dispatch instead of two.
#[allow(clippy::too_many_arguments)]
pub fn add_rms_norm_forward(
    rec: &mut Recorder,
    p: &RmsNorm,
    (x, r): (BufferView<'_>, BufferView<'_>),
    w: Option<BufferView<'_>>,
    h: BufferView<'_>,
    y: BufferView<'_>,
    rstd: BufferView<'_>,
) -> Result<()> {
    // The tree sum, as the twin variant (`add_rms_norm_forward_twin`): training runs this
    // kernel too, and its f32 output must be bit for bit the twin's (tests/twin.rs).
    let (k, grid) = rms_forward_launch(rec, p, true);
    let name = kname(k);
    check_rms_forward(name, p, (&x, &y, &rstd), w.as_ref())?;
    let n = u64::from(p.rows) * u64::from(p.dim);
    check_len_of(name, "r", &r, n, p.dtype)?;
    check_len_of(name, "h", &h, n, p.dtype)?;
    let params = rms_push(p, w.is_some());
    let args = [read(x), read(r), write(h), read(w.unwrap_or(x)), write(y), write(rstd)];
    dispatch(rec, k, &[], &args, &params, grid)
}

/// The scalars of `norm/rms_forward`'s block: rows, dim, eps and the gain mode.
fn rms_push(p: &RmsNorm, weight: bool) -> NormRmsForwardPush {
    NormRmsForwardPush { rows: p.rows, D: p.dim, eps: p.eps, mode: gain_mode(weight, p.unit_offset) }
}

fn gain_mode(weight: bool, unit_offset: bool) -> u32 {
    match (weight, unit_offset) {
        (false, _) => 0,
        (true, false) => 1,
        (true, true) => 2,
    }
}

/// RMSNorm backward: from `x`, `w`, the forward's `rstd` and `dy`, writes `dx [rows, dim]`
/// and, when `grads` is given (requires a weight), `dw = sum_rows dy * x * rstd`.
#[allow(clippy::too_many_arguments)]
pub fn rms_norm_backward(
    rec: &mut Recorder,
    p: &RmsNorm,
    x: BufferView<'_>,
    w: Option<BufferView<'_>>,
    rstd: BufferView<'_>,
    dy: BufferView<'_>,
    dx: BufferView<'_>,
    grads: Option<ParamGrads<'_>>,
) -> Result<()> {
    let k =
        variant(p.dtype, [&code::NORM_RMS_BACKWARD_F32, &code::NORM_RMS_BACKWARD_F16, &code::NORM_RMS_BACKWARD_BF16]);
    rms_backward_launch(rec, (k, p), (x, w, rstd), dy, (dx, None), grads)
}

/// Where [`rms_norm_backward_acc`] puts `dx`: the f32 view, the gradient of x already gathered
/// to add (`prev`, `[rows, dim]` f32), and a 16-bit twin to write too.
#[derive(Clone, Copy, Debug)]
pub struct DxOut<'a> {
    pub dx: BufferView<'a>,
    pub prev: Option<BufferView<'a>>,
    pub twin: Option<Twin<'a>>,
}

/// [`rms_norm_backward`] of f32 tensors writing `dx = prev + (the norm's dx)` (the gradient of
/// x gathered from its other readers added in the same pass: no add dispatch after) and, with
/// a twin, that sum in 16 bits too (rounded as `dtype::cast` rounds it).
pub fn rms_norm_backward_acc(
    rec: &mut Recorder,
    p: &RmsNorm,
    (x, w, rstd): (BufferView<'_>, Option<BufferView<'_>>, BufferView<'_>),
    dy: BufferView<'_>,
    out: DxOut<'_>,
    grads: Option<ParamGrads<'_>>,
) -> Result<()> {
    let k = &code::NORM_RMS_BACKWARD_ACC_F32;
    let n = u64::from(p.rows) * u64::from(p.dim);
    if p.dtype != DType::F32 {
        return Err(err(kname(k), format!("accumulating into {:?} storage", p.dtype)));
    }
    if let Some(prev) = &out.prev {
        check_len(kname(k), "prev", prev, n)?;
    }
    let twin = out.twin.map(|t| t.code(kname(k), n).map(|c| (c, t.view))).transpose()?;
    let extra = (
        out.prev.unwrap_or(out.dx),
        twin.map_or(out.dx, |t| t.1),
        [u32::from(out.prev.is_some()), twin.map_or(0, |t| t.0)],
    );
    rms_backward_launch(rec, (k, p), (x, w, rstd), dy, (out.dx, Some(extra)), grads)
}

/// The pointers after the base ones of `norm/rms_backward:acc_f32` (prev, dx16), and its
/// `has_prev`, `twin` scalars.
type AccArgs<'a> = (BufferView<'a>, BufferView<'a>, [u32; 2]);

/// One RMSNorm backward of kernel `k` (its acc variant when `acc` is given), checking views.
fn rms_backward_launch(
    rec: &mut Recorder,
    (k, p): (&'static KernelCode, &RmsNorm),
    (x, w, rstd): (BufferView<'_>, Option<BufferView<'_>>, BufferView<'_>),
    dy: BufferView<'_>,
    (dx, acc): (BufferView<'_>, Option<AccArgs<'_>>),
    grads: Option<ParamGrads<'_>>,
) -> Result<()> {
    let name = kname(k);
    let tensors = [("x", &x), ("dy", &dy), ("dx", &dx)];
    check_views(name, (p.rows, p.dim, p.dtype), (&tensors, &[("rstd", &rstd)]), &[("w", w.as_ref())])?;
    let blocks = grad_blocks(p.rows);
    let partial = match &grads {
        None => None,
        Some(g) => {
            if w.is_none() || g.db.is_some() {
                return Err(err(name, "weight gradient needs a weight, and RMSNorm has no bias".into()));
            }
            Some(partial_view(name, g, blocks, p.dim)?)
        }
    };
    let mode = gain_mode(w.is_some(), p.unit_offset);
    let push = NormRmsBackwardPush { rows: p.rows, D: p.dim, mode, want_dw: u32::from(partial.is_some()) };
    let mut args = vec![read(x), read(w.unwrap_or(x)), read(rstd), read(dy), write(dx), write(partial.unwrap_or(dx))];
    match acc {
        None => dispatch(rec, k, &[], &args, &push, [blocks, 1, 1])?,
        Some((prev, dx16, [has_prev, twin])) => {
            args.extend([read(prev), write(dx16)]);
            let push = NormRmsBackwardPushAcc { base: push, has_prev, twin };
            dispatch(rec, k, &[], &args, &push, [blocks, 1, 1])?
        }
    }
    if let (Some(g), Some(part)) = (grads, partial) {
        col_sum(rec, part, g.dw, blocks, p.dim, g.accumulate, DType::F32)?;
    }
    Ok(())
}

/// Checks `grads` and returns the part of its scratch the partial sums use: `[blocks, dim]`
/// (RMSNorm) or `[2, blocks, dim]` (LayerNorm, with `db`).
fn partial_view<'a>(kernel: &str, g: &ParamGrads<'a>, blocks: u32, dim: u32) -> Result<BufferView<'a>> {
    check_len(kernel, "dw", &g.dw, dim.into())?;
    if let Some(db) = &g.db {
        check_len(kernel, "db", db, dim.into())?;
    }
    let bytes = 2 * u64::from(blocks) * u64::from(dim) * 4;
    if g.scratch.len < bytes {
        return Err(err(kernel, format!("scratch of {} bytes, need {bytes}", g.scratch.len)));
    }
    Ok(BufferView { len: bytes, ..g.scratch })
}

/// `out[d] = (accumulate ? out[d] : 0) + sum_b partial[b, d]` for `partial [blocks, dim]` f32,
/// summed in increasing `b` (deterministic), `out [dim]` stored as `dt`: the second stage of
/// every fixed-order partial-sum reduction (norm weight gradients, split-K, GQA dk / dv).
pub fn col_sum(
    rec: &mut Recorder,
    partial: BufferView<'_>,
    out: BufferView<'_>,
    blocks: u32,
    dim: u32,
    accumulate: bool,
    dt: DType,
) -> Result<()> {
    col_sum_as(rec, col_sum_plan::plan(blocks, dim), partial, out, blocks, dim, accumulate, dt)
}

/// [`col_sum`] by the kernel `how` (both give the same bits).
#[allow(clippy::too_many_arguments)]
pub fn col_sum_as(
    rec: &mut Recorder,
    how: ColSum,
    partial: BufferView<'_>,
    out: BufferView<'_>,
    blocks: u32,
    dim: u32,
    accumulate: bool,
    dt: DType,
) -> Result<()> {
    let codes = match how {
        ColSum::Serial => [&code::NORM_COL_SUM_F32, &code::NORM_COL_SUM_F16, &code::NORM_COL_SUM_BF16],
        ColSum::Tiled => [&code::NORM_COL_SUM_TILED_F32, &code::NORM_COL_SUM_TILED_F16, &code::NORM_COL_SUM_TILED_BF16],
    };
    let k = crate::launch::pick(rec, dt, codes)?;
    let need = u64::from(blocks) * u64::from(dim) * 4;
    if partial.len < need || out.len < u64::from(dim) * dt.bytes() {
        return Err(crate::launch::err_plain(
            k,
            format!("{blocks} blocks of {dim}: partial {} bytes, out {} bytes", partial.len, out.len),
        ));
    }
    let part = BufferView { len: need, ..partial };
    let params = NormColSumPush { blocks, D: dim, accumulate: u32::from(accumulate) };
    let per_group = if how == ColSum::Tiled { col_sum_plan::TILE_COLS } else { COL_LOCAL };
    let groups = [dim.div_ceil(per_group).clamp(1, MAX_GROUPS), 1, 1];
    let out_arg = if accumulate { read_write(out) } else { write(out) };
    dispatch(rec, k, &[], &[read(part), out_arg], &params, groups)
}

/// LayerNorm forward: `y = (x - mean) * rstd * w + b` per row with the biased variance;
/// `w` and `b` optional (a bias needs a weight). Writes `y [rows, dim]`, `mean` and `rstd`
/// `[rows]` for [`layer_norm_backward`].
#[allow(clippy::too_many_arguments)]
pub fn layer_norm_forward(
    rec: &mut Recorder,
    p: &LayerNorm,
    x: BufferView<'_>,
    w: Option<BufferView<'_>>,
    b: Option<BufferView<'_>>,
    y: BufferView<'_>,
    mean: BufferView<'_>,
    rstd: BufferView<'_>,
) -> Result<()> {
    let k = variant(
        p.dtype,
        [&code::NORM_LAYER_FORWARD_F32, &code::NORM_LAYER_FORWARD_F16, &code::NORM_LAYER_FORWARD_BF16],
    );
    let name = kname(k);
    let (tensors, stats) = ([("x", &x), ("y", &y)], [("mean", &mean), ("rstd", &rstd)]);
    check_views(name, (p.rows, p.dim, p.dtype), (&tensors, &stats), &[("w", w.as_ref()), ("b", b.as_ref())])?;
    let affine = affine_mode(name, w.is_some(), b.is_some())?;
    let params = NormLayerForwardPush { rows: p.rows, D: p.dim, eps: p.eps, affine };
    let args = [read(x), read(w.unwrap_or(x)), read(b.unwrap_or(x)), write(y), write(mean), write(rstd)];
    dispatch(rec, k, &[], &args, &params, row_groups(p.rows))
}

/// The `affine` push constant of the LayerNorm forwards: 0 no parameters, 1 a weight, 2 weight
/// and bias; a bias alone is an error naming the kernel `name`.
fn affine_mode(name: &str, weight: bool, bias: bool) -> Result<u32> {
    match (weight, bias) {
        (false, false) => Ok(0),
        (true, false) => Ok(1),
        (true, true) => Ok(2),
        (false, true) => Err(err(name, "a bias without a weight is not supported".into())),
    }
}

/// LayerNorm backward: from `x`, `w`, the forward's `mean`, `rstd` and `dy`, writes
/// `dx [rows, dim]` and, when `grads` is given (requires a weight), `dw = sum_rows dy * xhat`
/// and, if `grads.db` is set, `db = sum_rows dy`.
#[allow(clippy::too_many_arguments)]
pub fn layer_norm_backward(
    rec: &mut Recorder,
    p: &LayerNorm,
    x: BufferView<'_>,
    w: Option<BufferView<'_>>,
    mean: BufferView<'_>,
    rstd: BufferView<'_>,
    dy: BufferView<'_>,
    dx: BufferView<'_>,
    grads: Option<ParamGrads<'_>>,
) -> Result<()> {
    let k = variant(
        p.dtype,
        [&code::NORM_LAYER_BACKWARD_F32, &code::NORM_LAYER_BACKWARD_F16, &code::NORM_LAYER_BACKWARD_BF16],
    );
    let name = kname(k);
    let (tensors, stats) = ([("x", &x), ("dy", &dy), ("dx", &dx)], [("mean", &mean), ("rstd", &rstd)]);
    check_views(name, (p.rows, p.dim, p.dtype), (&tensors, &stats), &[("w", w.as_ref())])?;
    let blocks = grad_blocks(p.rows);
    let partial = match &grads {
        None => None,
        Some(_) if w.is_none() => return Err(err(name, "parameter gradients need a weight".into())),
        Some(g) => Some(partial_view(name, g, blocks, p.dim)?),
    };
    let params = NormLayerBackwardPush {
        rows: p.rows,
        D: p.dim,
        has_w: u32::from(w.is_some()),
        want_dw: u32::from(partial.is_some()),
    };
    let args =
        [read(x), read(w.unwrap_or(x)), read(mean), read(rstd), read(dy), write(dx), write(partial.unwrap_or(dx))];
    dispatch(rec, k, &[], &args, &params, [blocks, 1, 1])?;
    if let (Some(g), Some(part)) = (grads, partial) {
        let half = u64::from(blocks) * u64::from(p.dim) * 4;
        col_sum(rec, part, g.dw, blocks, p.dim, g.accumulate, DType::F32)?;
        if let Some(db) = g.db {
            let part_b = BufferView { offset: part.offset + half, len: half, ..part };
            col_sum(rec, part_b, db, blocks, p.dim, g.accumulate, DType::F32)?;
        }
    }
    Ok(())
}
