//! AdamW over many parameters in one dispatch (`optim/adamw_multi`): the per-parameter kernel
//! [`super::adamw_step_from`] takes one dispatch per parameter (201 for a 22-layer Llama). Both
//! run `optim/adamw_math.glsl` per element: the same bits.

use vkformers_vk::{read, read_write, write, Arg, BufferView, KernelCode, Recorder, Result};

use super::{adamw_scalars, chunk_groups, upload_table, AdamW, Moments};
use crate::code;
use crate::code::OptimAdamwMultiPush;
use crate::dtype::DType;
use crate::launch::{dispatch_indirect, err, MAX_GROUPS};

/// Elements per chunk (one workgroup's share at a time, 64 per thread): a 1.1B model has ~67K
/// chunks, about one per workgroup, so each workgroup's search of the table (eight dependent
/// loads) is paid once per 64 elements of each of its threads.
pub const CHUNK: u32 = 16_384;

/// Bytes of one table entry (four `uvec4`, see the shader).
pub const ENTRY_BYTES: u64 = 64;

/// Largest parameter (in f32) the shader's index arithmetic handles without wrapping.
const MAX_ELEMS: u64 = u32::MAX as u64 - CHUNK as u64;

/// One parameter of [`adamw_step_multi`]: its f32 buffers `[n]`, the 16-bit copy to rewrite
/// (if any), its weight decay (0 for the exempt ones) and whether its moments hold anything.
#[derive(Clone, Copy, Debug)]
pub struct MultiParam<'a> {
    pub param: BufferView<'a>,
    pub grad: BufferView<'a>,
    pub exp_avg: BufferView<'a>,
    pub exp_avg_sq: BufferView<'a>,
    pub copy: Option<BufferView<'a>>,
    pub weight_decay: f64,
    pub moments: Moments,
}

/// The variant: scaled or not, and the type of the 16-bit copies.
fn kernel(scaled: bool, copy: Option<DType>) -> Result<&'static KernelCode> {
    Ok(match (scaled, copy) {
        (false, None) => &code::OPTIM_ADAMW_MULTI_PLAIN,
        (true, None) => &code::OPTIM_ADAMW_MULTI_SCALED,
        (false, Some(DType::BF16)) => &code::OPTIM_ADAMW_MULTI_PLAIN_COPY_BF16,
        (true, Some(DType::BF16)) => &code::OPTIM_ADAMW_MULTI_SCALED_COPY_BF16,
        (false, Some(DType::F16)) => &code::OPTIM_ADAMW_MULTI_PLAIN_COPY_F16,
        (true, Some(DType::F16)) => &code::OPTIM_ADAMW_MULTI_SCALED_COPY_F16,
        (_, Some(DType::F32)) => {
            return Err(err(&code::OPTIM_ADAMW_MULTI_PLAIN, "the weight copies must be 16-bit".into()))
        }
    })
}

/// Checks one parameter's views; returns its element count.
fn check(k: &KernelCode, i: usize, p: &MultiParam<'_>, copy: Option<DType>) -> Result<u64> {
    let n = p.param.len / 4;
    let bad =
        |what: &str, v: &BufferView<'_>| err(k, format!("parameter {i}: {what}: view of {} bytes for {n} f32", v.len));
    if n == 0 || !p.param.len.is_multiple_of(4) || n > MAX_ELEMS {
        return Err(bad("param", &p.param));
    }
    for (what, v) in [("grad", &p.grad), ("exp_avg", &p.exp_avg), ("exp_avg_sq", &p.exp_avg_sq)] {
        if v.len != p.param.len {
            return Err(bad(what, v));
        }
    }
    match (p.copy, copy) {
        (Some(c), Some(dt)) if c.len == n * dt.bytes() || c.len == (n * dt.bytes()).next_multiple_of(4) => Ok(n),
        (None, _) => Ok(n),
        (Some(c), _) => Err(bad("copy", &c)),
    }
}

/// The table words of `ps` (see the shader) and the total chunks.
fn table(k: &KernelCode, ps: &[MultiParam<'_>], copy: Option<DType>, hp: &AdamW, step: u64) -> Result<(Vec<u32>, u32)> {
    let mut words = Vec::with_capacity(ps.len() * 16);
    let mut chunks: u64 = 0;
    // Two entries updating the same parameter in one dispatch would race.
    let mut seen = std::collections::HashSet::with_capacity(ps.len());
    let addr = |v: &BufferView<'_>| [v.address() as u32, (v.address() >> 32) as u32];
    for (i, p) in ps.iter().enumerate() {
        let n = check(k, i, p, copy)?;
        if !seen.insert(p.param.address()) {
            return Err(err(k, format!("parameter {i} is listed twice")));
        }
        let decay = adamw_scalars(&AdamW { weight_decay: p.weight_decay, ..*hp }, step)[0];
        words.extend(addr(&p.param).into_iter().chain(addr(&p.grad)));
        words.extend(addr(&p.exp_avg).into_iter().chain(addr(&p.exp_avg_sq)));
        words.extend(p.copy.as_ref().map_or([0, 0], addr));
        words.extend([n as u32, chunks as u32, decay.to_bits(), u32::from(p.moments == Moments::Fresh), 0, 0]);
        chunks += n.div_ceil(CHUNK.into());
        if chunks > u64::from(u32::MAX) {
            return Err(err(k, "more than 2^32 chunks".into()));
        }
    }
    Ok((words, chunks as u32))
}

/// One AdamW step (number `step >= 1`) of every parameter of `ps` in one dispatch, as
/// [`super::adamw_step_from`] per parameter: `hp`'s weight decay is replaced by each
/// parameter's own; `grad_scale [1]` (the clip coefficient, negative: skip) multiplies every
/// gradient; the copies are of type `copy`. `table` (at least `ps.len()` x [`ENTRY_BYTES`],
/// 16-byte aligned) is written inside the batch first.
pub fn adamw_step_multi(
    rec: &mut Recorder,
    ps: &[MultiParam<'_>],
    copy: Option<DType>,
    grad_scale: Option<BufferView<'_>>,
    table_view: BufferView<'_>,
    hp: &AdamW,
    step: u64,
) -> Result<()> {
    adamw_step_multi_in(rec, ps, (copy, grad_scale), table_view, hp, step, MAX_GROUPS as u32)
}

/// [`adamw_step_multi`] on at most `max_groups` workgroups (tests: the workgroups then stride
/// over the chunks, as on a large model).
#[doc(hidden)]
pub fn adamw_step_multi_in(
    rec: &mut Recorder,
    ps: &[MultiParam<'_>],
    (copy, grad_scale): (Option<DType>, Option<BufferView<'_>>),
    table_view: BufferView<'_>,
    hp: &AdamW,
    step: u64,
    max_groups: u32,
) -> Result<()> {
    let k = kernel(grad_scale.is_some(), copy)?;
    if step == 0 || ps.is_empty() {
        return Err(err(k, format!("step {step} of {} parameters: steps start at 1, and need one", ps.len())));
    }
    let (words, chunks) = table(k, ps, copy, hp, step)?;
    let bytes: Vec<u8> = words.iter().flat_map(|w| w.to_le_bytes()).collect();
    let mut args = vec![read(upload_table(rec, k, table_view, &bytes)?)];
    if let Some(s) = grad_scale {
        crate::launch::expect_bytes(k, "grad_scale", &s, 1, 4)?;
        args.push(read(s));
    }
    let indirect: Vec<Arg<'_>> = ps
        .iter()
        .flat_map(|p| {
            let moments = [read_write(p.param), read(p.grad), read_write(p.exp_avg), read_write(p.exp_avg_sq)];
            moments.into_iter().chain(p.copy.map(write))
        })
        .collect();
    // Each tensor's decay is in the table (its own weight decay); the rest are shared.
    let [_, w1, beta2, omb2, bc2_sqrt, neg_step, eps] = adamw_scalars(hp, step);
    let push = OptimAdamwMultiPush {
        tensors: ps.len() as u32,
        chunks,
        chunk: CHUNK,
        w1,
        beta2,
        omb2,
        bc2_sqrt,
        neg_step,
        eps,
    };
    dispatch_indirect(rec, k, (&args, &indirect), &push, chunk_groups(chunks, max_groups))
}
