//! Optimizer kernels: an AdamW step (torch.optim.AdamW semantics) and the global gradient
//! norm with its clip coefficient (torch.nn.utils.clip_grad_norm_), all on the device so a
//! training step needs no host round trip.
//!
//! Gradient clipping in one batch:
//! [`sum_squares`] once per gradient buffer (slot k) → [`norm_and_clip_coef`] →
//! [`adamw_step`] with `grad_scale = Some(coef)` for every parameter.

pub mod reference;

use vkformers_vk::{read, read_write, write, BufferView, KernelCode, Recorder, Result};

use crate::code;
use crate::dtype::DType;
use crate::launch::{err, MAX_GROUPS};

/// Threads per workgroup of the optimizer shaders.
const LOCAL: u64 = 256;
/// Partial sums written per gradient buffer by [`sum_squares`] (`PARTS` in `optim.glsl`).
pub const PARTS_PER_SLOT: u32 = 64;

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

/// Number of f32 in `v`, which must be 1..2^32 of them.
fn elements(k: &KernelCode, what: &str, v: &BufferView<'_>) -> Result<u32> {
    let n = v.len / 4;
    if n == 0 || !v.len.is_multiple_of(4) || n > u64::from(u32::MAX) {
        return Err(err(k, format!("{what}: view of {} bytes is not 1..2^32 f32 values", v.len)));
    }
    Ok(n as u32)
}

fn expect_len(k: &KernelCode, what: &str, v: &BufferView<'_>, elems: u64) -> Result<()> {
    if v.len != elems * 4 {
        return Err(err(k, format!("{what}: view of {} bytes, expected {elems} x 4 bytes", v.len)));
    }
    Ok(())
}

fn params(words: &[u32]) -> Vec<u8> {
    words.iter().flat_map(|w| w.to_le_bytes()).collect()
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
    let mut words = vec![n];
    words.extend(adamw_scalars(hp, step).map(f32::to_bits));
    let groups = u64::from(n).div_ceil(LOCAL).min(MAX_GROUPS) as u32;
    rec.dispatch(k, &[], &args, &params(&words), [groups, 1, 1])
}

/// Length in f32 of the partials buffer for `buffers` gradient buffers.
pub fn partials_len(buffers: u32) -> u64 {
    u64::from(buffers) * u64::from(PARTS_PER_SLOT)
}

/// Writes the sum of squares of `x [n]` as [`PARTS_PER_SLOT`] partial sums into
/// `partials[slot * PARTS_PER_SLOT ..][..PARTS_PER_SLOT]` (deterministic, device-independent).
pub fn sum_squares(rec: &mut Recorder, x: BufferView<'_>, partials: BufferView<'_>, slot: u32) -> Result<()> {
    let k = &code::OPTIM_SUM_SQUARES;
    let n = elements(k, "x", &x)?;
    let slots = partials.len / 4 / u64::from(PARTS_PER_SLOT);
    if u64::from(slot) >= slots {
        return Err(err(k, format!("slot {slot} outside a partials buffer of {slots} slots ({} bytes)", partials.len)));
    }
    let out = partials.buffer.slice(partials.offset + partials_len(slot) * 4, partials_len(1) * 4);
    // The kernel writes from the start of the view: pass the slot's own range, so that sums of
    // different buffers touch disjoint bytes and need no barrier between them.
    rec.dispatch(k, &[], &[read(x), write(out)], &params(&[n]), [PARTS_PER_SLOT, 1, 1])
}

/// `norm[0] = sqrt(sum(partials[..slots * PARTS_PER_SLOT]))` and
/// `coef[0] = min(1, max_norm / (norm + 1e-6))`, as `clip_grad_norm_`; `norm`, `coef` `[1]`.
pub fn norm_and_clip_coef(
    rec: &mut Recorder,
    partials: BufferView<'_>,
    slots: u32,
    max_norm: f32,
    norm: BufferView<'_>,
    coef: BufferView<'_>,
) -> Result<()> {
    norm_and_clip_coef_scaled(rec, partials, slots, max_norm, norm, coef, LossScale::NONE)
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
    slots: u32,
    max_norm: f32,
    norm: BufferView<'_>,
    coef: BufferView<'_>,
    ls: LossScale,
) -> Result<()> {
    let k = &code::OPTIM_NORM_CLIP;
    if slots == 0 {
        return Err(err(k, "no gradient buffers".into()));
    }
    expect_len(k, "partials", &partials, partials_len(slots))?;
    expect_len(k, "norm", &norm, 1)?;
    expect_len(k, "coef", &coef, 1)?;
    let args = [read(partials), write(norm), write(coef)];
    let words = [slots, (max_norm * ls.scale).to_bits(), (1.0 / ls.scale).to_bits(), u32::from(ls.skip_nonfinite)];
    rec.dispatch(k, &[], &args, &params(&words), [1, 1, 1])
}

/// Global 2-norm of all `grads` and its clip coefficient: one [`sum_squares`] per buffer
/// into `partials` (at least [`partials_len`]`(grads.len())` f32), then [`norm_and_clip_coef`].
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
    let slots = u32::try_from(grads.len()).map_err(|_| err(&code::OPTIM_NORM_CLIP, "too many buffers".into()))?;
    let used = partials.buffer.slice(partials.offset, partials_len(slots).min(partials.len / 4) * 4);
    for (slot, g) in grads.iter().enumerate() {
        sum_squares(rec, *g, used, slot as u32)?;
    }
    norm_and_clip_coef_scaled(rec, used, slots, max_norm, norm, coef, ls)
}
