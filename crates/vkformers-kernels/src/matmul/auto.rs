//! One entry point for every product of the tensor layer: the tensor-core GEMM
//! (`gemm_coopmat`: NV cooperative matrix 2, else KHR cooperative matrix) where the operands are
//! 16-bit and the device has it, else the portable tiled GEMM (any dtype; on a device without
//! tensor cores 16-bit operands are read as packed words and widened, so the numerics are the
//! same everywhere and lavapipe proves them).

use vkformers_vk::{BufferView, Caps, Recorder, Result};

use super::{gemm, DType, GemmDesc};
use crate::gemm_coopmat::{choose_engine, gemm_coopmat, CoopGemm, Elem, Tuning, FULL_GRID, SKINNY_ROWS};

/// The tensor-core element type of a storage type (`None` for f32).
fn elem_of(dtype: DType) -> Option<Elem> {
    match dtype {
        DType::F32 => None,
        DType::F16 => Some(Elem::F16),
        DType::BF16 => Some(Elem::Bf16),
    }
}

/// `desc` as a tensor-core product, when the device has an engine for its type and the
/// descriptor fits that engine (32-bit element offsets, beta 0 or 1, the KHR kernel's
/// multiple-of-8 strides); `None` sends it to the portable GEMM. A pure function of `Caps`.
pub fn coop_plan(caps: &Caps, d: &GemmDesc) -> Option<CoopGemm> {
    let elem = elem_of(d.dtype)?;
    let engine = choose_engine(caps, elem, d.m, d.n, d.batch)?;
    if d.k == 0 || !(d.beta == 0.0 || d.beta == 1.0) {
        return None;
    }
    // A 16-bit C in the operands' own type (the kernels' 16-bit store), only written.
    let c_half = match d.c_dtype {
        DType::F32 => false,
        c if c == d.dtype && d.beta == 0.0 => true,
        _ => return None,
    };
    let small = |v: u64| u32::try_from(v).ok();
    let batched = d.batch > 1;
    let stride = |s: u64| if batched { small(s) } else { Some(0) };
    let plan = CoopGemm {
        m: d.m,
        n: d.n,
        k: d.k,
        batch: d.batch,
        trans_a: d.trans_a,
        trans_b: d.trans_b,
        lda: d.lda,
        ldb: d.ldb,
        ldc: d.ldc,
        a_off: small(d.a_offset)?,
        b_off: small(d.b_offset)?,
        c_off: small(d.c_offset)?,
        a_bstride: stride(d.stride_a)?,
        b_bstride: stride(d.stride_b)?,
        c_bstride: stride(d.stride_c)?,
        alpha: d.alpha,
        beta_one: d.beta == 1.0,
        c_half,
        elem,
        engine,
        tuning: Tuning::default(),
    };
    let eights = [plan.lda, plan.ldb, plan.a_off, plan.b_off, plan.a_bstride, plan.b_bstride];
    if engine.is_khr() && !eights.iter().all(|v| v.is_multiple_of(8)) {
        return None;
    }
    Some(plan)
}

/// Workgroups a product should give the device before splitting K is not worth it: about two
/// waves of a large GPU (an H200 has 132 multiprocessors).
const TARGET_TILES: u64 = 256;

/// Split-K for a thin product with a long K (weight gradients `dW = dYᵀ · X`: a small
/// `[out, in]` C summed over every token): `S` batches each multiply a `K / S` slice into an f32
/// workspace `[S, M, N]`, and a second pass sums the slices in a fixed order (deterministic).
/// Returns `(S, workspace bytes)` when it pays: C packed, batch 1, no bias, beta 0 or 1, C
/// under `TARGET_TILES` 128×128 tiles, and K divisible into slices of at least 512 that are
/// multiples of 64. A pure function of the descriptor.
///
/// A product of at most [`SKINNY_ROWS`] rows (a decode step: M = sequences, weights [N, K]) counts
/// 64 x 64 tiles, splits only under one tile per SM ([`FULL_GRID`]), and then into as many as 8
/// slices: on an H200 a batch-64 step's q/k/v, o and down products ran fastest split 4-8 ways and
/// its gate/up and LM head unsplit (docs/bench/h200-2026-12-04-j/log2).
pub fn split_k_plan(d: &GemmDesc) -> Option<(u32, u64)> {
    split_k_plan_for(d, skinny_split_k())
}

/// [`split_k_plan`] with the choice for products of at most [`SKINNY_ROWS`] rows given:
/// `split_skinny` false leaves them unsplit. Their split was chosen on the products' own times
/// (`vkformers bench gemm --split-k`), which leave out the second pass's column sum and the
/// barrier before it: a batch-64 decode step of the 1.1B shape runs 66 such sums (~4.5 µs each
/// on an H200, `docs/bench/h200-2026-12-04-j/log5`), so the whole step decides.
pub fn split_k_plan_for(d: &GemmDesc, split_skinny: bool) -> Option<(u32, u64)> {
    let skinny = d.m <= SKINNY_ROWS;
    if skinny && !split_skinny {
        return None;
    }
    let tiles = if skinny {
        u64::from(d.m.div_ceil(64)) * u64::from(d.n.div_ceil(64))
    } else {
        u64::from(d.m.div_ceil(128)) * u64::from(d.n.div_ceil(128))
    };
    let enough = if skinny { FULL_GRID } else { TARGET_TILES };
    let packed = d.ldc == d.n && d.c_offset == 0 && u64::from(d.m) * u64::from(d.n) <= u64::from(u32::MAX);
    if d.batch != 1 || d.has_bias || !packed || !(d.beta == 0.0 || d.beta == 1.0) || tiles >= enough {
        return None;
    }
    let want = if skinny { 8 } else { TARGET_TILES.div_ceil(tiles).min(16) as u32 };
    let splits = [16u32, 8, 4, 2]
        .into_iter()
        .filter(|&s| s <= want.next_power_of_two())
        .find(|&s| d.k.is_multiple_of(s * 64) && d.k / s >= 512)?;
    Some((splits, u64::from(splits) * u64::from(d.m) * u64::from(d.n) * 4))
}

/// Whether products of at most [`SKINNY_ROWS`] rows are split: yes unless
/// `VKFORMERS_SKINNY_SPLIT_K=0` (read once), to compare whole decode steps both ways.
fn skinny_split_k() -> bool {
    static ON: std::sync::OnceLock<bool> = std::sync::OnceLock::new();
    *ON.get_or_init(|| std::env::var("VKFORMERS_SKINNY_SPLIT_K").map_or(true, |v| v != "0"))
}

/// Records `desc` split `splits` ways along K (see [`split_k_plan`]) through `workspace`
/// (f32, at least `splits · M · N` values); C of `desc.c_dtype`.
pub fn gemm_split_k(
    rec: &mut Recorder,
    desc: &GemmDesc,
    splits: u32,
    a: BufferView<'_>,
    b: BufferView<'_>,
    workspace: BufferView<'_>,
    c: BufferView<'_>,
) -> Result<()> {
    let slice = desc.k / splits;
    let mut part = *desc;
    part.k = slice;
    part.batch = splits;
    part.beta = 0.0;
    // Slice z starts at K index z·slice: a row of a transposed A / plain B, a column otherwise.
    part.stride_a = u64::from(slice) * if desc.trans_a { u64::from(desc.lda) } else { 1 };
    part.stride_b = u64::from(slice) * if desc.trans_b { 1 } else { u64::from(desc.ldb) };
    part.stride_c = u64::from(desc.m) * u64::from(desc.n);
    part.c_dtype = DType::F32; // the slices' f32 partial products
    gemm_auto(rec, &part, a, b, None, workspace)?;
    let mn = desc.m * desc.n;
    // The fixed-order sum writes C in its type (a 16-bit C rounded as the cast kernels round).
    crate::norm::col_sum(rec, workspace, c, splits, mn, desc.beta == 1.0, desc.c_dtype)
}

/// Records `C = alpha · op(A) · op(B) (+ bias) (+ beta · C)` on the best engine for `desc`
/// (see the module docs). Same arguments and checks as [`gemm`].
pub fn gemm_auto(
    rec: &mut Recorder,
    desc: &GemmDesc,
    a: BufferView<'_>,
    b: BufferView<'_>,
    bias: Option<BufferView<'_>>,
    c: BufferView<'_>,
) -> Result<()> {
    if desc.m == 0 || desc.n == 0 || desc.batch == 0 {
        return gemm(rec, desc, a, b, bias, c);
    }
    match coop_plan(rec.caps(), desc) {
        Some(plan) if desc.has_bias == bias.is_some() => gemm_coopmat(rec, &plan, a, b, bias, c),
        _ => gemm(rec, desc, a, b, bias, c),
    }
}
