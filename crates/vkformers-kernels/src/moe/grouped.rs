//! The grouped expert GEMMs (`shaders/moe/grouped_rows.comp`, `grouped_wgrad.comp`): shared-memory
//! tiles as `matmul/gemm.comp`, each workgroup owning a tile of ONE expert, found on the device
//! from `offsets [E + 1]` (no host loop, no host read of the counts). f32 accumulation; A and B
//! stored f32, f16 or bf16 ([`Storage`]); C and D f32. Deterministic: a fixed reduction order.

use vkformers_vk::{read, write, BufferView, Caps, KernelCode, Recorder, Result};

use super::expect_words;
use crate::code;
use crate::code::{MoeGroupedRowsPush, MoeGroupedWgradPush};
use crate::dtype::DType;
use crate::gemm_coopmat::{choose_engine, Elem, Engine};
use crate::launch::{check_storage, count, dispatch, err, MAX_GROUPS};

/// Storage types of the two operands (A: activations / L, B: expert weights / R).
#[derive(Clone, Copy, Debug, PartialEq, Eq, Default)]
pub struct Storage {
    pub a: DType,
    pub b: DType,
}

impl Storage {
    /// Both operands stored as `dt`.
    pub fn both(dt: DType) -> Self {
        Storage { a: dt, b: dt }
    }
}

/// Output tile of one workgroup (256 threads).
#[derive(Clone, Copy, Debug, PartialEq, Eq, Default)]
pub enum GroupTile {
    /// 128×128 when every dimension fills it on average and the storage has that variant.
    #[default]
    Auto,
    /// 64×64, BK 16, 4×4 per thread.
    T64,
    /// 128×128, BK 8, 8×8 per thread.
    T128,
    /// NVIDIA cooperative matrix 2 (tensor cores; both operands f16 or both bf16): 64×128 row
    /// tiles (128×128 when experts average 128 rows or more), 128×128 weight-gradient tiles.
    Coopmat2,
}

/// True when this device runs the cooperative-matrix-2 grouped GEMM for operands `st`: both
/// the same 16-bit type, and the dense GEMM would take a cooperative-matrix-2 engine for it
/// (the same capability test, `gemm_coopmat::choose_engine`).
pub fn coopmat2_supported(caps: &Caps, st: Storage) -> bool {
    let elem = match (st.a, st.b) {
        (DType::BF16, DType::BF16) => Elem::Bf16,
        (DType::F16, DType::F16) => Elem::F16,
        _ => return false,
    };
    choose_engine(caps, elem, 1, 1, 1).is_some_and(|e| e != Engine::Coopmat)
}

/// `tile` with Auto resolved to Coopmat2 where the device supports it for `st`, unless
/// `VKFORMERS_GROUPED_GEMM=portable` (to measure or rule out the tensor-core kernel).
fn engine_tile(caps: &Caps, st: Storage, tile: GroupTile) -> GroupTile {
    static PORTABLE: std::sync::OnceLock<bool> = std::sync::OnceLock::new();
    let portable = *PORTABLE.get_or_init(|| std::env::var("VKFORMERS_GROUPED_GEMM").is_ok_and(|v| v == "portable"));
    match tile {
        GroupTile::Auto if !portable && coopmat2_supported(caps, st) => GroupTile::Coopmat2,
        t => t,
    }
}

/// The cooperative-matrix-2 kernel of a grouped product and its (BM, BN).
fn cm2_kernel(st: Storage, wgrad: bool, big: bool) -> (&'static KernelCode, usize, usize) {
    let bf = st.a == DType::BF16;
    // A kernel with the block (BM, BN) its shader is compiled for.
    macro_rules! tile {
        ($code:ident, $defines:ident) => {
            (&code::$code, code::defines::$defines::BM as usize, code::defines::$defines::BN as usize)
        };
    }
    match (wgrad, big, bf) {
        (true, _, true) => tile!(MOE_GROUPED_WGRAD_CM2_BF16, moe_grouped_wgrad_cm2_bf16),
        (true, _, false) => tile!(MOE_GROUPED_WGRAD_CM2_F16, moe_grouped_wgrad_cm2_f16),
        (false, true, true) => tile!(MOE_GROUPED_ROWS_CM2_BF16_128, moe_grouped_rows_cm2_bf16_128),
        (false, true, false) => tile!(MOE_GROUPED_ROWS_CM2_F16_128, moe_grouped_rows_cm2_f16_128),
        (false, false, true) => tile!(MOE_GROUPED_ROWS_CM2_BF16, moe_grouped_rows_cm2_bf16),
        (false, false, false) => tile!(MOE_GROUPED_ROWS_CM2_F16, moe_grouped_rows_cm2_f16),
    }
}

fn rows_kernel(st: Storage, big: bool) -> Option<&'static KernelCode> {
    use DType::*;
    Some(match (st.a, st.b, big) {
        (F32, F32, false) => &code::MOE_GROUPED_ROWS_F32,
        (F32, F16, false) => &code::MOE_GROUPED_ROWS_F32_F16,
        (F32, BF16, false) => &code::MOE_GROUPED_ROWS_F32_BF16,
        (F16, F16, false) => &code::MOE_GROUPED_ROWS_F16,
        (BF16, BF16, false) => &code::MOE_GROUPED_ROWS_BF16,
        (F32, F32, true) => &code::MOE_GROUPED_ROWS_F32_128,
        (F32, BF16, true) => &code::MOE_GROUPED_ROWS_F32_BF16_128,
        (BF16, BF16, true) => &code::MOE_GROUPED_ROWS_BF16_128,
        _ => return None,
    })
}

fn wgrad_kernel(st: Storage, big: bool) -> Option<&'static KernelCode> {
    use DType::*;
    Some(match (st.a, st.b, big) {
        (F32, F32, false) => &code::MOE_GROUPED_WGRAD_F32,
        (F16, F16, false) => &code::MOE_GROUPED_WGRAD_F16,
        (F32, F16, false) => &code::MOE_GROUPED_WGRAD_F32_F16,
        (F32, BF16, false) => &code::MOE_GROUPED_WGRAD_F32_BF16,
        (F16, F32, false) => &code::MOE_GROUPED_WGRAD_F16_F32,
        (BF16, F32, false) => &code::MOE_GROUPED_WGRAD_BF16_F32,
        (BF16, BF16, false) => &code::MOE_GROUPED_WGRAD_BF16,
        (F32, F32, true) => &code::MOE_GROUPED_WGRAD_F32_128,
        (BF16, BF16, true) => &code::MOE_GROUPED_WGRAD_BF16_128,
        _ => return None,
    })
}

/// Tile edge (BM = BN) of the portable kernels' `_128` variants and of the others.
const BIG_TILE: usize = code::defines::moe_grouped_rows_f32_128::BM as usize;
const SMALL_TILE: usize = code::defines::moe_grouped_rows_f32::BM as usize;

/// The kernel and its tile edge for `tile` (Auto: 128 when `fill` — the average extent of the
/// output per expert along both dimensions — reaches 128 and a 128 variant exists).
fn choose(
    pick: fn(Storage, bool) -> Option<&'static KernelCode>,
    st: Storage,
    tile: GroupTile,
    fill: usize,
) -> Option<(&'static KernelCode, usize)> {
    let big = match tile {
        GroupTile::Auto => fill >= BIG_TILE && pick(st, true).is_some(),
        GroupTile::T64 => false,
        GroupTile::T128 => true,
        GroupTile::Coopmat2 => return None,
    };
    pick(st, big).map(|k| (k, if big { BIG_TILE } else { SMALL_TILE }))
}

fn no_variant(st: Storage, tile: GroupTile) -> vkformers_vk::VkError {
    err(&code::MOE_GROUPED_ROWS_F32, format!("no grouped GEMM for A {:?}, B {:?}, tile {tile:?}", st.a, st.b))
}

fn expect_elems(k: &KernelCode, what: &str, v: &BufferView<'_>, n: u32, dt: DType) -> Result<()> {
    if v.len != u64::from(n) * dt.bytes() {
        return Err(err(k, format!("{what}: view of {} bytes, expected {n} {dt:?} values", v.len)));
    }
    Ok(())
}

/// `C [rows, cols] = A [rows, inner] ·_e op(B_e)` where rows `offsets[e]..offsets[e + 1]`
/// belong to expert e; B `[E, cols, inner]` (`trans_b`, the nn.Linear layout) or
/// `[E, inner, cols]`. `dims = (rows, inner, cols, E)`.
#[allow(clippy::too_many_arguments)]
pub fn grouped_rows(
    rec: &mut Recorder,
    (a, b, c): (BufferView<'_>, BufferView<'_>, BufferView<'_>),
    offsets: BufferView<'_>,
    dims: (usize, usize, usize, usize),
    trans_b: bool,
    st: Storage,
    tile: GroupTile,
) -> Result<()> {
    let (rows, inner, cols, experts) = dims;
    let fill = (rows / experts.max(1)).min(cols);
    let (kc, bm, bn) = match engine_tile(rec.caps(), st, tile) {
        GroupTile::Coopmat2 if coopmat2_supported(rec.caps(), st) => cm2_kernel(st, false, fill >= 128),
        GroupTile::Coopmat2 => return Err(no_variant(st, tile)),
        t => choose(rows_kernel, st, t, fill).map(|(k, b)| (k, b, b)).ok_or_else(|| no_variant(st, tile))?,
    };
    check_storage(rec, kc, if st.a == DType::F32 { st.b } else { st.a })?;
    expect_elems(kc, "a", &a, count(kc, &[rows, inner])?, st.a)?;
    expect_elems(kc, "b", &b, count(kc, &[experts, inner, cols])?, st.b)?;
    expect_words(kc, "c", &c, count(kc, &[rows, cols])?.into())?;
    expect_words(kc, "offsets", &offsets, experts as u64 + 1)?;
    // At most sum_e ceil(count_e / BM) <= ceil(rows / BM) + E row tiles hold slots.
    let row_tiles = count(kc, &[rows.div_ceil(bm) + experts])?;
    let col_tiles = cols.div_ceil(bn).max(1) as u32;
    // grouped_rows_cm2.comp declares the same block (one struct, aliased).
    let p = MoeGroupedRowsPush {
        rows: rows as u32,
        inner: inner as u32,
        cols: cols as u32,
        experts: experts as u32,
        row_tiles,
    };
    let groups = [col_tiles, row_tiles.clamp(1, MAX_GROUPS as u32), 1];
    let args = [read(a), read(b), write(c), read(offsets)];
    dispatch(rec, kc, &[u32::from(trans_b)], &args, &p, groups)
}

/// `D [E, li, rj]`: `D_e = L_eᵀ · R_e` over each expert's contiguous slots (`offsets [E + 1]`);
/// L `[S, li]`, R `[S, rj]`, `dims = (S, li, rj, E)`. Overwrites D (zeros for an idle expert).
pub fn grouped_wgrad(
    rec: &mut Recorder,
    (l, r, d): (BufferView<'_>, BufferView<'_>, BufferView<'_>),
    offsets: BufferView<'_>,
    dims: (usize, usize, usize, usize),
    st: Storage,
    tile: GroupTile,
) -> Result<()> {
    let (slots, li, rj, experts) = dims;
    let (kc, bm, bn) = match engine_tile(rec.caps(), st, tile) {
        GroupTile::Coopmat2 if coopmat2_supported(rec.caps(), st) => cm2_kernel(st, true, true),
        GroupTile::Coopmat2 => return Err(no_variant(st, tile)),
        t => choose(wgrad_kernel, st, t, li.min(rj)).map(|(k, b)| (k, b, b)).ok_or_else(|| no_variant(st, tile))?,
    };
    check_storage(rec, kc, if st.a == DType::F32 { st.b } else { st.a })?;
    expect_elems(kc, "l", &l, count(kc, &[slots, li])?, st.a)?;
    expect_elems(kc, "r", &r, count(kc, &[slots, rj])?, st.b)?;
    expect_words(kc, "d", &d, count(kc, &[experts, li, rj])?.into())?;
    expect_words(kc, "offsets", &offsets, experts as u64 + 1)?;
    let p = MoeGroupedWgradPush { experts: experts as u32, li: li as u32, rj: rj as u32 };
    let groups =
        [rj.div_ceil(bn).max(1) as u32, li.div_ceil(bm).max(1) as u32, experts.clamp(1, MAX_GROUPS as usize) as u32];
    dispatch(rec, kc, &[], &[read(l), read(r), write(d), read(offsets)], &p, groups)
}

/// Floating-point operations of a grouped product over `rows` slots (2 per multiply-add).
pub fn flops(rows: usize, inner: usize, cols: usize) -> f64 {
    2.0 * rows as f64 * inner as f64 * cols as f64
}

#[cfg(test)]
mod tests {
    use super::*;

    /// Every kernel the tables pick has the square tile edge (BM = BN) or block the launcher
    /// sizes the grid and the expert row tiles by.
    #[test]
    fn tiles_are_the_shader_defines() {
        let define =
            |k: &KernelCode, d: &str| code::defines::value(k.name, d).unwrap_or_else(|| panic!("{}: {d}", k.name));
        let types = [DType::F32, DType::F16, DType::BF16];
        let pairs = types.iter().flat_map(|&a| types.iter().map(move |&b| Storage { a, b }));
        for st in pairs {
            for pick in [rows_kernel as fn(Storage, bool) -> Option<&'static KernelCode>, wgrad_kernel] {
                for tile in [GroupTile::T64, GroupTile::T128] {
                    if let Some((k, edge)) = choose(pick, st, tile, 0) {
                        assert_eq!((define(k, "BM"), define(k, "BN")), (edge as u32, edge as u32), "{}", k.name);
                    }
                }
            }
        }
        for st in [Storage::both(DType::F16), Storage::both(DType::BF16)] {
            for (wgrad, big) in [(false, false), (false, true), (true, false), (true, true)] {
                let (k, bm, bn) = cm2_kernel(st, wgrad, big);
                assert_eq!((define(k, "BM"), define(k, "BN")), (bm as u32, bn as u32), "{}", k.name);
            }
        }
    }
}
