//! Fused attention (flash style: key tiles with an online softmax, the [Tq, Tk] score matrix is
//! never stored), forward and fused backward.
//!
//! Shapes (contiguous): q [B, Tq, Hq, D], k [B, Tk, Hkv, D], v [B, Tk, Hkv, Dv], o [B, Tq, Hq, Dv]
//! (Dv = [`Shape::dv`], the value head dim: multi-head latent attention has Dv != D), the row
//! log-sum-exp lse [B, Hq, Tq] saved for the backward. q, k, v, o, do, dq, dk, dv are stored in
//! [`Options::dtype`] (f32, f16 or bf16); scores, softmax and accumulation are f32, and lse, delta,
//! the ALiBi slopes are f32 (the key mask int32). Query head `h` uses kv head `h / G` with
//! `G = Hq / Hkv` (MHA, GQA, MQA). D, Dv ≤ 576 (the paged decode: ≤ 256).
//!
//! Query `i` (0-based) sits at absolute position `qpos = i + Tk − Tq` (a KV-cache decode step is
//! Tq = 1). Options: scale; causal (`j ≤ qpos`); key padding mask kmask [B, Tk] int32
//! (1 keep, 0 masked); sliding window W (`qpos − j < W`, 0 = off); chunk C (Llama 4's chunked
//! attention: `⌊j/C⌋ = ⌊qpos/C⌋`, 0 = off); logit softcap c
//! (`s → c·tanh(s/c)` after scaling, before masks and ALiBi, 0 = off); ALiBi slopes [Hq]
//! (`+ slope_h · (j − qpos)`); learned sinks [Hq] f32 (gpt-oss, granite_swa: head h's logit
//! `s_h` joins every row's softmax denominator and takes no value, so
//! `o = Σ_j e^(S_j) v_j / (Σ_j e^(S_j) + e^(s_h))`, and the saved lse includes it; the backward
//! kernels then need no change, and [`sinks::backward`] gives `ds`).
//!
//! A fully masked query row (every key masked) gets o = 0, lse = [`LSE_MASKED`] (−1e30, finite
//! so it never makes NaN) and zero gradients; with sinks its lse is `s_h` (the sink takes all
//! the weight) and o is still 0.
//!
//! The backward is two deterministic dispatches without atomics: `bwd_dq` (one workgroup per
//! query tile; also writes delta = rowsum(do ⊙ o) [B, Hq, Tq]) then `bwd_dkdv` (one workgroup per
//! key tile, looping over the G query heads of its kv head and the query tiles).

pub mod coopmat2;
pub mod decode;
pub mod decode_latent;
pub mod decode_lean;
pub mod reference;
pub mod rope_store;
pub mod sinks;

use vkformers_vk::{read, write, Arg, BufferView, KernelCode, Recorder, Result};

use crate::code::{self, AttentionFwdPush};
use crate::dtype::DType;
use crate::launch::{dispatch, err_named as fail};

/// lse written for a fully masked query row.
pub const LSE_MASKED: f32 = -1.0e30;

/// Largest head dimension the fused forward and backward kernels support (DeepSeek's absorbed
/// MLA head is 512 + 64 = 576).
pub const MAX_HEAD_DIM: u32 = code::defines::attention_fwd_d576::DMAX;

// Flag bits of attention.glsl (every forward and backward variant, see the tests).
use code::defines::attention_fwd_d64 as flag_bits;
const FLAG_CAUSAL: u32 = flag_bits::ATTN_CAUSAL;
const FLAG_KMASK: u32 = flag_bits::ATTN_KMASK;
const FLAG_ALIBI: u32 = flag_bits::ATTN_ALIBI;
const FLAG_SINKS: u32 = flag_bits::ATTN_SINKS;
use crate::launch::MAX_GROUPS_32 as MAX_GROUPS;

/// Sizes of one attention call.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Shape {
    pub batch: u32,
    pub tq: u32,
    pub tk: u32,
    pub hq: u32,
    pub hkv: u32,
    /// Head dimension of q and k, 1..=256.
    pub d: u32,
    /// Head dimension of v and o, 1..=256 (`d` but for multi-head latent attention).
    pub dv: u32,
}

impl Shape {
    fn q_len(&self) -> u64 {
        u64::from(self.batch) * u64::from(self.tq) * u64::from(self.hq) * u64::from(self.d)
    }

    fn kv_len(&self) -> u64 {
        u64::from(self.batch) * u64::from(self.tk) * u64::from(self.hkv) * u64::from(self.d)
    }

    /// Elements of o / do `[B, Tq, Hq, Dv]`.
    fn o_len(&self) -> u64 {
        u64::from(self.batch) * u64::from(self.tq) * u64::from(self.hq) * u64::from(self.dv)
    }

    /// Elements of v / dv `[B, Tk, Hkv, Dv]`.
    fn v_len(&self) -> u64 {
        u64::from(self.batch) * u64::from(self.tk) * u64::from(self.hkv) * u64::from(self.dv)
    }

    /// The head dim the kernel variant must hold: the wider of `d` and `dv`.
    fn d_max(&self) -> u32 {
        self.d.max(self.dv)
    }

    fn lse_len(&self) -> u64 {
        u64::from(self.batch) * u64::from(self.hq) * u64::from(self.tq)
    }
}

/// Options of an attention call; see the module docs for their meaning.
#[derive(Clone, Copy, Debug)]
pub struct Options<'a> {
    /// Score scale, usually `1/sqrt(D)`.
    pub scale: f32,
    pub causal: bool,
    /// Sliding window W, 0 = off.
    pub window: u32,
    /// Chunked attention C (Llama 4), 0 = off: query position p sees key j only when
    /// `floor(j / C) == floor(p / C)` (with causal: `C·floor(p / C) <= j <= p`).
    pub chunk: u32,
    /// Logit softcap c, 0 = off.
    pub softcap: f32,
    /// Key padding mask [B, Tk] of int32 (1 keep, 0 masked).
    pub kmask: Option<BufferView<'a>>,
    /// ALiBi slopes [Hq] of f32.
    pub alibi: Option<BufferView<'a>>,
    /// Learned sink logits [Hq] of f32 (read by the forwards only).
    pub sinks: Option<BufferView<'a>>,
    /// Storage type of q, k, v, o, do, dq, dk, dv.
    pub dtype: DType,
}

impl Options<'_> {
    /// Scale `1/sqrt(d)`, no masks or extras.
    pub fn new(d: u32) -> Self {
        Options {
            scale: 1.0 / (d.max(1) as f32).sqrt(),
            causal: false,
            window: 0,
            chunk: 0,
            softcap: 0.0,
            kmask: None,
            alibi: None,
            sinks: None,
            dtype: DType::F32,
        }
    }
}

/// q, k, v of an attention call.
#[derive(Clone, Copy, Debug)]
pub struct Qkv<'a> {
    /// [B, Tq, Hq, D]
    pub q: BufferView<'a>,
    /// [B, Tk, Hkv, D]
    pub k: BufferView<'a>,
    /// [B, Tk, Hkv, Dv]
    pub v: BufferView<'a>,
}

/// What the forward writes and the backward reads.
#[derive(Clone, Copy, Debug)]
pub struct Saved<'a> {
    /// [B, Tq, Hq, Dv]
    pub o: BufferView<'a>,
    /// [B, Hq, Tq]
    pub lse: BufferView<'a>,
}

/// What the backward writes.
#[derive(Clone, Copy, Debug)]
pub struct Grads<'a> {
    /// [B, Tq, Hq, D]
    pub dq: BufferView<'a>,
    /// [B, Tk, Hkv, D]
    pub dk: BufferView<'a>,
    /// [B, Tk, Hkv, Dv]
    pub dv: BufferView<'a>,
    /// Work buffer [B, Hq, Tq]: receives delta = rowsum(do ⊙ o).
    pub delta: BufferView<'a>,
}

/// Tile sizes of one kernel variant: rows of the tile a workgroup owns (x of the grid).
struct Variant {
    code: &'static KernelCode,
    rows: u32,
}

/// Variant index by head dimension: d64, d128, d256, d576.
fn dim_class(kernel: &str, d: u32) -> Result<usize> {
    match d {
        1..=64 => Ok(0),
        65..=128 => Ok(1),
        129..=256 => Ok(2),
        257..=MAX_HEAD_DIM => Ok(3),
        _ => Err(fail(kernel, format!("head dim {d} outside 1..={MAX_HEAD_DIM}"))),
    }
}

/// Kernel variants of one attention kernel: `[storage type][head-dim class]` (f32, f16, bf16 ×
/// d64, d128, d256, d576; see the shaders' variants).
type Variants = [[&'static KernelCode; 4]; 3];

/// Kernel variant by storage type and head dimension; `rows` are the tile rows of each head-dim
/// class (the f32 variants' `BQ`, or `BK` for dk/dv: the same for every storage type, see the
/// tests).
fn pick(d: u32, dtype: DType, kernel: &str, codes: &Variants, rows: [u32; 4]) -> Result<Variant> {
    let class = dim_class(kernel, d)?;
    let by_dtype = match dtype {
        DType::F32 => &codes[0],
        DType::F16 => &codes[1],
        DType::BF16 => &codes[2],
    };
    Ok(Variant { code: by_dtype[class], rows: rows[class] })
}

fn fwd_variant(d: u32, dtype: DType) -> Result<Variant> {
    let codes = [
        [&code::ATTENTION_FWD_D64, &code::ATTENTION_FWD_D128, &code::ATTENTION_FWD_D256, &code::ATTENTION_FWD_D576],
        [
            &code::ATTENTION_FWD_D64_F16,
            &code::ATTENTION_FWD_D128_F16,
            &code::ATTENTION_FWD_D256_F16,
            &code::ATTENTION_FWD_D576_F16,
        ],
        [
            &code::ATTENTION_FWD_D64_BF16,
            &code::ATTENTION_FWD_D128_BF16,
            &code::ATTENTION_FWD_D256_BF16,
            &code::ATTENTION_FWD_D576_BF16,
        ],
    ];
    use code::defines::{attention_fwd_d128 as d128, attention_fwd_d256 as d256};
    use code::defines::{attention_fwd_d576 as d576, attention_fwd_d64 as d64};
    pick(d, dtype, "attention/fwd", &codes, [d64::BQ, d128::BQ, d256::BQ, d576::BQ])
}

fn dq_variant(d: u32, dtype: DType) -> Result<Variant> {
    let codes = [
        [
            &code::ATTENTION_BWD_DQ_D64,
            &code::ATTENTION_BWD_DQ_D128,
            &code::ATTENTION_BWD_DQ_D256,
            &code::ATTENTION_BWD_DQ_D576,
        ],
        [
            &code::ATTENTION_BWD_DQ_D64_F16,
            &code::ATTENTION_BWD_DQ_D128_F16,
            &code::ATTENTION_BWD_DQ_D256_F16,
            &code::ATTENTION_BWD_DQ_D576_F16,
        ],
        [
            &code::ATTENTION_BWD_DQ_D64_BF16,
            &code::ATTENTION_BWD_DQ_D128_BF16,
            &code::ATTENTION_BWD_DQ_D256_BF16,
            &code::ATTENTION_BWD_DQ_D576_BF16,
        ],
    ];
    use code::defines::{attention_bwd_dq_d128 as d128, attention_bwd_dq_d256 as d256};
    use code::defines::{attention_bwd_dq_d576 as d576, attention_bwd_dq_d64 as d64};
    pick(d, dtype, "attention/bwd_dq", &codes, [d64::BQ, d128::BQ, d256::BQ, d576::BQ])
}

fn dkdv_variant(d: u32, dtype: DType) -> Result<Variant> {
    let codes = [
        [
            &code::ATTENTION_BWD_DKDV_D64,
            &code::ATTENTION_BWD_DKDV_D128,
            &code::ATTENTION_BWD_DKDV_D256,
            &code::ATTENTION_BWD_DKDV_D576,
        ],
        [
            &code::ATTENTION_BWD_DKDV_D64_F16,
            &code::ATTENTION_BWD_DKDV_D128_F16,
            &code::ATTENTION_BWD_DKDV_D256_F16,
            &code::ATTENTION_BWD_DKDV_D576_F16,
        ],
        [
            &code::ATTENTION_BWD_DKDV_D64_BF16,
            &code::ATTENTION_BWD_DKDV_D128_BF16,
            &code::ATTENTION_BWD_DKDV_D256_BF16,
            &code::ATTENTION_BWD_DKDV_D576_BF16,
        ],
    ];
    use code::defines::{attention_bwd_dkdv_d128 as d128, attention_bwd_dkdv_d256 as d256};
    use code::defines::{attention_bwd_dkdv_d576 as d576, attention_bwd_dkdv_d64 as d64};
    pick(d, dtype, "attention/bwd_dkdv", &codes, [d64::BK, d128::BK, d256::BK, d576::BK])
}

/// Checks that `v` holds `elems` f32 (or int32) values.
fn check_view(kernel: &str, what: &str, v: &BufferView<'_>, elems: u64) -> Result<()> {
    check_view_of(kernel, what, v, elems, DType::F32)
}

/// Checks that `v` holds `elems` values of storage type `dt`.
fn check_view_of(kernel: &str, what: &str, v: &BufferView<'_>, elems: u64, dt: DType) -> Result<()> {
    check_len(kernel, what, v, elems, dt.bytes())
}

/// Checks that `v` holds `elems` values of `bytes` bytes each (the decode kernels' views).
fn check_len(kernel: &str, what: &str, v: &BufferView<'_>, elems: u64, bytes: u64) -> Result<()> {
    if v.len != elems * bytes {
        return Err(fail(
            kernel,
            format!("{what}: view of {} bytes, the shape needs {} ({elems} × {bytes})", v.len, elems * bytes),
        ));
    }
    Ok(())
}

/// Checks sizes, head grouping, options and index ranges common to every attention kernel.
fn check_shape(kernel: &str, s: &Shape, opt: &Options<'_>) -> Result<()> {
    if s.batch == 0 || s.tq == 0 || s.tk == 0 || s.hq == 0 || s.hkv == 0 {
        return Err(fail(kernel, format!("empty shape {s:?}")));
    }
    dim_class(kernel, s.d)?;
    dim_class(kernel, s.dv)?;
    if !s.hq.is_multiple_of(s.hkv) {
        return Err(fail(kernel, format!("hq {} is not a multiple of hkv {}", s.hq, s.hkv)));
    }
    if s.q_len().max(s.kv_len()) >= 1 << 32 || s.batch > MAX_GROUPS || s.hq > MAX_GROUPS {
        return Err(fail(kernel, format!("shape {s:?} too large (2^32 elements per tensor, 65535 batch/heads)")));
    }
    if s.tq.max(s.tk) > i32::MAX as u32 / 2 || opt.window.max(opt.chunk) > i32::MAX as u32 / 2 {
        return Err(fail(kernel, "lengths, window or chunk beyond 2^30".into()));
    }
    check_softcap(kernel, opt.softcap)?;
    if let Some(m) = &opt.kmask {
        check_view(kernel, "kmask [B, Tk]", m, u64::from(s.batch) * u64::from(s.tk))?;
    }
    if let Some(a) = &opt.alibi {
        check_view(kernel, "alibi slopes [Hq]", a, u64::from(s.hq))?;
    }
    if let Some(a) = &opt.sinks {
        check_view(kernel, "sinks [Hq]", a, u64::from(s.hq))?;
    }
    Ok(())
}

/// An error unless the logit softcap `c` is 0 (off) or a finite positive value.
fn check_softcap(kernel: &str, c: f32) -> Result<()> {
    if !(c >= 0.0 && c.is_finite()) {
        return Err(fail(kernel, format!("softcap {c} is not a finite value >= 0")));
    }
    Ok(())
}

fn check_qkv(kernel: &str, s: &Shape, x: &Qkv<'_>, dt: DType) -> Result<()> {
    check_view_of(kernel, "q [B, Tq, Hq, D]", &x.q, s.q_len(), dt)?;
    check_view_of(kernel, "k [B, Tk, Hkv, D]", &x.k, s.kv_len(), dt)?;
    check_view_of(kernel, "v [B, Tk, Hkv, Dv]", &x.v, s.v_len(), dt)
}

fn check_saved(kernel: &str, s: &Shape, saved: &Saved<'_>, dt: DType) -> Result<()> {
    check_view_of(kernel, "o [B, Tq, Hq, Dv]", &saved.o, s.o_len(), dt)?;
    check_view(kernel, "lse [B, Hq, Tq]", &saved.lse, s.lse_len())
}

/// The checks of a forward (every view, the shape and options), under the name of the kernel
/// `name`.
fn check_forward(name: &str, (x, out): (&Qkv<'_>, &Saved<'_>), s: &Shape, opt: &Options<'_>) -> Result<()> {
    check_shape(name, s, opt)?;
    check_qkv(name, s, x, opt.dtype)?;
    check_saved(name, s, out, opt.dtype)
}

/// How the backward's errors name `do` and `dv`: `[.., Dv]`, or `[.., D]` where the kernels
/// need Dv = D (cooperative matrix 2, checked before).
type ValueLabels = (&'static str, &'static str);

/// The checks of a backward (every view, the shape and options), under the name of the kernel
/// `name`; `do` and `dv` named as `labels` says.
#[allow(clippy::too_many_arguments)]
fn check_backward(
    name: &str,
    (x, saved, d_o): (&Qkv<'_>, &Saved<'_>, &BufferView<'_>),
    g: &Grads<'_>,
    s: &Shape,
    opt: &Options<'_>,
    (do_label, dv_label): ValueLabels,
) -> Result<()> {
    let dt = opt.dtype;
    check_shape(name, s, opt)?;
    check_qkv(name, s, x, dt)?;
    check_saved(name, s, saved, dt)?;
    check_view_of(name, do_label, d_o, s.o_len(), dt)?;
    check_view_of(name, "dq [B, Tq, Hq, D]", &g.dq, s.q_len(), dt)?;
    check_view_of(name, "dk [B, Tk, Hkv, D]", &g.dk, s.kv_len(), dt)?;
    check_view_of(name, dv_label, &g.dv, s.v_len(), dt)?;
    check_view(name, "delta [B, Hq, Tq]", &g.delta, s.lse_len())
}

/// The pointers of the forward kernels (`fwd.comp` and its `_cm2` twin). Unused optional
/// buffers are never read; q stands in for their pointer.
fn forward_args<'a>(x: &Qkv<'a>, out: &Saved<'a>, opt: &Options<'a>) -> [Arg<'a>; 8] {
    let optional = |v: Option<BufferView<'a>>| read(v.unwrap_or(x.q));
    [
        read(x.q),
        read(x.k),
        read(x.v),
        optional(opt.kmask),
        optional(opt.alibi),
        optional(opt.sinks),
        write(out.o),
        write(out.lse),
    ]
}

/// The pointers of the dq kernel and of the dk/dv kernel (`bwd_dq.comp`, `bwd_dkdv.comp` and
/// their `_cm2` twins; `bwd_dkdv_cm2` appends its partials), q standing in for absent masks.
fn backward_args<'a>(
    x: &Qkv<'a>,
    (saved, d_o): (&Saved<'a>, BufferView<'a>),
    g: &Grads<'a>,
    opt: &Options<'a>,
) -> ([Arg<'a>; 10], [Arg<'a>; 10]) {
    let kmask = opt.kmask.unwrap_or(x.q);
    let alibi = opt.alibi.unwrap_or(x.q);
    let (q, k, v) = (read(x.q), read(x.k), read(x.v));
    let dq =
        [q, k, v, read(saved.o), read(d_o), read(saved.lse), read(kmask), read(alibi), write(g.delta), write(g.dq)];
    let dkdv = [q, k, v, read(d_o), read(saved.lse), read(g.delta), read(kmask), read(alibi), write(g.dk), write(g.dv)];
    (dq, dkdv)
}

/// Grid of `rows`-row tiles over `n` rows, heads, batch.
fn grid(kernel: &str, n: u32, rows: u32, heads: u32, batch: u32) -> Result<[u32; 3]> {
    let x = n.div_ceil(rows);
    if x > MAX_GROUPS {
        return Err(fail(kernel, format!("{n} rows need {x} workgroups, above {MAX_GROUPS}")));
    }
    Ok([x, heads, batch])
}

/// The scalars of every attention forward and backward push block (the block of `fwd.comp`,
/// `bwd_dq.comp`, `bwd_dkdv.comp` and their `_cm2` twins; `bwd_dkdv_cm2` adds `parts`).
fn params(s: &Shape, opt: &Options<'_>) -> AttentionFwdPush {
    let mut flags = 0;
    if opt.causal {
        flags |= FLAG_CAUSAL;
    }
    if opt.kmask.is_some() {
        flags |= FLAG_KMASK;
    }
    if opt.alibi.is_some() {
        flags |= FLAG_ALIBI;
    }
    if opt.sinks.is_some() {
        flags |= FLAG_SINKS;
    }
    AttentionFwdPush {
        tq: s.tq,
        tk: s.tk,
        hq: s.hq,
        hkv: s.hkv,
        d: s.d,
        flags,
        window: opt.window,
        scale: opt.scale,
        softcap: opt.softcap,
        dvh: s.dv,
        chunk: opt.chunk,
    }
}

/// Forward: `o = softmax(score(q kᵀ) + masks) v` and `lse` (row log-sum-exp), from q
/// [B, Tq, Hq, D], k [B, Tk, Hkv, D], v [B, Tk, Hkv, Dv] into o [B, Tq, Hq, Dv], lse [B, Hq, Tq].
pub fn forward(rec: &mut Recorder, x: &Qkv<'_>, out: &Saved<'_>, s: &Shape, opt: &Options<'_>) -> Result<()> {
    let var = fwd_variant(s.d_max(), opt.dtype)?;
    let name = var.code.name;
    check_forward(name, (x, out), s, opt)?;
    let groups = grid(name, s.tq, var.rows, s.hq, s.batch)?;
    dispatch(rec, var.code, &[], &forward_args(x, out, opt), &params(s, opt), groups)
}

/// Backward of [`forward`]: from q, k, v, the forward's o and lse, and `d_o` = dL/do
/// [B, Tq, Hq, Dv], writes dq [B, Tq, Hq, D], dk [B, Tk, Hkv, D], dv [B, Tk, Hkv, Dv] (summed over the query heads
/// of each kv head) and the work buffer delta [B, Hq, Tq]. Two dispatches: `bwd_dq`, `bwd_dkdv`.
/// With sinks the same kernels run on the sink-aware lse; [`sinks::backward`] adds ds.
pub fn backward(
    rec: &mut Recorder,
    x: &Qkv<'_>,
    saved: &Saved<'_>,
    d_o: BufferView<'_>,
    g: &Grads<'_>,
    s: &Shape,
    opt: &Options<'_>,
) -> Result<()> {
    let dt = opt.dtype;
    let dq_var = dq_variant(s.d_max(), dt)?;
    let dkdv_var = dkdv_variant(s.d_max(), dt)?;
    let labels = ("do [B, Tq, Hq, Dv]", "dv [B, Tk, Hkv, Dv]");
    for name in [dq_var.code.name, dkdv_var.code.name] {
        check_backward(name, (x, saved, &d_o), g, s, opt, labels)?;
    }
    let p = params(s, opt);
    let dq_groups = grid(dq_var.code.name, s.tq, dq_var.rows, s.hq, s.batch)?;
    let dkdv_groups = grid(dkdv_var.code.name, s.tk, dkdv_var.rows, s.hkv, s.batch)?;
    let (dq_args, dkdv_args) = backward_args(x, (saved, d_o), g, opt);
    dispatch(rec, dq_var.code, &[], &dq_args, &p, dq_groups)?;
    dispatch(rec, dkdv_var.code, &[], &dkdv_args, &p, dkdv_groups)
}

#[cfg(test)]
mod tests {
    use super::*;

    /// Every variant the launchers pick takes the head dim it is picked for and owns the rows per
    /// workgroup the grid is sized by: `BQ` query rows for the forward and dq kernels, `BK` key
    /// rows for dk/dv.
    #[test]
    fn tile_rows_are_the_shader_defines() {
        type Picker = fn(u32, DType) -> Result<Variant>;
        let kernels: [(Picker, &str); 3] = [(fwd_variant, "BQ"), (dq_variant, "BQ"), (dkdv_variant, "BK")];
        for (variant, rows) in kernels {
            for dtype in [DType::F32, DType::F16, DType::BF16] {
                for d in [1, 64, 65, 128, 129, 256, 257, MAX_HEAD_DIM] {
                    let v = variant(d, dtype).expect("a variant");
                    let define = |n: &str| {
                        code::defines::value(v.code.name, n).unwrap_or_else(|| panic!("{}: {n}", v.code.name))
                    };
                    assert!(define("DMAX") >= d, "{} for d {d}", v.code.name);
                    assert_eq!(define(rows), v.rows, "{}", v.code.name);
                    let flags = [("ATTN_CAUSAL", FLAG_CAUSAL), ("ATTN_KMASK", FLAG_KMASK)];
                    for (name, bit) in flags.into_iter().chain([("ATTN_ALIBI", FLAG_ALIBI), ("ATTN_SINKS", FLAG_SINKS)])
                    {
                        assert_eq!(define(name), bit, "{}: {name}", v.code.name);
                    }
                }
            }
        }
    }
}
