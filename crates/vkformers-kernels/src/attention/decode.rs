//! Decode attention over a paged KV cache (`shaders/attention/decode*.comp`), for few new query
//! rows per sequence (a decode step, Tq = 1; chunked or speculative steps, Tq ≤ ~16; any Tq runs).
//!
//! Layout: keys and values live in pools `[num_blocks, block_size, Hkv, D]` shared by every
//! sequence; row b's key j (its own position, no padding) is pool row
//! `table[b, j / block_size] · block_size + j % block_size`, for `j < lens[b]` (table
//! `[B, max_blocks]` and lens `[B]` int32, on the device). Query i of row b sits at position
//! `lens[b] − Tq + i`: the new keys are stored ([`store`]) before attention reads them.
//! Options as the flash kernels ([`super`]): scale, causal (within the new rows), sliding window,
//! softcap, ALiBi, learned sinks (joined once per row: by the kernel when unsplit, else by the
//! merge of the splits); the key padding mask has no equivalent to pass, positions a row never had
//! are not in its table. q, k, v, o are stored in [`DecodeOptions::dtype`] (f32 math); lse
//! `[B, Hq, Tq]` is f32, [`super::LSE_MASKED`] for a query that sees no key.
//!
//! Split-KV ("flash decoding"): with [`splits`] > 1, each row's keys are cut into that many chunks,
//! each run by its own workgroup, which write partial softmax statistics to a work buffer
//! ([`work_floats`]); the last workgroup of each row tile to finish (counted in
//! [`DecodeOutputs::counters`]) merges them in the same dispatch: one long sequence then fills
//! the GPU, with one dispatch a call.
//!
//! Two kernels run these calls: `decode.comp` (every shape) and, where it applies and is
//! preferred (`VKFORMERS_DECODE_LEAN=1`, or [`super::decode_lean::with_kernel`]), the
//! latency-lean `decode_lean.comp` ([`super::decode_lean`]); the same inputs, outputs and work
//! buffers serve both.

use vkformers_vk::{read, read_write, write, Arg, BufferView, Caps, KernelCode, Recorder, Result};

use super::decode_lean::{self, Kernel};
use super::{check_len, check_softcap, fail};
use crate::code;
use crate::code::{AttentionDecodePush, AttentionDecodePushRope, AttentionDecodeRopePush, AttentionDecodeStorePush};
use crate::dtype::DType;
use crate::launch::{dispatch, dispatch_elems, variant};
use crate::rope::{Rope, RopeLayout};

/// Largest head dimension of the paged decode kernels (`DMAX` of the d256 variants; the
/// forward/backward go to [`super::MAX_HEAD_DIM`]).
pub const MAX_DECODE_HEAD_DIM: u32 = code::defines::attention_decode_d256::DMAX;

/// Query rows of one kv head per workgroup (`BQ` of decode.comp): a decode step's GQA group
/// (G = 4..8 on most models) in one tile.
const TILE_ROWS: u32 = code::defines::attention_decode_d128::BQ;

/// `VKFORMERS_DECODE_TILE_ROWS=N` (1..=8, read once): every call's row tiles of N rows, for an
/// A/B on a GPU; `None` unset (the rows of [`tile_rows_for`]'s policy).
fn tile_rows_env() -> Option<u32> {
    static ROWS: std::sync::OnceLock<Option<u32>> = std::sync::OnceLock::new();
    *ROWS.get_or_init(|| {
        std::env::var("VKFORMERS_DECODE_TILE_ROWS")
            .ok()
            .and_then(|v| v.parse().ok())
            .filter(|r| (1..=TILE_ROWS).contains(r))
    })
}

/// Unsplit workgroups a lean call should have before its row tiles stop shrinking: each of its
/// workgroups runs a key tile for all the rows of its tile as one serial chain (scores, maxima,
/// probabilities, P·V), so a call with few (batch, kv head) pairs runs faster on more, shorter
/// chains. H100, TinyLlama's 32 query heads over 4 kv heads at batch 1, 640 keys, 5 splits
/// (`docs/bench/h100-2026-12-06-a`): 8 rows a tile (4 row tiles) 15.9 µs a call, 4 rows 13.1,
/// 2 rows (16) 12.0, 1 row (32) 13.0; whole decode steps 527, 559, 573, 576 tokens/s.
const LEAN_FEW_TILES: u32 = 16;

/// Rows of a row tile for `kernel`'s calls of `s`: `VKFORMERS_DECODE_TILE_ROWS` when set; the
/// tiled kernel [`TILE_ROWS`] (the variants' register rows); the lean kernel [`TILE_ROWS`]
/// halved while the call has fewer than [`LEAN_FEW_TILES`] unsplit workgroups (batch 1 of an
/// 8-query-head GQA group over 4 kv heads: 2 rows, 16 workgroups; batch 4 and up: 8). A pure
/// function of the sizes and the kernel.
pub fn tile_rows_for(s: &DecodeShape, kernel: Kernel) -> u32 {
    if let Some(rows) = tile_rows_env() {
        return rows;
    }
    let mut rows = TILE_ROWS;
    if kernel == Kernel::Lean {
        while rows > 1 && unsplit_groups(s, rows) < LEAN_FEW_TILES {
            rows /= 2;
        }
    }
    rows
}

/// Workgroups one dispatch should have before more splits stop paying (about two per SM on the
/// largest GPUs). Each workgroup pays a fixed ~10 µs on the H200 whatever its keys (`vkformers
/// bench decode` with every phase probed out), and the merge of the splits costs more: at batch
/// 64 (256 workgroups unsplit, 600 keys) 1 split took 61 µs, 2 splits 90 µs, 4 splits 108 µs
/// (with a second, combining dispatch then), so the target was lowered from 512.
const TARGET_GROUPS: u32 = 256;
/// Fewest keys a split should own: one tile of decode.comp (a key per thread, 128 threads), so
/// no split has idle threads in its score pass. The old kernel's 32-key tiles took ~480 µs per
/// call on an H200 (1.1B shape, batch 1: 8 workgroups of 256 keys, each key tile a serial
/// chain of 6 barriers and per-thread loops over D and the tile): latency, not bandwidth.
const MIN_SPLIT_KEYS: u32 = TILE;
/// Key tile (= threads, `NT`) of the `_t64` variants, and the fewest keys of their splits.
pub const SMALL_TILE: u32 = code::defines::attention_decode_d64_t64::NT;
/// Key tile (`NT`) of the main and fused variants.
pub const TILE: u32 = code::defines::attention_decode_d128::NT;
/// Unsplit workgroups (batch · kv heads · row tiles) below which a call of head dim ≤ 128 takes
/// the 64-key tiles: batch 1 of a GQA model (4..8 kv heads) has far fewer workgroups than SMs,
/// so each split's serial chain of tiles and barriers is the call's latency; halving it (and
/// doubling the splits) spreads a 640-key cache over 40 workgroups instead of 20.
const SMALL_TILE_GROUPS: u32 = 64;
/// Most splits of one row.
pub const MAX_SPLITS: u32 = 64;

/// Flag bits of decode.comp (the same in every variant, see the tests).
use code::defines::attention_decode_d128 as flag_bits;
const FLAG_CAUSAL: u32 = flag_bits::ATTN_CAUSAL;
const FLAG_ALIBI: u32 = flag_bits::ATTN_ALIBI;
/// K and V rows are read 8 elements per 16-byte load (D % 8 == 0, pools 16-byte aligned).
const FLAG_WIDE: u32 = flag_bits::ATTN_WIDE;
/// Learned sinks are read (folded by the unsplit workgroup, or by the merge of the splits).
const FLAG_SINKS: u32 = flag_bits::DECODE_SINKS;
/// `out.o16` is written (`DECODE_O16`).
const FLAG_O16: u32 = flag_bits::DECODE_O16;

/// Sizes of one decode-attention call.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct DecodeShape {
    pub batch: u32,
    /// New query rows per sequence.
    pub tq: u32,
    pub hq: u32,
    pub hkv: u32,
    /// Head dimension of q and k, 1..=256.
    pub d: u32,
    /// Head dimension of the values and o, 1..=256 (`d` but for MLA's absorbed decode).
    pub dv: u32,
    /// Elements of a v pool head row, `>= dv`: `dv` for a pool of its own, `d` when the values
    /// are the first `dv` columns of the k pool's rows (MLA's latent `[c | k_rot]`).
    pub v_row: u32,
    /// Positions per block.
    pub block_size: u32,
    /// Blocks in each pool.
    pub num_blocks: u32,
    /// Columns of the block table.
    pub max_blocks: u32,
}

impl DecodeShape {
    fn q_len(&self) -> u64 {
        u64::from(self.batch) * u64::from(self.tq) * u64::from(self.hq) * u64::from(self.d)
    }

    fn pool_len(&self) -> u64 {
        u64::from(self.num_blocks) * u64::from(self.block_size) * u64::from(self.hkv) * u64::from(self.d)
    }

    fn v_pool_len(&self) -> u64 {
        u64::from(self.num_blocks) * u64::from(self.block_size) * u64::from(self.hkv) * u64::from(self.v_row)
    }

    fn o_len(&self) -> u64 {
        u64::from(self.batch) * u64::from(self.tq) * u64::from(self.hq) * u64::from(self.dv)
    }

    /// The head dim the kernel variant must hold: the wider of `d` and `dv`.
    fn d_max(&self) -> u32 {
        self.d.max(self.dv)
    }

    fn lse_len(&self) -> u64 {
        u64::from(self.batch) * u64::from(self.hq) * u64::from(self.tq)
    }

    /// Query rows that share one kv head (`G · Tq`), in tiles of `rows` rows.
    fn row_tiles_of(&self, rows: u32) -> u32 {
        ((self.hq / self.hkv.max(1)) * self.tq).div_ceil(rows.max(1))
    }

    /// Row tiles of `kernel`'s calls ([`tile_rows_for`]).
    fn row_tiles_for(&self, kernel: Kernel) -> u32 {
        self.row_tiles_of(tile_rows_for(self, kernel))
    }

    /// Row tiles of the tiled kernel's calls.
    #[cfg(test)]
    fn row_tiles(&self) -> u32 {
        self.row_tiles_for(Kernel::Tiled)
    }

    /// The most row tiles either kernel gives a call (what the counters and limits must hold).
    fn most_row_tiles(&self) -> u32 {
        self.row_tiles_for(Kernel::Lean).max(self.row_tiles_for(Kernel::Tiled))
    }
}

/// Options; see the module docs.
#[derive(Clone, Copy, Debug)]
pub struct DecodeOptions<'a> {
    pub scale: f32,
    pub causal: bool,
    /// Sliding window W, 0 = off.
    pub window: u32,
    /// Chunked attention C (Llama 4), 0 = off: key j visible from position p only when
    /// `floor(j / C) == floor(p / C)`.
    pub chunk: u32,
    /// Logit softcap c, 0 = off.
    pub softcap: f32,
    /// ALiBi slopes [Hq] of f32.
    pub alibi: Option<BufferView<'a>>,
    /// Learned sink logits [Hq] of f32 (see [`super::Options::sinks`]).
    pub sinks: Option<BufferView<'a>>,
    /// Storage type of the pools (k, v) and, unless `act` says otherwise, of q and o.
    pub dtype: DType,
    /// Storage type of q and o when it differs from the pools': only f32 with 16-bit pools
    /// (f32 activations over a 16-bit cache, no cast before or after). `None`: `dtype`.
    pub act: Option<DType>,
}

impl DecodeOptions<'_> {
    /// Scale `1/sqrt(d)`, causal, nothing else.
    pub fn new(d: u32) -> Self {
        DecodeOptions {
            scale: 1.0 / (d.max(1) as f32).sqrt(),
            causal: true,
            window: 0,
            chunk: 0,
            softcap: 0.0,
            alibi: None,
            sinks: None,
            dtype: DType::F32,
            act: None,
        }
    }
}

/// The inputs: new queries, the pools, the block table and the lengths.
#[derive(Clone, Copy, Debug)]
pub struct PagedInputs<'a> {
    /// [B, Tq, Hq, D]
    pub q: BufferView<'a>,
    /// [num_blocks, block_size, Hkv, D]
    pub k: BufferView<'a>,
    /// [num_blocks, block_size, Hkv, D]
    pub v: BufferView<'a>,
    /// [B, max_blocks] int32 block ids (entries past a row's length are never read).
    pub table: BufferView<'a>,
    /// [B] int32 keys per row, the new ones included.
    pub lens: BufferView<'a>,
}

/// The outputs, and the work buffers of split calls.
#[derive(Clone, Copy, Debug)]
pub struct DecodeOutputs<'a> {
    /// [B, Tq, Hq, D]
    pub o: BufferView<'a>,
    /// [B, Hq, Tq] f32
    pub lse: BufferView<'a>,
    /// [`work_floats`] f32, needed when splits > 1.
    pub work: Option<BufferView<'a>>,
    /// [`counter_words`] uint32 (at least), needed when splits > 1: the splits of each row tile
    /// done so far. Zero before the first call; each call leaves it zero (the merging workgroup
    /// resets its tile's counter), so one buffer serves every later call.
    pub counters: Option<BufferView<'a>>,
    /// [B, Tq, Hq, Dv] in the pools' 16-bit type, for f32 o over 16-bit pools (`act` f32): o
    /// written again there, rounded as the cast kernels round (the copy a tensor-core product
    /// reading o next would otherwise cast). None: not written.
    pub o16: Option<BufferView<'a>>,
}

/// Head-dim class: d64, d128, d256 (d checked by the caller).
fn class(d: u32) -> usize {
    match d {
        0..=64 => 0,
        65..=128 => 1,
        _ => 2,
    }
}

fn dtype_index(dt: DType) -> usize {
    match dt {
        DType::F32 => 0,
        DType::F16 => 1,
        DType::BF16 => 2,
    }
}

impl DecodeOptions<'_> {
    /// Storage type of q and o.
    pub fn act_dtype(&self) -> DType {
        self.act.unwrap_or(self.dtype)
    }
}

/// The 64-key-tile kernel for head dim `d` ≤ 128 (see [`main_code`]).
fn small_code(d: u32, dt: DType, act: DType) -> Option<&'static KernelCode> {
    let codes = [
        [&code::ATTENTION_DECODE_D64_T64, &code::ATTENTION_DECODE_D128_T64],
        [&code::ATTENTION_DECODE_D64_F16_T64, &code::ATTENTION_DECODE_D128_F16_T64],
        [&code::ATTENTION_DECODE_D64_BF16_T64, &code::ATTENTION_DECODE_D128_BF16_T64],
        [&code::ATTENTION_DECODE_D64_F16_Q32_T64, &code::ATTENTION_DECODE_D128_F16_Q32_T64],
        [&code::ATTENTION_DECODE_D64_BF16_Q32_T64, &code::ATTENTION_DECODE_D128_BF16_Q32_T64],
    ];
    let row = code_row(dt, act)?;
    codes[row].get(class(d)).copied()
}

/// Row of the kernel tables for pools of `dt` and q, o of `act`.
fn code_row(dt: DType, act: DType) -> Option<usize> {
    match (dt, act) {
        (dt, act) if dt == act => Some(dtype_index(dt)),
        (DType::F16, DType::F32) => Some(3),
        (DType::BF16, DType::F32) => Some(4),
        _ => None,
    }
}

/// The main kernel for head dim `d`, pools of `dt`, q and o of `act` (`dt`, or f32 over 16-bit
/// pools; None otherwise).
fn main_code(d: u32, dt: DType, act: DType) -> Option<&'static KernelCode> {
    let codes = [
        [&code::ATTENTION_DECODE_D64, &code::ATTENTION_DECODE_D128, &code::ATTENTION_DECODE_D256],
        [&code::ATTENTION_DECODE_D64_F16, &code::ATTENTION_DECODE_D128_F16, &code::ATTENTION_DECODE_D256_F16],
        [&code::ATTENTION_DECODE_D64_BF16, &code::ATTENTION_DECODE_D128_BF16, &code::ATTENTION_DECODE_D256_BF16],
        [
            &code::ATTENTION_DECODE_D64_F16_Q32,
            &code::ATTENTION_DECODE_D128_F16_Q32,
            &code::ATTENTION_DECODE_D256_F16_Q32,
        ],
        [
            &code::ATTENTION_DECODE_D64_BF16_Q32,
            &code::ATTENTION_DECODE_D128_BF16_Q32,
            &code::ATTENTION_DECODE_D256_BF16_Q32,
        ],
    ];
    let row = code_row(dt, act)?;
    if row == 4 && d <= 128 && small_groups() {
        return Some([&code::ATTENTION_DECODE_D64_BF16_Q32_G4, &code::ATTENTION_DECODE_D128_BF16_Q32_G4][class(d)]);
    }
    Some(codes[row][class(d)])
}

/// Whether f32 q/o over bf16 pools (a bf16 model's generation), head dims up to 128, take the
/// `_g4` variants (groups of 4 loads; faster inside a decode step on an H200, see the shader):
/// yes unless `VKFORMERS_DECODE_GROUPS=8` (the groups of 8 the other variants keep).
fn small_groups() -> bool {
    static ON: std::sync::OnceLock<bool> = std::sync::OnceLock::new();
    *ON.get_or_init(|| std::env::var("VKFORMERS_DECODE_GROUPS").map_or(true, |v| v != "8"))
}

/// The store kernel for new keys of `src` into pools of `dt` (the same type, or f32 into 16-bit).
fn store_code(src: DType, dt: DType) -> Option<&'static KernelCode> {
    match (src, dt) {
        (src, dt) if src == dt => Some(variant(
            dt,
            [&code::ATTENTION_DECODE_STORE_F32, &code::ATTENTION_DECODE_STORE_F16, &code::ATTENTION_DECODE_STORE_BF16],
        )),
        (DType::F32, DType::F16) => Some(&code::ATTENTION_DECODE_STORE_F16_IN32),
        (DType::F32, DType::BF16) => Some(&code::ATTENTION_DECODE_STORE_BF16_IN32),
        _ => None,
    }
}

/// Unsplit workgroups of a call of `s` with row tiles of `rows` rows: batch · kv heads · row tiles.
fn unsplit_groups(s: &DecodeShape, rows: u32) -> u32 {
    s.batch.max(1) * s.hkv.max(1) * s.row_tiles_of(rows).max(1)
}

/// Unsplit workgroups of `kernel`'s calls.
fn groups(s: &DecodeShape, kernel: Kernel) -> u32 {
    unsplit_groups(s, tile_rows_for(s, kernel))
}

/// Key tile [`forward`] runs `s` with: [`TILE`], or with `VKFORMERS_DECODE_TILE=64` the policy of
/// [`tile_keys_for`] with small tiles on.
pub fn tile_keys(s: &DecodeShape) -> u32 {
    tile_keys_for(s, small_tiles_allowed())
}

/// The key tile for `s`: [`SMALL_TILE`] when `small` and the head dim is ≤ 128 and the call has
/// fewer than `SMALL_TILE_GROUPS` unsplit workgroups, else [`TILE`]. A pure function of the
/// sizes, so the choice is the same on every device.
pub fn tile_keys_for(s: &DecodeShape, small: bool) -> u32 {
    if small && s.d_max() <= 128 && groups(s, Kernel::Tiled) < SMALL_TILE_GROUPS {
        SMALL_TILE
    } else {
        TILE
    }
}

/// Whether calls with few workgroups may take the 64-key tile: only with
/// `VKFORMERS_DECODE_TILE=64`. On the H200 it was slower (TinyLlama at batch 1, 640 keys: 64.3 µs a
/// call on 40 workgroups against 50.5 µs with 128-key tiles on 20, `generate --profile`), so the
/// 128-key tile stays the default until a faster small tile exists.
fn small_tiles_allowed() -> bool {
    static ALLOWED: std::sync::OnceLock<bool> = std::sync::OnceLock::new();
    *ALLOWED.get_or_init(|| std::env::var("VKFORMERS_DECODE_TILE").is_ok_and(|v| v == "64"))
}

/// Specialization constant 0 of the tiled decode kernel (1 of the lean one):
/// `VKFORMERS_DECODE_PROBE` bits drop parts of it to time the rest (tiled: 1 K loads, 2 the V
/// pass, 4 the slot sums, 8 the max/probability passes; lean: 1 the K and V loads, 2 the P.V
/// pass, 4 the merge of the splits, 8 the scores, maxima and probabilities); wrong results, for
/// `vkformers bench decode` only. 0 (no probe) unless set.
fn probe() -> u32 {
    static PROBE: std::sync::OnceLock<u32> = std::sync::OnceLock::new();
    *PROBE.get_or_init(|| std::env::var("VKFORMERS_DECODE_PROBE").ok().and_then(|v| v.parse().ok()).unwrap_or(0))
}

/// Splits of each row for a call whose longest row has `max_len` keys, with [`tile_keys`]' tile
/// (or, where the lean kernel is preferred, its tile: [`super::decode_lean::tile_keys`]), for the
/// kernel [`super::decode_lean::preferred`] names (no device: tiled unless forced or set).
pub fn splits(s: &DecodeShape, max_len: u32) -> u32 {
    splits_for_kernel(s, max_len, decode_lean::preferred())
}

/// [`splits`] for `kernel`: callers pass the kernel a call on their device takes
/// ([`super::decode_lean::preferred_on`]: the lean one on GPUs unless set otherwise), so the split
/// counts are the ones chosen for the kernel that runs them.
pub fn splits_for_kernel(s: &DecodeShape, max_len: u32, kernel: Kernel) -> u32 {
    if decode_lean::plans(s, kernel) {
        return splits_least(s, max_len, decode_lean::split_keys(s.d), Kernel::Lean);
    }
    splits_for(s, max_len, tile_keys(s))
}

/// Splits of each row for a call whose longest row has `max_len` keys on `tile`-key tiles: enough
/// workgroups to fill a large GPU (`TARGET_GROUPS`), but no split under one key tile
/// (`MIN_SPLIT_KEYS` for the main tile). A pure function of the sizes.
pub fn splits_for(s: &DecodeShape, max_len: u32, tile: u32) -> u32 {
    splits_least(s, max_len, if tile == SMALL_TILE { SMALL_TILE } else { MIN_SPLIT_KEYS }, Kernel::Tiled)
}

/// [`splits_for`] with splits of at least `least` keys, for `kernel`'s row tiles.
fn splits_least(s: &DecodeShape, max_len: u32, least: u32, kernel: Kernel) -> u32 {
    let wanted = TARGET_GROUPS.div_ceil(groups(s, kernel));
    let most = max_len.div_ceil(least.max(1)).max(1);
    wanted.min(most).clamp(1, MAX_SPLITS)
}

/// uint32 counters of a split call ([`DecodeOutputs::counters`]): one per row tile and batch row
/// (`B · Hkv · row tiles`, with the row tiles of whichever kernel has more).
pub fn counter_words(s: &DecodeShape) -> u64 {
    u64::from(s.batch) * u64::from(s.hkv) * u64::from(s.most_row_tiles())
}

/// f32 values of the work buffer of a call with `splits` splits: acc `[B, Hq, Tq, S, Dv]` and
/// (m, l) `[B, Hq, Tq, S, 2]`.
pub fn work_floats(s: &DecodeShape, splits: u32) -> u64 {
    s.lse_len() * u64::from(splits) * (u64::from(s.dv) + 2)
}

fn check(
    kernel: &str,
    s: &DecodeShape,
    x: &PagedInputs<'_>,
    out: &DecodeOutputs<'_>,
    opt: &DecodeOptions<'_>,
) -> Result<()> {
    if s.batch == 0
        || s.tq == 0
        || s.hq == 0
        || s.hkv == 0
        || s.block_size == 0
        || s.num_blocks == 0
        || s.max_blocks == 0
    {
        return Err(fail(kernel, format!("empty shape {s:?}")));
    }
    if s.d == 0 || s.d_max() > MAX_DECODE_HEAD_DIM || s.dv == 0 || !s.hq.is_multiple_of(s.hkv) {
        return Err(fail(
            kernel,
            format!(
                "head dims {} / {} outside 1..={MAX_DECODE_HEAD_DIM} or hq {} not a multiple of hkv {}",
                s.d, s.dv, s.hq, s.hkv
            ),
        ));
    }
    if s.v_row < s.dv {
        return Err(fail(kernel, format!("v pool rows of {} elements hold no {} values", s.v_row, s.dv)));
    }
    let table = u64::from(s.batch) * u64::from(s.max_blocks);
    let rows = u64::from(s.max_blocks) * u64::from(s.block_size);
    if s.q_len().max(s.pool_len()).max(s.v_pool_len()).max(s.o_len()).max(table) >= 1 << 32
        || rows > i32::MAX as u64
        || s.batch > 65_535
    {
        return Err(fail(kernel, format!("shape {s:?} too large (2^32 elements per tensor, 65535 rows)")));
    }
    if u64::from(s.hkv) * u64::from(s.most_row_tiles()) > 65_535 || opt.window.max(opt.chunk) > i32::MAX as u32 / 2 {
        return Err(fail(kernel, format!("shape {s:?}: too many query tiles, or window {} too large", opt.window)));
    }
    check_softcap(kernel, opt.softcap)?;
    let dt = opt.dtype.bytes();
    check_len(kernel, "k pool [NB, BS, Hkv, D]", &x.k, s.pool_len(), dt)?;
    check_len(kernel, "v pool [NB, BS, Hkv, v_row]", &x.v, s.v_pool_len(), dt)?;
    let counts = RowCounts { batch: s.batch, table, hq: s.hq, o: s.o_len(), lse: s.lse_len() };
    check_rows(kernel, (&x.table, &x.lens), (&out.o, &out.lse), opt, counts)?;
    if let Some(a) = &opt.sinks {
        check_len(kernel, "sinks [Hq]", a, u64::from(s.hq), 4)?;
    }
    if let Some(o16) = &out.o16 {
        if opt.dtype == DType::F32 || opt.act_dtype() != DType::F32 {
            let why = format!("a 16-bit o copy needs f32 o over 16-bit pools, not {:?} over {:?}", opt.act, opt.dtype);
            return Err(fail(kernel, why));
        }
        check_len(kernel, "o16 [B, Tq, Hq, Dv]", o16, s.o_len(), dt)?;
    }
    Ok(())
}

/// Element counts of the views [`check_rows`] checks.
pub(super) struct RowCounts {
    pub batch: u32,
    /// `B · max_blocks`.
    pub table: u64,
    pub hq: u32,
    /// `B · Tq · Hq · Dv`.
    pub o: u64,
    /// `B · Hq · Tq`.
    pub lse: u64,
}

/// The checks of the views every paged decode call has besides q and its pools (over k and v
/// pools here, one latent pool in `decode_latent`), in this order: the block table
/// `[B, max_blocks]` and lens `[B]` int32, o in `opt.act_dtype()`, lse f32, and the ALiBi
/// slopes `[Hq]` f32 when given.
pub(super) fn check_rows(
    kernel: &str,
    (table, lens): (&BufferView<'_>, &BufferView<'_>),
    (o, lse): (&BufferView<'_>, &BufferView<'_>),
    opt: &DecodeOptions<'_>,
    n: RowCounts,
) -> Result<()> {
    check_len(kernel, "table [B, max_blocks]", table, n.table, 4)?;
    check_len(kernel, "lens [B]", lens, u64::from(n.batch), 4)?;
    check_len(kernel, "o [B, Tq, Hq, Dv]", o, n.o, opt.act_dtype().bytes())?;
    check_len(kernel, "lse [B, Hq, Tq]", lse, n.lse, 4)?;
    if let Some(a) = &opt.alibi {
        check_len(kernel, "alibi slopes [Hq]", a, u64::from(n.hq), 4)?;
    }
    Ok(())
}

/// An error naming `kernel` unless `splits` is in `1..=most`.
pub(super) fn check_splits(kernel: &str, splits: u32, most: u32) -> Result<()> {
    if splits == 0 || splits > most {
        return Err(fail(kernel, format!("{splits} splits outside 1..={most}")));
    }
    Ok(())
}

/// Attention of `Tq` new queries per row over the paged cache, split `splits` ways (1 = one
/// pass; see [`splits`] for the usual choice; more than 1 needs `out.work`), in key tiles of
/// [`tile_keys`].
pub fn forward(
    rec: &mut Recorder,
    x: &PagedInputs<'_>,
    out: &DecodeOutputs<'_>,
    s: &DecodeShape,
    opt: &DecodeOptions<'_>,
    splits: u32,
) -> Result<()> {
    forward_tiled(rec, x, out, s, opt, (splits, tile_keys(s)))
}

/// [`forward`] in key tiles of `tile` ([`TILE`], or [`SMALL_TILE`] for head dims ≤ 128): the
/// same result either way up to the order of f32 sums.
pub fn forward_tiled(
    rec: &mut Recorder,
    x: &PagedInputs<'_>,
    out: &DecodeOutputs<'_>,
    s: &DecodeShape,
    opt: &DecodeOptions<'_>,
    (splits, tile): (u32, u32),
) -> Result<()> {
    forward_with(rec, x, out, s, opt, (splits, tile), None)
}

/// What a fused caller adds to a call (`super::rope_store::attend`): the kernel (one of
/// [`rope_code`]'s), its extra pointers after `counters` and its push scalars: the plain
/// kernel's (built here) extended by `push`, checked by the caller, q included (the call's `x.q`
/// is then not checked against `[B, Tq, Hq, D]`).
pub(crate) struct Extra<'a> {
    pub code: &'static KernelCode,
    pub args: Vec<Arg<'a>>,
    pub push: Box<dyn FnOnce(AttentionDecodePush) -> AttentionDecodePushRope + 'a>,
}

/// The `_rope` kernel for head dim `d`, pools of `dt`, q and o f32 (see
/// `shaders/attention/decode_rope_in.glsl`), picked as [`main_code`] picks its twin, or `None`
/// where it has none.
pub(crate) fn rope_code(d: u32, dt: DType, act: DType) -> Option<&'static KernelCode> {
    let codes = [
        [&code::ATTENTION_DECODE_D64_ROPE, &code::ATTENTION_DECODE_D128_ROPE, &code::ATTENTION_DECODE_D256_ROPE],
        [
            &code::ATTENTION_DECODE_D64_F16_Q32_ROPE,
            &code::ATTENTION_DECODE_D128_F16_Q32_ROPE,
            &code::ATTENTION_DECODE_D256_F16_Q32_ROPE,
        ],
        [
            &code::ATTENTION_DECODE_D64_BF16_Q32_ROPE,
            &code::ATTENTION_DECODE_D128_BF16_Q32_ROPE,
            &code::ATTENTION_DECODE_D256_BF16_Q32_ROPE,
        ],
    ];
    let row = match (dt, act) {
        (DType::F32, DType::F32) => 0,
        (DType::F16, DType::F32) => 1,
        (DType::BF16, DType::F32) => 2,
        _ => return None,
    };
    if row == 2 && d <= 128 && small_groups() {
        return Some(
            [&code::ATTENTION_DECODE_D64_BF16_Q32_G4_ROPE, &code::ATTENTION_DECODE_D128_BF16_Q32_G4_ROPE][class(d)],
        );
    }
    Some(codes[row][class(d)])
}

/// [`forward_tiled`], or with `extra` the fused kernel it names (128-key tiles only).
pub(crate) fn forward_with<'a>(
    rec: &mut Recorder,
    x: &PagedInputs<'a>,
    out: &DecodeOutputs<'a>,
    s: &DecodeShape,
    opt: &DecodeOptions<'a>,
    (splits, tile): (u32, u32),
    extra: Option<Extra<'a>>,
) -> Result<()> {
    if let Some(e) = &extra {
        if tile != TILE {
            return Err(fail(e.code.name, format!("key tile {tile}: the fused kernels have {TILE}")));
        }
    }
    let code = match (&extra, tile) {
        (Some(e), _) => Some(e.code),
        (None, TILE) => main_code(s.d_max(), opt.dtype, opt.act_dtype()),
        (None, SMALL_TILE) if s.d_max() <= 128 => small_code(s.d_max(), opt.dtype, opt.act_dtype()),
        (None, _) => {
            return Err(fail(
                "attention/decode",
                format!("key tile {tile} for head dim {}: 128, or 64 up to d128", s.d),
            ))
        }
    };
    let Some(main) = code else {
        let why =
            format!("q and o of {:?} over pools of {:?}: only the same type, or f32 over 16-bit", opt.act, opt.dtype);
        return Err(fail("attention/decode", why));
    };
    check(main.name, s, x, out, opt)?;
    if extra.is_none() {
        check_len(main.name, "q [B, Tq, Hq, D]", &x.q, s.q_len(), opt.act_dtype().bytes())?;
    }
    check_splits(main.name, splits, MAX_SPLITS)?;
    let work = match (splits, out.work, out.counters) {
        (1, ..) => None,
        (_, Some(w), Some(c)) => {
            check_len(main.name, "work", &w, work_floats(s, splits), 4)?;
            if c.len < counter_words(s) * 4 {
                return Err(fail(main.name, format!("counters: {} bytes for {} tiles", c.len, counter_words(s))));
            }
            Some((w, c))
        }
        _ => return Err(fail(main.name, format!("{splits} splits need a work buffer and counters"))),
    };
    let wide = [s.d, s.dv, s.v_row].iter().all(|w| w.is_multiple_of(8))
        && x.k.address().is_multiple_of(16)
        && x.v.address().is_multiple_of(16);
    let flags = if opt.causal { FLAG_CAUSAL } else { 0 }
        | if opt.alibi.is_some() { FLAG_ALIBI } else { 0 }
        | if wide { FLAG_WIDE } else { 0 }
        | if opt.sinks.is_some() { FLAG_SINKS } else { 0 }
        | if out.o16.is_some() { FLAG_O16 } else { 0 };
    // The kernel that runs the call (the lean one where preferred and able; it reads the same
    // push block and pointers) sets the rows of its row tiles.
    let lean = lean_code(rec.caps(), s, opt, wide, extra.is_some())?;
    let rows = tile_rows_for(s, if lean.is_some() { Kernel::Lean } else { Kernel::Tiled });
    let push = AttentionDecodePush {
        tq: s.tq,
        hq: s.hq,
        hkv: s.hkv,
        d: s.d,
        flags,
        window: opt.window,
        scale: opt.scale,
        softcap: opt.softcap,
        block_size: s.block_size,
        max_blocks: s.max_blocks,
        num_blocks: s.num_blocks,
        splits,
        chunk: opt.chunk,
        dvh: s.dv,
        vrow: s.v_row,
        tile_rows: rows,
    };
    // Unused pointers are never dereferenced; q stands in for them. Split calls write and read
    // back `work` and count in `counters`.
    let (w, counters) = match work {
        None => (read(x.q), read(x.q)),
        Some((w, c)) => (read_write(w), read_write(c)),
    };
    let (alibi, sinks) = (read(opt.alibi.unwrap_or(x.q)), read(opt.sinks.unwrap_or(x.q)));
    let (o, lse) = (write(out.o), write(out.lse));
    // A fused call writes the new keys and values into the pools.
    let (k, v) = if extra.is_some() { (read_write(x.k), read_write(x.v)) } else { (read(x.k), read(x.v)) };
    let o16 = out.o16.map_or(read(x.q), write);
    let mut args = vec![read(x.q), k, v, read(x.table), read(x.lens), alibi, sinks, o, lse, w, counters, o16];
    let groups = [splits, s.hkv * s.row_tiles_of(rows), s.batch];
    // The tiled kernel's constant 0 is its probe; the lean kernel's are NSG, then its probe
    // (passed only when set, so its pipelines keep their constants otherwise).
    let (main, spec) = match lean {
        Some(lean) => {
            let nsg = decode_lean::max_subgroups(rec.caps());
            (lean, if probe() == 0 { vec![nsg] } else { vec![nsg, probe()] })
        }
        None => (main, vec![probe()]),
    };
    match extra {
        None => dispatch(rec, main, &spec, &args, &push, groups),
        Some(e) => {
            args.extend(e.args);
            dispatch(rec, main, &spec, &args, &(e.push)(push), groups)
        }
    }
}

/// The lean kernel's variant for this call (`rope`: the fused rope + store) where it is
/// preferred and runs the call; `None`: the tiled kernel. A call it cannot run is an error when
/// the lean kernel was forced (`decode_lean::with_kernel`).
fn lean_code(
    caps: &Caps,
    s: &DecodeShape,
    opt: &DecodeOptions<'_>,
    wide: bool,
    rope: bool,
) -> Result<Option<&'static KernelCode>> {
    if decode_lean::preferred_on(caps) != Kernel::Lean {
        return Ok(None);
    }
    match decode_lean::unsupported(caps, s, opt, wide) {
        None => Ok(decode_lean::code(s.d, opt.dtype, rope)),
        Some(why) if decode_lean::forced() => Err(fail("attention/decode_lean", why)),
        Some(_) => Ok(None),
    }
}

/// Where [`store`] writes: the pools and their sizes.
#[derive(Clone, Copy, Debug)]
pub struct Pools<'a> {
    /// [num_blocks, block_size, Hkv, D]
    pub k: BufferView<'a>,
    pub v: BufferView<'a>,
    /// `num_blocks · block_size`.
    pub rows: u32,
    /// `Hkv · D`.
    pub width: u32,
}

/// Stores new keys and values `[N, Hkv, D]` (storage type `dt`) at pool rows `slots [N]` int32
/// (`block · block_size + offset`; negative = not stored).
pub fn store(
    rec: &mut Recorder,
    kv_new: (BufferView<'_>, BufferView<'_>),
    slots: BufferView<'_>,
    pools: &Pools<'_>,
    dt: DType,
) -> Result<()> {
    store_from(rec, (kv_new, dt), slots, pools, dt)
}

/// [`store`] of new keys and values of type `src` (`dt`, or f32 into 16-bit pools, rounded to
/// nearest even as a cast would).
pub fn store_from(
    rec: &mut Recorder,
    ((k_new, v_new), src): ((BufferView<'_>, BufferView<'_>), DType),
    slots: BufferView<'_>,
    pools: &Pools<'_>,
    dt: DType,
) -> Result<()> {
    let Some(code) = store_code(src, dt) else {
        return Err(fail("attention/decode_store", format!("new keys of {src:?} into pools of {dt:?}")));
    };
    let n = slots.len / 4;
    let width = u64::from(pools.width);
    let elems = n * width;
    check_len(code.name, "k new [N, Hkv, D]", &k_new, elems, src.bytes())?;
    check_len(code.name, "v new [N, Hkv, D]", &v_new, elems, src.bytes())?;
    let pool = u64::from(pools.rows) * width;
    check_len(code.name, "k pool", &pools.k, pool, dt.bytes())?;
    check_len(code.name, "v pool", &pools.v, pool, dt.bytes())?;
    if elems == 0 {
        return Ok(());
    }
    if elems.max(pool) >= 1 << 32 {
        return Err(fail(code.name, format!("{n} positions of {width} or a pool of {pool} elements: beyond 2^32")));
    }
    let push = AttentionDecodeStorePush { n: n as u32, width: pools.width, pool_rows: pools.rows };
    let args = [read(k_new), read(v_new), read(slots), write(pools.k), write(pools.v)];
    dispatch_elems(rec, code, &args, &push, elems)
}

/// Records the rotary embedding of a decode step's queries and keys in one dispatch:
/// `qo = rope(q)` `[N, Hq, D]` and `ko = rope(k)` `[N, Hkv, D]` with `pos [N]` int32 and
/// `inv_freq [R/2]` f32, where `p` describes q (`p.heads` = Hq, `p.batch · p.seq` = N tokens)
/// and `hkv` is the keys' head count. Bit for bit `rope::rope_forward` of q and of k
/// (decode_rope.comp repeats its math); out of place, dims past the rotary dim copied.
pub fn rope_qk(
    rec: &mut Recorder,
    p: &Rope,
    hkv: u32,
    (q, k): (BufferView<'_>, BufferView<'_>),
    (pos, inv_freq): (BufferView<'_>, BufferView<'_>),
    (qo, ko): (BufferView<'_>, BufferView<'_>),
) -> Result<()> {
    let code = variant(
        p.dtype,
        [&code::ATTENTION_DECODE_ROPE_F32, &code::ATTENTION_DECODE_ROPE_F16, &code::ATTENTION_DECODE_ROPE_BF16],
    );
    let tokens = u64::from(p.batch) * u64::from(p.seq);
    let rows = tokens * u64::from(p.heads + hkv);
    let (d, r) = (u64::from(p.head_dim), u64::from(p.rotary_dim));
    if tokens == 0 || p.heads == 0 || hkv == 0 || d == 0 || r % 2 != 0 || r > d || rows * d >= 1 << 32 {
        return Err(fail(code.name, format!("rope of {p:?} with {hkv} kv heads: empty, odd rotary dim, or too large")));
    }
    let el = p.dtype.bytes();
    check_len(code.name, "q [N, Hq, D]", &q, tokens * u64::from(p.heads) * d, el)?;
    check_len(code.name, "qo [N, Hq, D]", &qo, tokens * u64::from(p.heads) * d, el)?;
    check_len(code.name, "k [N, Hkv, D]", &k, tokens * u64::from(hkv) * d, el)?;
    check_len(code.name, "ko [N, Hkv, D]", &ko, tokens * u64::from(hkv) * d, el)?;
    check_len(code.name, "pos [N]", &pos, tokens, 4)?;
    check_len(code.name, "inv_freq [R/2]", &inv_freq, r / 2, 4)?;
    let work = rows * (r / 2 + d - r);
    let args = [read(q), read(k), write(qo), write(ko), read(pos), read(inv_freq)];
    dispatch_elems(rec, code, &args, &rope_push(p, tokens, hkv), work)
}

/// The scalars of `decode_rope.comp`'s block (the base of `decode_rope_store.comp`'s): q rows
/// of `p.heads` heads and k rows of `hkv` heads, `tokens` of each, rotated as `p` says.
pub(super) fn rope_push(p: &Rope, tokens: u64, hkv: u32) -> AttentionDecodeRopePush {
    AttentionDecodeRopePush {
        tokens: tokens as u32,
        hq: p.heads,
        hkv,
        head_dim: p.head_dim,
        rot_dim: p.rotary_dim,
        interleaved: u32::from(p.layout == RopeLayout::Interleaved),
        mscale: p.mscale,
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn shape(batch: u32, tq: u32, hq: u32, hkv: u32, d: u32) -> DecodeShape {
        DecodeShape { batch, tq, hq, hkv, d, dv: d, v_row: d, block_size: 16, num_blocks: 64, max_blocks: 8 }
    }

    /// `splits_for` with the tile the small-tile policy picks.
    fn small_policy_splits(s: &DecodeShape, max_len: u32) -> u32 {
        splits_for(s, max_len, tile_keys_for(s, true))
    }

    /// Split counts follow the kernel that runs the call: at d128 the lean kernel's 64-key tiles
    /// allow splits of 64 keys (300 keys: 5), the tiled kernel's 128-key ones 3; at d64 both
    /// tiles are 128 keys and the counts agree.
    #[test]
    fn split_counts_are_chosen_for_the_kernel_that_runs() {
        let d128 = shape(1, 1, 32, 8, 128);
        assert_eq!(splits_for_kernel(&d128, 300, Kernel::Lean), 5);
        assert_eq!(splits_for_kernel(&d128, 300, Kernel::Tiled), 3);
        let d64 = shape(1, 1, 32, 4, 64);
        assert_eq!(splits_for_kernel(&d64, 640, Kernel::Lean), splits_for_kernel(&d64, 640, Kernel::Tiled));
    }

    /// Every kernel the tables hold was compiled with the key tile, query rows and head dim the
    /// launcher sizes its grid and checks its inputs by.
    #[test]
    fn launcher_sizes_are_the_shader_defines() {
        let define =
            |k: &KernelCode, d: &str| code::defines::value(k.name, d).unwrap_or_else(|| panic!("{}: {d}", k.name));
        let pairs = [DType::F32, DType::F16, DType::BF16].into_iter().flat_map(|dt| [(dt, dt), (dt, DType::F32)]);
        for (dt, act) in pairs {
            for d in [64, 128, MAX_DECODE_HEAD_DIM] {
                let tiles = [(main_code(d, dt, act), TILE), (small_code(d, dt, act), SMALL_TILE)];
                let fused = [(rope_code(d, dt, act), TILE)];
                for (k, tile) in tiles.into_iter().chain(fused).filter_map(|(k, t)| Some((k?, t))) {
                    assert_eq!(define(k, "NT"), tile, "{}", k.name);
                    assert_eq!(define(k, "BQ"), TILE_ROWS, "{}", k.name);
                    let flags = [("ATTN_CAUSAL", FLAG_CAUSAL), ("ATTN_ALIBI", FLAG_ALIBI), ("ATTN_WIDE", FLAG_WIDE)];
                    let flags = flags.into_iter().chain([("DECODE_SINKS", FLAG_SINKS), ("DECODE_O16", FLAG_O16)]);
                    for (name, bit) in flags {
                        assert_eq!(define(k, name), bit, "{}: {name}", k.name);
                    }
                    assert!(define(k, "DMAX") >= d && define(k, "DMAX") <= MAX_DECODE_HEAD_DIM, "{}", k.name);
                }
            }
        }
    }

    #[test]
    fn one_long_row_is_split_and_a_big_batch_is_not() {
        // One sequence of 32k keys, 8 kv heads, one row tile: 8 groups unsplit -> 32 splits of 1024
        // keys (256 workgroups).
        assert_eq!(splits_for(&shape(1, 1, 32, 8, 128), 32_768, TILE), 32);
        assert_eq!(splits_for(&shape(4, 1, 32, 8, 128), 32_768, TILE), 8);
        // Short rows never split below one tile: MIN_SPLIT_KEYS keys on the main tile, 64 keys on
        // the small one (8 workgroups unsplit).
        assert_eq!(splits_for(&shape(1, 1, 32, 8, 128), 300, TILE), 3);
        assert_eq!(small_policy_splits(&shape(1, 1, 32, 8, 128), 300), 5);
        assert_eq!(small_policy_splits(&shape(1, 1, 32, 8, 128), 60), 1);
        // Head dim 256 keeps the 128-key tiles and splits.
        assert_eq!(small_policy_splits(&shape(1, 1, 32, 8, 256), 300), 3);
        assert_eq!(small_policy_splits(&shape(1, 1, 32, 8, 256), 100), 1);
        // 64 rows x 8 kv heads already fill the GPU.
        assert_eq!(splits_for(&shape(64, 1, 32, 8, 128), 32_768, TILE), 1);
        // MQA with one head: capped at MAX_SPLITS.
        assert_eq!(splits_for(&shape(1, 1, 8, 1, 64), 1 << 20, TILE), MAX_SPLITS);
    }

    #[test]
    fn few_workgroups_take_the_small_tile_only_when_allowed() {
        // TinyLlama at batch 1: 4 kv heads x 1 row tile -> 64-key tiles, 10 splits of 640 keys.
        assert_eq!(tile_keys_for(&shape(1, 1, 32, 4, 64), true), SMALL_TILE);
        assert_eq!(small_policy_splits(&shape(1, 1, 32, 4, 64), 640), 10);
        // 16 rows x 4 kv heads fill the GPU without it; d256 has no 64-key variant.
        assert_eq!(tile_keys_for(&shape(16, 1, 32, 4, 64), true), TILE);
        assert_eq!(tile_keys_for(&shape(1, 1, 8, 1, 256), true), TILE);
        // Off (the default): the 128-key tile, 5 splits of 640 keys.
        assert_eq!(tile_keys_for(&shape(1, 1, 32, 4, 64), false), TILE);
        assert_eq!(splits_for(&shape(1, 1, 32, 4, 64), 640, TILE), 5);
    }

    #[test]
    fn the_lean_kernel_splits_by_its_own_tile() {
        let lean = |s: &DecodeShape, len| decode_lean::with_kernel(Kernel::Lean, || splits(s, len));
        // TinyLlama at batch 1 over 640 keys: 5 splits of one 128-key tile, as the tiled kernel.
        assert_eq!(lean(&shape(1, 1, 32, 4, 64), 640), 5);
        // d128 tiles hold 64 keys: 8 kv heads over 640 keys split 10 ways (tiled: 5).
        assert_eq!(lean(&shape(1, 1, 32, 8, 128), 640), 10);
        assert_eq!(splits(&shape(1, 1, 32, 8, 128), 640), 5);
        // Batch 64 fills the GPU unsplit; d256 is the tiled kernel's either way.
        assert_eq!(lean(&shape(64, 1, 32, 4, 64), 640), 1);
        assert_eq!(lean(&shape(1, 1, 8, 1, 256), 300), splits_for(&shape(1, 1, 8, 1, 256), 300, TILE));
    }

    /// Lean calls with few (batch, kv head) pairs run shorter row tiles until they have
    /// `LEAN_FEW_TILES` workgroups; the tiled kernel keeps 8 rows; the counters cover the more.
    #[test]
    fn lean_calls_with_few_workgroups_take_shorter_row_tiles() {
        // TinyLlama (32 query heads over 4 kv heads) at batch 1: 2 rows, 16 tiles of workgroups.
        let b1 = shape(1, 1, 32, 4, 64);
        assert_eq!((tile_rows_for(&b1, Kernel::Lean), tile_rows_for(&b1, Kernel::Tiled)), (2, 8));
        assert_eq!(groups(&b1, Kernel::Lean), 16);
        assert_eq!(counter_words(&b1), 16);
        // 8 kv heads of 4 query heads each at batch 1: 2 rows (2 tiles a head, 16); batch 2 has
        // 16 whole tiles.
        assert_eq!(tile_rows_for(&shape(1, 1, 32, 8, 128), Kernel::Lean), 2);
        assert_eq!(tile_rows_for(&shape(2, 1, 32, 8, 128), Kernel::Lean), 8);
        // Batch 4 and up of TinyLlama: 16 workgroups already, whole tiles.
        assert_eq!(tile_rows_for(&shape(4, 1, 32, 4, 64), Kernel::Lean), 8);
        assert_eq!(tile_rows_for(&shape(64, 1, 32, 4, 64), Kernel::Lean), 8);
        // Multi-head attention has one row a kv head: its tiles stay one row whatever the size.
        assert_eq!(shape(1, 1, 12, 12, 64).row_tiles_for(Kernel::Lean), 1);
        // The lean kernel's split count at batch 1 is unchanged by the shorter tiles (one key tile
        // a split: 5 over 640 keys).
        assert_eq!(splits_for_kernel(&b1, 640, Kernel::Lean), 5);
    }

    #[test]
    fn row_tiles_cover_the_query_heads_of_a_kv_head() {
        // Tiles of 8 rows: a decode step's GQA group of 4 in one, 16 steps x 4 heads in 8,
        // 3 x 12 heads of MQA in 5 (the last one half full).
        assert_eq!(shape(1, 1, 32, 8, 128).row_tiles(), 1);
        assert_eq!(shape(1, 16, 32, 8, 128).row_tiles(), 8);
        assert_eq!(shape(1, 3, 12, 1, 256).row_tiles(), 5);
    }
}
