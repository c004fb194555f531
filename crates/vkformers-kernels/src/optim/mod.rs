//! Optimizer kernels: an AdamW step (torch.optim.AdamW semantics) and the global gradient
//! norm with its clip coefficient (torch.nn.utils.clip_grad_norm_), all on the device so a
//! training step needs no host round trip.
//!
//! Gradient clipping in one batch, whatever the number of parameters:
//! [`grad_norm_multi::grad_norm_multi_scaled`] (one sum-of-squares dispatch over every gradient
//! through a table of addresses, then [`norm_and_clip_coef_scaled`]) →
//! [`adamw_multi::adamw_step_multi`] (every parameter in one dispatch) with the clip coefficient
//! as `grad_scale`: the clip scale is applied inside the AdamW kernel, no pass over the gradients
//! of its own. The per-buffer kernels ([`grad_norm_scaled`]: one [`sum_squares`] per buffer and
//! a second stage; [`adamw_step_from`] per parameter) give the same results (AdamW: the same
//! bits; the norm: within f32 summation order).

pub mod adamw_multi;
pub mod grad_norm_multi;
pub mod reference;

use vkformers_vk::{read, read_write, write, BufferView, KernelCode, Recorder, Result};

use crate::code::{self, OptimAdamwPush, OptimNormClipPush, OptimSumPartsPush, OptimSumSquaresPush};
use crate::dtype::DType;
use crate::launch::{dispatch, err, Push, MAX_GROUPS};

/// AdamW hyper-parameters, as `torch.optim.AdamW(lr, betas=(beta1, beta2), eps, weight_decay)`.
#[derive(Clone, Copy, Debug, PartialEq)]
pub struct AdamW {
    pub lr: f64,
    pub beta1: f64,
    pub beta2: f64,
    pub eps: f64,
    pub weight_decay: f64,
}

impl Default for AdamW {
    /// PyTorch's defaults: lr 1e-3, betas (0.9, 0.999), eps 1e-8, weight_decay 1e-2.
    fn default() -> Self {
        AdamW { lr: 1e-3, beta1: 0.9, beta2: 0.999, eps: 1e-8, weight_decay: 1e-2 }
    }
}

/// The buffers of one AdamW step, each `[n]` f32: `param`, `exp_avg` and `exp_avg_sq` are
/// updated in place. `grad_scale [1]`, when given, multiplies every gradient (the clip
/// coefficient of [`norm_and_clip_coef`]).
#[derive(Clone, Copy, Debug)]
pub struct AdamWBuffers<'a> {
    pub param: BufferView<'a>,
    pub grad: BufferView<'a>,
    pub exp_avg: BufferView<'a>,
    pub exp_avg_sq: BufferView<'a>,
    pub grad_scale: Option<BufferView<'a>>,
}

/// Writes the table `bytes` of a multi-tensor kernel `k` into `table` (16-byte aligned, at
/// least that long) by commands of this batch (no submission of its own), 64 KiB each; returns
/// the view of the bytes written.
fn upload_table<'a>(rec: &mut Recorder, k: &KernelCode, table: BufferView<'a>, bytes: &[u8]) -> Result<BufferView<'a>> {
    if table.len < bytes.len() as u64 || !table.address().is_multiple_of(16) {
        return Err(err(k, format!("table: {} bytes, need {} at a 16-byte aligned address", table.len, bytes.len())));
    }
    for (i, piece) in bytes.chunks(Recorder::UPDATE_MAX).enumerate() {
        let at = table.offset + (i * Recorder::UPDATE_MAX) as u64;
        rec.update(table.buffer.slice(at, piece.len() as u64), piece)?;
    }
    Ok(table.buffer.slice(table.offset, bytes.len() as u64))
}

/// Workgroups of a multi-tensor kernel over `chunks` chunks: one per chunk up to `max_groups`
/// (the kernels stride over the rest).
fn chunk_groups(chunks: u32, max_groups: u32) -> [u32; 3] {
    [chunks.clamp(1, max_groups), 1, 1]
}

/// Number of f32 in `v`, which must be 1..2^32 of them.
fn elements(k: &KernelCode, what: &str, v: &BufferView<'_>) -> Result<u32> {
    let n = v.len / 4;
    if n == 0 || !v.len.is_multiple_of(4) || n > u64::from(u32::MAX) {
        return Err(err(k, format!("{what}: view of {} bytes is not 1..2^32 f32 values", v.len)));
    }
    Ok(n as u32)
}

/// Checks that `v` holds exactly `elems` f32 values.
fn expect_len(k: &KernelCode, what: &str, v: &BufferView<'_>, elems: u64) -> Result<()> {
    crate::launch::expect_bytes(k, what, v, elems, 4)
}

/// The per-step scalars of the shader, computed in f64 and rounded to f32 as PyTorch does
/// with its Python-float arithmetic: `[decay, w1, beta2, 1 - beta2, bc2_sqrt, -step_size, eps]`.
/// `step` is the 1-based step number `t` after the increment (the first step is 1).
pub fn adamw_scalars(hp: &AdamW, step: u64) -> [f32; 7] {
    let t = step as f64;
    let bias_c1 = 1.0 - hp.beta1.powf(t);
    let bias_c2 = 1.0 - hp.beta2.powf(t);
    let step_size = hp.lr / bias_c1;
    [
        (1.0 - hp.lr * hp.weight_decay) as f32,
        (1.0 - hp.beta1) as f32,
        hp.beta2 as f32,
        (1.0 - hp.beta2) as f32,
        bias_c2.sqrt() as f32,
        (-step_size) as f32,
        hp.eps as f32,
    ]
}

/// One AdamW step in place (step number `step >= 1`), see [`AdamWBuffers`]. Bias corrections
/// are computed on the host in f64 from `step`.
pub fn adamw_step(rec: &mut Recorder, bufs: &AdamWBuffers<'_>, hp: &AdamW, step: u64) -> Result<()> {
    adamw_step_copy(rec, bufs, None, hp, step)
}

/// The AdamW kernel variant: scaled or not, and the type of the 16-bit copy it writes, if any.
fn adamw_kernel(scaled: bool, copy: Option<DType>) -> Result<&'static KernelCode> {
    Ok(match (scaled, copy) {
        (false, None) => &code::OPTIM_ADAMW_PLAIN,
        (true, None) => &code::OPTIM_ADAMW_SCALED,
        (false, Some(DType::BF16)) => &code::OPTIM_ADAMW_PLAIN_COPY_BF16,
        (true, Some(DType::BF16)) => &code::OPTIM_ADAMW_SCALED_COPY_BF16,
        (false, Some(DType::F16)) => &code::OPTIM_ADAMW_PLAIN_COPY_F16,
        (true, Some(DType::F16)) => &code::OPTIM_ADAMW_SCALED_COPY_F16,
        (_, Some(DType::F32)) => return Err(err(&code::OPTIM_ADAMW_PLAIN, "the weight copy must be 16-bit".into())),
    })
}

/// What the moment buffers of an AdamW step hold.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Moments {
    /// The previous step's moments (or zeros someone wrote).
    Stored,
    /// Nothing yet (the parameter's first step): the kernel takes them as zero without reading
    /// them, so they need no zero fill, and writes them (zero on a skipped step).
    Fresh,
}

/// [`adamw_step`] that also writes the updated parameter, rounded to `dtype` (bf16: nearest
/// even, as `dtype::cast`), into `copy [n]` (mixed precision: the 16-bit weight that the next
/// forward's products read). A skipped step (negative `grad_scale`) leaves `copy` as it was.
pub fn adamw_step_copy(
    rec: &mut Recorder,
    bufs: &AdamWBuffers<'_>,
    copy: Option<(BufferView<'_>, DType)>,
    hp: &AdamW,
    step: u64,
) -> Result<()> {
    adamw_step_from(rec, bufs, copy, hp, step, Moments::Stored)
}

/// [`adamw_step_copy`] with `moments` saying whether the moment buffers hold anything yet.
pub fn adamw_step_from(
    rec: &mut Recorder,
    bufs: &AdamWBuffers<'_>,
    copy: Option<(BufferView<'_>, DType)>,
    hp: &AdamW,
    step: u64,
    moments: Moments,
) -> Result<()> {
    let k = adamw_kernel(bufs.grad_scale.is_some(), copy.map(|c| c.1))?;
    if step == 0 {
        return Err(err(k, "step numbers start at 1".into()));
    }
    let n = elements(k, "param", &bufs.param)?;
    expect_len(k, "grad", &bufs.grad, n.into())?;
    expect_len(k, "exp_avg", &bufs.exp_avg, n.into())?;
    expect_len(k, "exp_avg_sq", &bufs.exp_avg_sq, n.into())?;
    let mut args = vec![read_write(bufs.param), read(bufs.grad), read_write(bufs.exp_avg), read_write(bufs.exp_avg_sq)];
    if let Some(s) = bufs.grad_scale {
        expect_len(k, "grad_scale", &s, 1)?;
        args.push(read(s));
    }
    if let Some((c, dt)) = copy {
        // 16-bit storage is padded to whole 4-byte words (odd n: one spare element).
        if c.len != (u64::from(n) * dt.bytes()).next_multiple_of(4) && c.len != u64::from(n) * dt.bytes() {
            return Err(err(k, format!("copy: view of {} bytes for {n} {dt:?} values", c.len)));
        }
        args.push(write(c));
    }
    let [decay, w1, beta2, omb2, bc2_sqrt, neg_step, eps] = adamw_scalars(hp, step);
    let fresh = u32::from(moments == Moments::Fresh);
    let push = OptimAdamwPush { n, decay, w1, beta2, omb2, bc2_sqrt, neg_step, eps, fresh };
    let groups = u64::from(n).div_ceil(u64::from(<OptimAdamwPush as Push>::LOCAL_X)).min(MAX_GROUPS) as u32;
    dispatch(rec, k, &[], &args, &push, [groups, 1, 1])
}

/// Most workgroups (and partial sums) of one buffer's [`sum_squares`]: 1024 x 256 threads is
/// about what an H200 keeps resident (132 SMs x 2048), so one large gradient fills the device.
const MAX_PARTS: u64 = 1024;
/// Elements per workgroup below which [`sum_squares`] uses fewer workgroups (16 per thread).
const PART_ELEMS: u64 = 16 * <OptimSumSquaresPush as Push>::LOCAL_X as u64;
const _: () =
    assert!(PART_ELEMS > 0 && <OptimAdamwPush as Push>::LOCAL_X > 0 && <OptimSumPartsPush as Push>::LOCAL_X > 0);
/// Most workgroups of the second stage ([`sum_parts`]).
const MAX_SUMS: u64 = 256;

/// Partial sums (= workgroups) [`sum_squares`] writes for a buffer of `n` f32: a function of
/// `n` alone, so the reduction order, and the norm's bits, are the same on every device.
pub fn parts(n: u64) -> u32 {
    n.div_ceil(PART_ELEMS).clamp(1, MAX_PARTS) as u32
}

/// Second-stage sums over `total` partials: (workgroups, partials per workgroup).
fn sums(total: u64) -> (u32, u32) {
    let groups = total.div_ceil(4 * u64::from(<OptimSumPartsPush as Push>::LOCAL_X)).clamp(1, MAX_SUMS);
    (groups as u32, total.div_ceil(groups) as u32)
}

/// First-stage partials of `grads`: their total, and the start of each buffer's range.
fn layout(grads: &[BufferView<'_>]) -> (u64, Vec<u64>) {
    let mut starts = Vec::with_capacity(grads.len());
    let mut total = 0;
    for g in grads {
        starts.push(total);
        total += u64::from(parts(g.len / 4));
    }
    (total, starts)
}

/// Length in f32 of the scratch buffer [`grad_norm`] needs for `grads`: every buffer's
/// [`parts`], then the second stage's sums.
pub fn partials_len(grads: &[BufferView<'_>]) -> u64 {
    let (total, _) = layout(grads);
    total + u64::from(sums(total).0)
}

/// Writes the sum of squares of `x [n]` as [`parts`]`(n)` partial sums into `partials`, which
/// must be exactly that long (deterministic, device-independent).
pub fn sum_squares(rec: &mut Recorder, x: BufferView<'_>, partials: BufferView<'_>) -> Result<()> {
    let k = &code::OPTIM_SUM_SQUARES;
    let n = elements(k, "x", &x)?;
    let p = parts(n.into());
    expect_len(k, "partials", &partials, p.into())?;
    dispatch(rec, k, &[], &[read(x), write(partials)], &OptimSumSquaresPush { n }, [p, 1, 1])
}

/// `out[w] = sum(x[w * chunk..][..chunk])` for the `out.len / 4` workgroups (the last chunk
/// may be short): the second stage of [`grad_norm`].
fn sum_parts(rec: &mut Recorder, x: BufferView<'_>, out: BufferView<'_>, chunk: u32) -> Result<()> {
    let k = &code::OPTIM_SUM_PARTS;
    let n = elements(k, "x", &x)?;
    let groups = elements(k, "out", &out)?;
    if u64::from(groups) * u64::from(chunk) < n.into() {
        return Err(err(k, format!("{groups} chunks of {chunk} do not cover {n} values")));
    }
    dispatch(rec, k, &[], &[read(x), write(out)], &OptimSumPartsPush { n, chunk }, [groups, 1, 1])
}

/// `norm[0] = sqrt(sum(partials[..count]))` and
/// `coef[0] = min(1, max_norm / (norm + 1e-6))`, as `clip_grad_norm_`; `norm`, `coef` `[1]`.
pub fn norm_and_clip_coef(
    rec: &mut Recorder,
    partials: BufferView<'_>,
    count: u32,
    max_norm: f32,
    norm: BufferView<'_>,
    coef: BufferView<'_>,
) -> Result<()> {
    norm_and_clip_coef_scaled(rec, partials, count, max_norm, norm, coef, LossScale::NONE)
}

/// Loss scaling of the gradients a norm is taken over (fp16 training, as GradScaler).
#[derive(Clone, Copy, Debug, PartialEq)]
pub struct LossScale {
    /// The gradients hold `scale` times the true gradients.
    pub scale: f32,
    /// A non-finite norm makes the coefficient −1: AdamW's scaled variant then skips the step.
    pub skip_nonfinite: bool,
}

impl LossScale {
    /// No scaling, no skipping (the coefficient is exactly torch's clip coefficient).
    pub const NONE: LossScale = LossScale { scale: 1.0, skip_nonfinite: false };
}

/// [`norm_and_clip_coef`] over gradients scaled by `ls.scale`: `norm` receives the unscaled
/// norm and `coef` the factor that unscales and clips (−1 on overflow when `skip_nonfinite`).
pub fn norm_and_clip_coef_scaled(
    rec: &mut Recorder,
    partials: BufferView<'_>,
    count: u32,
    max_norm: f32,
    norm: BufferView<'_>,
    coef: BufferView<'_>,
    ls: LossScale,
) -> Result<()> {
    let k = &code::OPTIM_NORM_CLIP;
    if count == 0 {
        return Err(err(k, "no partial sums".into()));
    }
    expect_len(k, "partials", &partials, count.into())?;
    expect_len(k, "norm", &norm, 1)?;
    expect_len(k, "coef", &coef, 1)?;
    let args = [read(partials), write(norm), write(coef)];
    let push = OptimNormClipPush {
        count,
        max_norm: max_norm * ls.scale,
        inv_scale: 1.0 / ls.scale,
        skip_nonfinite: u32::from(ls.skip_nonfinite),
    };
    dispatch(rec, k, &[], &args, &push, [1, 1, 1])
}

/// Global 2-norm of all `grads` and its clip coefficient: one [`sum_squares`] per buffer into
/// `partials` (at least [`partials_len`]`(grads)` f32), a second stage of chunk sums, then
/// [`norm_and_clip_coef`]. Deterministic: the reduction tree depends on the buffer sizes only.
pub fn grad_norm(
    rec: &mut Recorder,
    grads: &[BufferView<'_>],
    partials: BufferView<'_>,
    max_norm: f32,
    norm: BufferView<'_>,
    coef: BufferView<'_>,
) -> Result<()> {
    grad_norm_scaled(rec, grads, partials, max_norm, norm, coef, LossScale::NONE)
}

/// [`grad_norm`] over loss-scaled gradients (see [`norm_and_clip_coef_scaled`]).
pub fn grad_norm_scaled(
    rec: &mut Recorder,
    grads: &[BufferView<'_>],
    partials: BufferView<'_>,
    max_norm: f32,
    norm: BufferView<'_>,
    coef: BufferView<'_>,
    ls: LossScale,
) -> Result<()> {
    let k = &code::OPTIM_NORM_CLIP;
    if grads.is_empty() {
        return Err(err(k, "no gradient buffers".into()));
    }
    let (total, starts) = layout(grads);
    let (groups, chunk) = sums(total);
    if partials.len < (total + u64::from(groups)) * 4 {
        return Err(err(k, format!("partials: {} bytes, need {} f32", partials.len, total + u64::from(groups))));
    }
    let at = |start: u64, len: u64| partials.buffer.slice(partials.offset + start * 4, len * 4);
    // Stage 1: each buffer's sums into its own range (disjoint bytes: no barriers between them).
    for (g, start) in grads.iter().zip(starts) {
        sum_squares(rec, *g, at(start, parts(g.len / 4).into()))?;
    }
    // Stage 2: contiguous chunks of all partials, then one workgroup for the norm.
    let second = at(total, groups.into());
    sum_parts(rec, at(0, total), second, chunk)?;
    norm_and_clip_coef_scaled(rec, second, groups, max_norm, norm, coef, ls)
}
