//! Multi-head latent attention's absorbed decode over a paged cache of latent rows wider than
//! [`super::decode`]'s 256 columns (`shaders/attention/decode_latent.comp`): DeepSeek-V2/V3 and
//! Kimi-K2 cache `[c | k_rot]` of 512 + 64 = 576 values a position, MiniCPM3 256 + 32 = 288.
//!
//! Layout: one pool `[num_blocks · block_size, D]` of latent rows (one key head shared by all Hq
//! query heads; the values are each row's first `Dv` columns, the latent c), the block table
//! `[B, max_blocks]` and lengths `[B]` int32 of [`super::decode`]: row b's key j is pool row
//! `table[b, j / block_size] · block_size + j % block_size` for `j < lens[b]`, query i of row b sits
//! at `lens[b] − Tq + i`. q `[B, Tq, Hq, D]`, o `[B, Tq, Hq, Dv]` of [`DecodeOptions::act_dtype`],
//! lse `[B, Hq, Tq]` f32. Options as [`super::decode`] but learned sinks. Any Tq runs; the kernel
//! is made for few (each workgroup holds 16 query rows and reads every key of its split).
//!
//! Loads: rows of a multiple of 8 columns over a 16-byte-aligned pool are read with 16-byte loads,
//! the next key tile's in flight while the current one is scored ([`reads_wide`]); other widths
//! or alignments 4 elements at a time. `VKFORMERS_LATENT_WIDE=0` forces the element loads (an A/B
//! on one binary: `vkformers bench decode-latent`). On lavapipe (B 1, 32 heads, 1,024 keys, bf16)
//! a call went from ~47 ms to ~17 ms (16-byte loads) / ~19 ms (element loads).
//!
//! Split-KV: with [`splits`] > 1 each row's keys are cut into that many chunks, one workgroup
//! each, whose partial softmax statistics ([`work_floats`]) a second dispatch merges.

use vkformers_vk::{read, write, BufferView, KernelCode, Recorder, Result};

use super::decode::{check_rows, check_splits, DecodeOptions, RowCounts};
use super::{check_len, check_softcap, fail};
use crate::code::{self, AttentionDecodeLatentPush};
use crate::dtype::DType;
use crate::launch::dispatch;

/// Widest latent row the kernel takes (DeepSeek-V3's 512 + 64: `DMAX` of the d576 variants).
pub const MAX_LATENT_DIM: u32 = code::defines::attention_decode_latent_d576::DMAX;
/// Widest row of the d320 variants (`DMAX`).
const SMALL_LATENT_DIM: u32 = code::defines::attention_decode_latent_d320::DMAX;
/// Query rows of one workgroup (`QR` of decode_latent.comp).
const TILE_ROWS: u32 = code::defines::attention_decode_latent_d576::QR;
/// Workgroups one call should have before more splits stop paying (as [`super::decode`]).
const TARGET_GROUPS: u32 = 256;
/// Fewest keys a split should own: the score and value passes of a split are serial over its
/// 8-key tiles, so fewer keys would leave the merge as most of the work.
const MIN_SPLIT_KEYS: u32 = 64;
/// Most splits of one row.
pub const MAX_SPLITS: u32 = 64;

/// Flag bits of decode_latent.comp (the same in every variant, see the tests).
use code::defines::attention_decode_latent_d576 as flag_bits;
const FLAG_CAUSAL: u32 = flag_bits::ATTN_CAUSAL;
const FLAG_ALIBI: u32 = flag_bits::ATTN_ALIBI;
/// LATENT_WIDE of the kernel: the pool read with 16-byte loads, the next tile's in flight.
const FLAG_WIDE: u32 = flag_bits::LATENT_WIDE;
/// LATENT_QWIDE: q read 4 values a load.
const FLAG_QWIDE: u32 = flag_bits::LATENT_QWIDE;

/// Whether calls may take the 16-byte-load paths: yes unless `VKFORMERS_LATENT_WIDE=0` (read
/// once; forces the element path everywhere, for an A/B of the two on one binary).
fn wide_allowed() -> bool {
    static ON: std::sync::OnceLock<bool> = std::sync::OnceLock::new();
    *ON.get_or_init(|| std::env::var("VKFORMERS_LATENT_WIDE").map_or(true, |v| v != "0"))
}

/// The flags of the load paths: 16-byte pool loads need rows of a multiple of 8 elements (every
/// row then starts 16-byte aligned) and an aligned pool; 4-value q loads likewise (a chunk of 4
/// values at a multiple of 4 elements of an aligned q is 8- or 16-byte aligned).
pub fn load_flags(d: u32, x: &LatentInputs<'_>) -> u32 {
    if !wide_allowed() || !d.is_multiple_of(8) {
        return 0;
    }
    let pool = if x.pool.address().is_multiple_of(16) { FLAG_WIDE } else { 0 };
    let q = if x.q.address().is_multiple_of(16) { FLAG_QWIDE } else { 0 };
    pool | q
}

/// Whether a call of width `d` over these inputs reads the pool with 16-byte loads.
pub fn reads_wide(d: u32, x: &LatentInputs<'_>) -> bool {
    load_flags(d, x) & FLAG_WIDE != 0
}

/// Sizes of one call.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct LatentShape {
    pub batch: u32,
    /// New query rows per sequence.
    pub tq: u32,
    pub hq: u32,
    /// Width of q and of a latent row (`kv_lora_rank + qk_rope_head_dim`), 1..=576.
    pub d: u32,
    /// Value and output columns, the first `dv` of a latent row (`kv_lora_rank`), 1..=d.
    pub dv: u32,
    /// Positions per block.
    pub block_size: u32,
    /// Blocks in the pool.
    pub num_blocks: u32,
    /// Columns of the block table.
    pub max_blocks: u32,
}

impl LatentShape {
    fn rows(&self) -> u64 {
        u64::from(self.batch) * u64::from(self.tq) * u64::from(self.hq)
    }

    /// Query rows of a sequence (`Tq · Hq`) in tiles of [`TILE_ROWS`].
    fn row_tiles(&self) -> u32 {
        (self.tq * self.hq).div_ceil(TILE_ROWS)
    }
}

/// The inputs: new queries, the pool, the block table and the lengths.
#[derive(Clone, Copy, Debug)]
pub struct LatentInputs<'a> {
    /// [B, Tq, Hq, D]
    pub q: BufferView<'a>,
    /// [num_blocks · block_size, D]
    pub pool: BufferView<'a>,
    /// [B, max_blocks] int32 block ids.
    pub table: BufferView<'a>,
    /// [B] int32 keys per row, the new ones included.
    pub lens: BufferView<'a>,
}

/// The outputs, and the work buffer of split calls.
#[derive(Clone, Copy, Debug)]
pub struct LatentOutputs<'a> {
    /// [B, Tq, Hq, Dv]
    pub o: BufferView<'a>,
    /// [B, Hq, Tq] f32
    pub lse: BufferView<'a>,
    /// [`work_floats`] f32, needed when splits > 1.
    pub work: Option<BufferView<'a>>,
}

/// Splits of each row for a call whose longest row has `max_len` keys: enough workgroups to
/// fill a large GPU, no split under [`MIN_SPLIT_KEYS`] keys. A pure function of the sizes.
pub fn splits(s: &LatentShape, max_len: u32) -> u32 {
    let groups = s.batch.max(1) * s.row_tiles().max(1);
    let wanted = TARGET_GROUPS.div_ceil(groups);
    let most = max_len.div_ceil(MIN_SPLIT_KEYS).max(1);
    wanted.min(most).clamp(1, MAX_SPLITS)
}

/// f32 values of the work buffer of a call with `splits` splits: acc `[B, Tq·Hq, S, Dv]` and
/// (m, l) `[B, Tq·Hq, S, 2]`.
pub fn work_floats(s: &LatentShape, splits: u32) -> u64 {
    s.rows() * u64::from(splits) * (u64::from(s.dv) + 2)
}

/// The kernel for rows of `d` columns, a pool of `dt`, q and o of `act` (`dt`, or f32 over a
/// 16-bit pool); None for other pairs or rows over [`MAX_LATENT_DIM`].
fn main_code(d: u32, dt: DType, act: DType) -> Option<&'static KernelCode> {
    let codes = [
        [&code::ATTENTION_DECODE_LATENT_D320, &code::ATTENTION_DECODE_LATENT_D576],
        [&code::ATTENTION_DECODE_LATENT_D320_F16, &code::ATTENTION_DECODE_LATENT_D576_F16],
        [&code::ATTENTION_DECODE_LATENT_D320_BF16, &code::ATTENTION_DECODE_LATENT_D576_BF16],
        [&code::ATTENTION_DECODE_LATENT_D320_F16_Q32, &code::ATTENTION_DECODE_LATENT_D576_F16_Q32],
        [&code::ATTENTION_DECODE_LATENT_D320_BF16_Q32, &code::ATTENTION_DECODE_LATENT_D576_BF16_Q32],
    ];
    let row = match (dt, act) {
        (DType::F32, DType::F32) => 0,
        (DType::F16, DType::F16) => 1,
        (DType::BF16, DType::BF16) => 2,
        (DType::F16, DType::F32) => 3,
        (DType::BF16, DType::F32) => 4,
        _ => return None,
    };
    match d {
        1..=SMALL_LATENT_DIM => Some(codes[row][0]),
        _ if d <= MAX_LATENT_DIM => Some(codes[row][1]),
        _ => None,
    }
}

/// The merge of split partials, writing o of `act`.
fn merge_code(act: DType) -> &'static KernelCode {
    match act {
        DType::F32 => &code::ATTENTION_DECODE_LATENT_MERGE,
        DType::F16 => &code::ATTENTION_DECODE_LATENT_MERGE_F16,
        DType::BF16 => &code::ATTENTION_DECODE_LATENT_MERGE_BF16,
    }
}

fn check(
    kernel: &str,
    s: &LatentShape,
    x: &LatentInputs<'_>,
    out: &LatentOutputs<'_>,
    opt: &DecodeOptions<'_>,
) -> Result<()> {
    let sizes = [s.batch, s.tq, s.hq, s.d, s.dv, s.block_size, s.num_blocks, s.max_blocks];
    if sizes.contains(&0) || s.dv > s.d || s.d > MAX_LATENT_DIM {
        return Err(fail(kernel, format!("shape {s:?}: empty, dv > d, or d over {MAX_LATENT_DIM}")));
    }
    if opt.sinks.is_some() {
        return Err(fail(kernel, "learned sinks over a latent cache".into()));
    }
    let pool = u64::from(s.num_blocks) * u64::from(s.block_size) * u64::from(s.d);
    let table = u64::from(s.batch) * u64::from(s.max_blocks);
    let rows = u64::from(s.max_blocks) * u64::from(s.block_size);
    if (s.rows() * u64::from(s.d)).max(pool).max(table) >= 1 << 32
        || rows > i32::MAX as u64
        || s.batch > 65_535
        || u64::from(s.tq) * u64::from(s.hq) > 65_535
        || opt.window.max(opt.chunk) > i32::MAX as u32 / 2
    {
        return Err(fail(kernel, format!("shape {s:?} too large, or window {} too large", opt.window)));
    }
    check_softcap(kernel, opt.softcap)?;
    check_len(kernel, "q [B, Tq, Hq, D]", &x.q, s.rows() * u64::from(s.d), opt.act_dtype().bytes())?;
    check_len(kernel, "pool [NB·BS, D]", &x.pool, pool, opt.dtype.bytes())?;
    let counts = RowCounts { batch: s.batch, table, hq: s.hq, o: s.rows() * u64::from(s.dv), lse: s.rows() };
    check_rows(kernel, (&x.table, &x.lens), (&out.o, &out.lse), opt, counts)
}

/// Attention of `Tq` new queries per row over the latent cache, split `splits` ways (1 = one
/// pass; [`splits`] gives the usual choice; more than 1 needs `out.work` and adds the merge
/// dispatch).
pub fn forward(
    rec: &mut Recorder,
    x: &LatentInputs<'_>,
    out: &LatentOutputs<'_>,
    s: &LatentShape,
    opt: &DecodeOptions<'_>,
    splits: u32,
) -> Result<()> {
    let Some(code) = main_code(s.d, opt.dtype, opt.act_dtype()) else {
        let why = format!(
            "rows of {} columns, q and o of {:?} over a pool of {:?}: up to {MAX_LATENT_DIM} columns, \
             the same type or f32 over 16-bit",
            s.d, opt.act, opt.dtype
        );
        return Err(fail("attention/decode_latent", why));
    };
    check(code.name, s, x, out, opt)?;
    check_splits(code.name, splits, MAX_SPLITS)?;
    let work = match (splits, out.work) {
        (1, _) => None,
        (_, Some(w)) => {
            check_len(code.name, "work", &w, work_floats(s, splits), 4)?;
            Some(w)
        }
        _ => return Err(fail(code.name, format!("{splits} splits need a work buffer"))),
    };
    let flags = if opt.causal { FLAG_CAUSAL } else { 0 }
        | if opt.alibi.is_some() { FLAG_ALIBI } else { 0 }
        | load_flags(s.d, x);
    let params = AttentionDecodeLatentPush {
        tq: s.tq,
        hq: s.hq,
        d: s.d,
        dvh: s.dv,
        flags,
        window: opt.window,
        scale: opt.scale,
        softcap: opt.softcap,
        block_size: s.block_size,
        max_blocks: s.max_blocks,
        num_blocks: s.num_blocks,
        splits,
        chunk: opt.chunk,
    };
    // Unused pointers are never dereferenced; q stands in for them.
    let alibi = read(opt.alibi.unwrap_or(x.q));
    let common = [read(x.q), read(x.pool), read(x.table), read(x.lens), alibi];
    match work {
        None => {
            let args = [&common[..], &[write(out.o), write(out.lse), read(x.q)]].concat();
            dispatch(rec, code, &[], &args, &params, [1, s.row_tiles(), s.batch])
        }
        Some(w) => {
            let args = [&common[..], &[read(out.o), read(out.lse), write(w)]].concat();
            dispatch(rec, code, &[], &args, &params, [splits, s.row_tiles(), s.batch])?;
            let args = [&common[..], &[write(out.o), write(out.lse), read(w)]].concat();
            let rows = s.tq * s.hq;
            dispatch(rec, merge_code(opt.act_dtype()), &[], &args, &params, [rows, s.batch, 1])
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn shape(batch: u32, tq: u32, hq: u32) -> LatentShape {
        LatentShape { batch, tq, hq, d: 576, dv: 512, block_size: 16, num_blocks: 64, max_blocks: 8 }
    }

    /// Every kernel the table holds takes the rows it is picked for, in tiles of `TILE_ROWS`.
    #[test]
    fn launcher_sizes_are_the_shader_defines() {
        let define =
            |k: &KernelCode, d: &str| code::defines::value(k.name, d).unwrap_or_else(|| panic!("{}: {d}", k.name));
        let pairs = [DType::F32, DType::F16, DType::BF16].into_iter().flat_map(|dt| [(dt, dt), (dt, DType::F32)]);
        for (dt, act) in pairs {
            for d in [1, SMALL_LATENT_DIM, SMALL_LATENT_DIM + 1, MAX_LATENT_DIM] {
                let k = main_code(d, dt, act).expect("a kernel");
                assert!(define(k, "DMAX") >= d, "{}", k.name);
                assert_eq!(define(k, "QR"), TILE_ROWS, "{}", k.name);
                let flags = [("ATTN_CAUSAL", FLAG_CAUSAL), ("ATTN_ALIBI", FLAG_ALIBI)];
                for (name, bit) in flags.into_iter().chain([("LATENT_WIDE", FLAG_WIDE), ("LATENT_QWIDE", FLAG_QWIDE)]) {
                    assert_eq!(define(k, name), bit, "{}: {name}", k.name);
                }
            }
            assert!(main_code(MAX_LATENT_DIM + 1, dt, act).is_none());
        }
    }

    #[test]
    fn long_rows_of_few_sequences_are_split() {
        // DeepSeek-V3 at batch 1: 128 heads in 8 row tiles; 4096 keys -> 32 splits of 128 keys.
        assert_eq!(splits(&shape(1, 1, 128), 4096), 32);
        // Short rows keep 64 keys a split; a big batch fills the GPU unsplit.
        assert_eq!(splits(&shape(1, 1, 128), 100), 2);
        assert_eq!(splits(&shape(32, 1, 128), 4096), 1);
        // 16 heads: one row tile, capped at MAX_SPLITS.
        assert_eq!(splits(&shape(1, 1, 16), 1 << 20), MAX_SPLITS);
    }

    #[test]
    fn rows_of_a_sequence_tile_by_sixteen() {
        assert_eq!(shape(1, 1, 128).row_tiles(), 8);
        assert_eq!(shape(1, 3, 5).row_tiles(), 1);
        assert_eq!(shape(1, 4, 5).row_tiles(), 2);
    }
}
