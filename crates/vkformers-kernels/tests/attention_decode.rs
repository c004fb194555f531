//! Paged decode attention (`attention::decode`) against the f64 reference of `attention/reference`:
//! each row's keys and values are scattered over a shared pool through a random block table
//! (non-contiguous blocks, blocks of odd sizes, rows of different lengths, one empty), the last
//! Tq positions of each row written by `decode::store` (padding slots skipped), and every pool row
//! no table entry reaches filled with NaN, so any read past a row's own keys shows in the output.
//! The reference sees each row alone (`tk` = its length, so query i sits at `len − Tq + i` as in
//! the kernel). Tq 1 and > 1, GQA / MQA, causal or not, window (with the blocks before it freed:
//! table entries -1 or past the pool), softcap, ALiBi, forced and automatic split-KV, every
//! head-dim variant and storage type; the lean kernel (`decode_lean`) on every case it runs.

use vkformers_kernels::attention::decode::{self, DecodeOptions, DecodeOutputs, DecodeShape, PagedInputs, Pools};
use vkformers_kernels::attention::decode_lean::{self, Kernel};
use vkformers_kernels::dtype::DType;
use vkformers_kernels::testutil::masks::{alibi_slopes, sink_logits, Masks, WithMasks};
use vkformers_kernels::testutil::paged::{latent_values, max_len, reference_rows, run_cases, Layout};
use vkformers_kernels::testutil::storage::{download, round, tol, upload};
use vkformers_kernels::testutil::{assert_close, f64s, same_bits, Rng, TOL_F32};
use vkformers_vk::testing::on_every_device;
use vkformers_vk::{Context, Result};

#[derive(Clone, Debug)]
struct Case {
    name: &'static str,
    lens: Vec<usize>,
    tq: usize,
    hq: usize,
    hkv: usize,
    d: usize,
    block_size: usize,
    masks: Masks,
    /// `None`: `decode::splits`' choice.
    splits: Option<u32>,
    /// Key tile; `None`: `decode::tile_keys`' choice.
    tile: Option<u32>,
    /// MLA's absorbed decode: the values are the first `dv` columns of the k pool's rows (one
    /// pool; `DecodeShape::dv = dv`, `v_row = d`). `None`: the v pool, `dv = d`.
    latent_dv: Option<usize>,
    /// Blocks wholly before each row's window freed, as a rolling cache frees them: their table
    /// entries -1 or past the pool, their pool rows never written (NaN).
    freed: bool,
}

impl WithMasks for Case {
    fn masks_mut(&mut self) -> &mut Masks {
        &mut self.masks
    }
}

impl Case {
    /// A causal case (decode steps are).
    fn new(name: &'static str, lens: &[usize], tq: usize, (hq, hkv, d): (usize, usize, usize), bs: usize) -> Self {
        Case {
            name,
            lens: lens.to_vec(),
            tq,
            hq,
            hkv,
            d,
            block_size: bs,
            masks: Masks { causal: true, ..Masks::default() },
            splits: Some(1),
            tile: None,
            latent_dv: None,
            freed: false,
        }
    }

    fn freed(mut self) -> Self {
        self.freed = true;
        self
    }

    fn latent(mut self, dv: usize) -> Self {
        self.latent_dv = Some(dv);
        self
    }

    /// Value / output head dim.
    fn dv(&self) -> usize {
        self.latent_dv.unwrap_or(self.d)
    }

    fn tile(mut self, t: u32) -> Self {
        self.tile = Some(t);
        self
    }

    fn splits(mut self, s: Option<u32>) -> Self {
        self.splits = s;
        self
    }
}

/// Host data of a case: per row q [Tq, Hq, D], k and v [len, Hkv, D] (rounded to `dt`).
struct Rows {
    q: Vec<Vec<f32>>,
    k: Vec<Vec<f32>>,
    v: Vec<Vec<f32>>,
}

fn rows(case: &Case, rng: &mut Rng, dt: DType) -> Rows {
    let (kw, qw) = (case.hkv * case.d, case.tq * case.hq * case.d);
    let amp = if case.masks.softcap > 0.0 { 3.0 } else { 1.0 };
    let gen = |rng: &mut Rng, n: usize, a: f32| round(dt, &rng.vec(n, a));
    Rows {
        q: case.lens.iter().map(|_| gen(rng, qw, amp)).collect(),
        k: case.lens.iter().map(|&l| gen(rng, l * kw, amp)).collect(),
        v: case.lens.iter().map(|&l| gen(rng, l * kw, 1.0)).collect(),
    }
}

/// The pools before the store (the rows' old keys; NaN elsewhere), the new positions
/// `[B·Tq, Hkv, D]` with their slots (-1 for padding, whose values are garbage), and the pools
/// expected after the store.
struct Staged {
    before: [Vec<f32>; 2],
    new: [Vec<f32>; 2],
    slots: Vec<i32>,
    after: [Vec<f32>; 2],
}

/// Frees the blocks wholly before each row's window (see `Case::freed`): every other one -1,
/// the rest an id past the pool.
fn free_before_window(case: &Case, lay: &mut Layout) {
    let w = case.masks.window;
    for (b, &len) in case.lens.iter().enumerate() {
        // The first query (position len - tq) sees keys from len - tq + 1 - w on.
        let lo = (len + 1).saturating_sub(case.tq + w);
        for c in 0..lo / lay.block_size {
            let gone = if c % 2 == 0 { -1 } else { (lay.num_blocks + c) as i32 };
            lay.table[b * lay.max_blocks + c] = gone;
        }
    }
}

/// Whether key j of row b has a pool row (its block not freed).
fn held(lay: &Layout, b: usize, j: usize) -> bool {
    let blk = lay.table[b * lay.max_blocks + j / lay.block_size];
    blk >= 0 && (blk as usize) < lay.num_blocks
}

fn stage(case: &Case, lay: &Layout, r: &Rows, rng: &mut Rng, dt: DType) -> Staged {
    let kw = case.hkv * case.d;
    let pool = lay.num_blocks * case.block_size * kw;
    let mut before = [vec![f32::NAN; pool], vec![f32::NAN; pool]];
    let mut new = [round(dt, &rng.vec(case.lens.len() * case.tq * kw, 9.0)), vec![0.0; case.lens.len() * case.tq * kw]];
    new[1] = round(dt, &rng.vec(new[1].len(), 9.0));
    let mut slots = vec![-1; case.lens.len() * case.tq];
    let mut after = before.clone();
    for (b, &len) in case.lens.iter().enumerate() {
        let fresh = len.min(case.tq);
        for j in (0..len).filter(|&j| held(lay, b, j)) {
            let at = lay.pool_row(b, j) * kw;
            for (x, src) in [&r.k[b], &r.v[b]].into_iter().enumerate() {
                after[x][at..at + kw].copy_from_slice(&src[j * kw..(j + 1) * kw]);
                if j < len - fresh {
                    before[x][at..at + kw].copy_from_slice(&src[j * kw..(j + 1) * kw]);
                } else {
                    let p = b * case.tq + case.tq - (len - j);
                    slots[p] = lay.pool_row(b, j) as i32;
                    new[x][p * kw..(p + 1) * kw].copy_from_slice(&src[j * kw..(j + 1) * kw]);
                }
            }
        }
    }
    Staged { before, new, slots, after }
}

/// The reference o [B, Tq, Hq, Dv] and lse [B, Hq, Tq], one row at a time.
fn expected(case: &Case, r: &Rows, scale: f32) -> (Vec<f64>, Vec<f64>) {
    // Latent: v row (j, hk) is the first dv columns of k row (j, hk).
    let v: Vec<Vec<f32>> = match case.latent_dv {
        None => r.v.clone(),
        Some(dv) => r.k.iter().map(|k| latent_values(k, case.d, dv)).collect(),
    };
    let heads = (case.tq, case.hq, case.hkv, case.d, case.dv());
    reference_rows(&case.masks, heads, &case.lens, [&r.q, &r.k, &v], scale)
}

/// Checks `case` with pools of `dt`; q, o and the new keys are of `act` (`dt`, or f32 over 16-bit
/// pools: the `_q32` and `_in32` variants).
fn check(ctx: &Context, case: &Case, seed: u64, (dt, act): (DType, DType)) -> Result<()> {
    let mut rng = Rng::new(seed);
    let mut lay = Layout::random(&case.lens, case.block_size, &mut rng);
    if case.freed {
        free_before_window(case, &mut lay);
    }
    let r = rows(case, &mut rng, dt);
    let st = stage(case, &lay, &r, &mut rng, dt);
    let b = case.lens.len();
    let v_row = case.latent_dv.map_or(case.dv(), |_| case.d);
    let shape = lay.decode_shape((b, case.tq), (case.hq, case.hkv), (case.d, case.dv(), v_row));
    let splits = case.splits.unwrap_or_else(|| decode::splits(&shape, max_len(&case.lens)));
    let q: Vec<f32> = r.q.concat();
    let (bq, bk, bv) =
        (upload(ctx, act, &q, "q")?, upload(ctx, dt, &st.before[0], "k")?, upload(ctx, dt, &st.before[1], "v")?);
    let (nk, nv) = (upload(ctx, act, &st.new[0], "k new")?, upload(ctx, act, &st.new[1], "v new")?);
    let slots = ctx.buffer_from(&st.slots, "slots")?;
    let (table, lens) = lay.upload(ctx, &case.lens)?;
    let slopes = ctx.buffer_from(&alibi_slopes(case.hq), "slopes")?;
    let sinks = ctx.buffer_from(&sink_logits(case.hq), "sinks")?;
    let o = upload(ctx, act, &vec![0.0; b * case.tq * case.hq * case.dv()], "o")?;
    let lse = ctx.buffer((b * case.hq * case.tq * 4) as u64, "lse")?;
    let work = ctx.buffer(decode::work_floats(&shape, splits).max(1) * 4, "work")?;
    // Zero before the first call; the kernel leaves them zero (checked by the second call below).
    let counters = ctx.buffer_from(&vec![0u32; decode::counter_words(&shape) as usize], "counters")?;
    let (o2, lse2) = (
        upload(ctx, act, &vec![0.0; b * case.tq * case.hq * case.dv()], "o2")?,
        ctx.buffer((b * case.hq * case.tq * 4) as u64, "lse2")?,
    );
    let opt = case.masks.decode(shape.d, (Some(slopes.view()), Some(sinks.view())), (dt, act));
    let width = (case.hkv * case.d) as u32;
    let pools = Pools { k: bk.view(), v: bv.view(), rows: (lay.num_blocks * case.block_size) as u32, width };
    let v_pool = if case.latent_dv.is_some() { bk.view() } else { bv.view() };
    let x = PagedInputs { q: bq.view(), k: bk.view(), v: v_pool, table: table.view(), lens: lens.view() };
    let w = (splits > 1).then(|| work.slice(0, decode::work_floats(&shape, splits) * 4));
    let c = Some(counters.view());
    // f32 o over 16-bit pools: o's 16-bit twin too (`DECODE_O16`).
    let o16 = (dt != DType::F32 && act == DType::F32)
        .then(|| upload(ctx, dt, &vec![0.0; b * case.tq * case.hq * case.dv()], "o16"))
        .transpose()?;
    let out = DecodeOutputs { o: o.view(), lse: lse.view(), work: w, counters: c, o16: o16.as_ref().map(|t| t.view()) };
    let again = DecodeOutputs { o: o2.view(), lse: lse2.view(), work: w, counters: c, o16: None };
    let mut rec = ctx.recorder(false)?;
    decode::store_from(&mut rec, ((nk.view(), nv.view()), act), slots.view(), &pools, dt)?;
    let tile = case.tile.unwrap_or_else(|| decode::tile_keys(&shape));
    decode::forward_tiled(&mut rec, &x, &out, &shape, &opt, (splits, tile))?;
    // A second split call on the same counters merges only if the first one reset them.
    if splits > 1 {
        decode::forward_tiled(&mut rec, &x, &again, &shape, &opt, (splits, tile))?;
    }
    rec.submit()?;

    let (kernel, tile) = match decode_lean::preferred() {
        Kernel::Lean => ("lean", decode_lean::tile_keys(shape.d)),
        Kernel::Tiled => ("tiled", tile),
    };
    let name = format!("{} {dt:?}, q/o {act:?} ({splits} splits, {tile}-key tiles, {kernel})", case.name);
    same_bits(&format!("{name}: k pool after store"), &download(ctx, dt, bk.view())?, &st.after[0]);
    same_bits(&format!("{name}: v pool after store"), &download(ctx, dt, bv.view())?, &st.after[1]);
    let (want_o, want_lse) = expected(case, &r, opt.scale);
    // f32 o over 16-bit pools: the inputs are exact in the pools' type, so only f32 sums err.
    let o_tol = if act == DType::F32 { TOL_F32 } else { tol(dt) };
    assert_close(&format!("{name}: o"), &download(ctx, act, o.view())?, &want_o, o_tol);
    assert_close(&format!("{name}: lse"), &ctx.read_vec::<f32>(lse.view())?, &want_lse, TOL_F32);
    if let Some(o16) = &o16 {
        let want = round(dt, &download(ctx, act, o.view())?);
        same_bits(&format!("{name}: o16 is o rounded"), &download(ctx, dt, o16.view())?, &want);
    }
    if splits > 1 {
        let second = download(ctx, act, o2.view())?;
        same_bits(&format!("{name}: o of a second call"), &second, &download(ctx, act, o.view())?);
        let second = ctx.read_vec::<f32>(lse2.view())?;
        same_bits(&format!("{name}: lse of a second call"), &second, &ctx.read_vec::<f32>(lse.view())?);
    }
    assert!(ctx.read_vec::<u32>(counters.view())?.iter().all(|&c| c == 0), "{name}: counters left non-zero");
    Ok(())
}

fn run(test: &str, cases: &[Case], dt: DType) {
    run_as(test, cases, (dt, dt));
}

fn run_as(test: &str, cases: &[Case], types: (DType, DType)) {
    run_cases(test, cases, types, 1000, check);
}

fn cases() -> Vec<Case> {
    vec![
        Case::new("tq1 mha d16 bs16, rows 37/1/16", &[37, 1, 16], 1, (2, 2, 16), 16),
        Case::new("tq1 gqa d24 bs5", &[23, 9], 1, (6, 2, 24), 5),
        Case::new("tq4 mqa d8 bs3", &[10, 4], 4, (4, 1, 8), 3),
        Case::new("tq16 gqa d32 bs7 window 5", &[40, 20], 16, (4, 2, 32), 7).window(5),
        Case::new("tq2 softcap alibi bs4", &[15, 7], 2, (3, 1, 12), 4).softcap(2.0).alibi(),
        Case::new("tq3 not causal", &[12, 8], 3, (2, 2, 8), 4).not_causal(),
        Case::new("an empty row", &[0, 5], 1, (2, 1, 8), 4),
        Case::new("split 3, d64", &[300, 45], 1, (4, 2, 64), 16).splits(Some(3)),
        Case::new("split auto, d128, one long row", &[1100], 2, (8, 1, 128), 32).splits(None),
        Case::new("split 4, d200, window 20 (empty splits)", &[90, 33], 3, (2, 1, 200), 16).window(20).splits(Some(4)),
        Case::new("everything split 2", &[57, 31, 3], 3, (4, 2, 16), 6).window(9).softcap(4.0).alibi().splits(Some(2)),
        // Learned sinks: joined by the kernel unsplit, by the merge (once) when split; an
        // empty row and empty splits give o = 0 and lse = s_h.
        Case::new("sinks tq1 gqa d24 bs5, an empty row", &[23, 0, 9], 1, (4, 2, 24), 5).sinks(),
        Case::new("sinks split 4, d200, window 20", &[90, 33, 0], 3, (4, 1, 200), 16)
            .window(20)
            .splits(Some(4))
            .sinks(),
        Case::new("sinks split auto, d64, softcap", &[300, 5], 2, (8, 2, 64), 32).softcap(4.0).splits(None).sinks(),
        Case::new("window 40, the blocks before it freed, split 3", &[300, 41, 7], 1, (8, 2, 64), 16)
            .window(40)
            .freed()
            .splits(Some(3)),
    ]
}

#[test]
fn paged_decode_latent_values() {
    // MLA's absorbed decode: keys [c | k_rot] of D columns, values their first Dv (one pool), o
    // of Dv; unsplit and split (the merge reads Dv columns), wide and element loads.
    run(
        "paged decode latent values",
        &[
            Case::new("d40 dv32 tq1 mqa bs5", &[23, 9], 1, (4, 1, 40), 5).latent(32),
            Case::new("d21 dv13 tq3 mqa bs4", &[17, 30], 3, (3, 1, 21), 4).latent(13),
            Case::new("d72 dv64 split 3", &[300, 45], 1, (4, 1, 72), 16).latent(64).splits(Some(3)),
            Case::new("d200 dv136 split 2 sinks", &[90, 33], 2, (2, 1, 200), 16).latent(136).splits(Some(2)).sinks(),
        ],
        DType::F32,
    );
    run(
        "paged decode latent values",
        &[Case::new("d40 dv32 bf16", &[23, 9], 2, (4, 1, 40), 5).latent(32).splits(Some(2))],
        DType::BF16,
    );
}

#[test]
fn paged_decode_chunked() {
    // Llama 4's chunked attention: new rows straddling a chunk boundary (tq 3 over rows of 37
    // and 21 keys, chunk 10), split rows (the first split starts at the chunk), with a window.
    run("paged decode chunked", &chunked_cases(), DType::F32);
}

fn chunked_cases() -> Vec<Case> {
    vec![
        Case::new("chunk 10 tq3 gqa d24 bs5", &[37, 21], 3, (4, 2, 24), 5).chunk(10),
        Case::new("chunk 7 tq1 bs4", &[30, 7, 1], 1, (2, 1, 16), 4).chunk(7),
        Case::new("chunk 64 split 3 d64", &[300, 45], 2, (4, 2, 64), 16).chunk(64).splits(Some(3)),
        Case::new("chunk 9 window 5 tq4", &[40, 20], 4, (4, 2, 32), 7).chunk(9).window(5).sinks(),
    ]
}

#[test]
fn paged_decode_matches_reference_f32() {
    run("paged decode", &cases(), DType::F32);
}

fn cases_16bit() -> Vec<Case> {
    let all = cases();
    [0, 3, 4, 7, 8, 9, 10, 11, 12].iter().map(|&i| all[i].clone()).collect()
}

#[test]
fn paged_decode_matches_reference_f16() {
    run("paged decode", &cases_16bit(), DType::F16);
}

#[test]
fn paged_decode_matches_reference_bf16() {
    run("paged decode", &cases_16bit(), DType::BF16);
}

/// f32 q, o and new keys over 16-bit pools (a model's f32 activations over a bf16 cache): the
/// store rounds the new keys as a cast would, o is the f32 result. Odd and wide head dims,
/// split and not.
#[test]
fn paged_decode_f32_activations_over_16bit_pools() {
    let all = cases();
    let some: Vec<Case> = [0, 4, 7, 9, 11, 12].iter().map(|&i| all[i].clone()).collect();
    run_as("paged decode", &some, (DType::BF16, DType::F32));
    run_as("paged decode", &some, (DType::F16, DType::F32));
}

/// Both key tiles on every head dim they cover: the cases above (64-key tiles where the shape
/// picks them) forced onto 128-key tiles, and odd shapes on 64-key tiles: TinyLlama's heads
/// (32 q / 4 kv, d64) over 200 keys split automatically, d100 over 130 keys (a partial last
/// tile) split 3 ways, 16 new rows of a GQA group of 8 (16 row tiles) with a window.
#[test]
fn paged_decode_key_tiles() {
    let big: Vec<Case> = cases().into_iter().map(|c| c.tile(decode::TILE)).collect();
    run("paged decode 128-key tiles", &big, DType::F32);
    let small = vec![
        Case::new("t64 tinyllama heads, auto split", &[200, 67], 1, (32, 4, 64), 16).splits(None),
        Case::new("t64 d100, split 3", &[130, 1], 1, (4, 2, 100), 8).splits(Some(3)),
        Case::new("t64 tq16 gqa8 window 40", &[90], 16, (8, 1, 24), 5).window(40).splits(Some(2)),
        Case::new("t64 d128 softcap alibi", &[70, 65], 2, (2, 1, 128), 16).softcap(3.0).alibi().splits(None),
        Case::new("t64 sinks, auto split and a 3-key row", &[150, 3], 2, (4, 2, 64), 16).splits(None).sinks(),
    ];
    let small: Vec<Case> = small.into_iter().map(|c| c.tile(decode::SMALL_TILE)).collect();
    run("paged decode 64-key tiles", &small, DType::F32);
    run("paged decode 64-key tiles", &small[..2], DType::BF16);
    run_as("paged decode 64-key tiles", &small[..2], (DType::BF16, DType::F32));
    run_as("paged decode 64-key tiles", &small[..2], (DType::F16, DType::F32));
    run("paged decode 64-key tiles", &small[..2], DType::F16);
    run_as("paged decode 64-key tiles, sinks", &small[4..], (DType::BF16, DType::F32));
}

/// Whether the lean kernel runs `case` (the launcher's conditions that tests can see: head dim
/// a multiple of 8 up to 128, values in their own pool).
fn lean_runs(case: &Case) -> bool {
    case.latent_dv.is_none() && case.d.is_multiple_of(8) && case.d <= decode_lean::MAX_HEAD_DIM as usize
}

/// Cases for the lean kernel beyond the shared ones: TinyLlama's heads (GQA 8, d64) at batch 1
/// over 640 keys (5 tiles, split automatically) and over ragged rows of several tiles unsplit;
/// GQA 4 at d128 (64-key tiles) unsplit and split; MHA with 1 to 64 splits (more splits than
/// tiles: empty ones; 13 and 64: merges of several chunks of 8); head dims below the variant's
/// (d40 and d72: columns past D); a window over a multi-tile row, split.
fn lean_cases() -> Vec<Case> {
    let mut cases = vec![
        Case::new("lean tinyllama heads, 640 keys, auto split", &[640], 1, (32, 4, 64), 16).splits(None),
        Case::new("lean tinyllama heads, ragged multi-tile rows", &[700, 129, 1, 300], 1, (32, 4, 64), 16),
        Case::new("lean gqa4 d128, multi-tile rows", &[300, 77], 1, (32, 8, 128), 16),
        Case::new("lean gqa4 d128, split 3", &[300, 77], 1, (8, 2, 128), 32).splits(Some(3)),
        Case::new("lean d40 bs7 split 2", &[333, 50], 1, (4, 2, 40), 7).splits(Some(2)),
        Case::new("lean d72 alibi softcap sinks", &[260, 3], 1, (6, 3, 72), 8).alibi().softcap(5.0).sinks(),
        Case::new("lean window 150 over 600 keys, split 4", &[600, 170], 1, (16, 2, 64), 16)
            .window(150)
            .splits(Some(4)),
        Case::new("lean d128 window 100, freed blocks, tq 2", &[500, 90], 2, (32, 8, 128), 16)
            .window(100)
            .freed()
            .splits(None),
    ];
    for splits in [1, 2, 5, 13, 64] {
        cases.push(Case::new("lean mha d64, forced splits", &[520, 260], 1, (3, 3, 64), 16).splits(Some(splits)));
    }
    cases
}

/// The lean kernel (forced, not through the environment) on every shared case it runs and on
/// its own: f32 q/o over bf16 and f16 pools, against the same f64 reference and tolerances as
/// the tiled kernel (o16 the rounded o, a second split call on the same counters the same
/// bits).
#[test]
fn paged_decode_lean_kernel() {
    let shared = cases().into_iter().chain(chunked_cases()).filter(lean_runs);
    let all: Vec<Case> = shared.chain(lean_cases()).collect();
    decode_lean::with_kernel(Kernel::Lean, || {
        run_as("paged decode lean", &all, (DType::BF16, DType::F32));
        run_as("paged decode lean", &all, (DType::F16, DType::F32));
    });
}

/// One row of 2 query heads over 1 kv head of 8 dims, 2 blocks of 4 positions: the shape the
/// error tests call with.
fn tiny_shape() -> DecodeShape {
    DecodeShape { batch: 1, tq: 1, hq: 2, hkv: 1, d: 8, dv: 8, v_row: 8, block_size: 4, num_blocks: 2, max_blocks: 2 }
}

/// A forced lean kernel refuses what it cannot run (f32 pools, MLA's latent values) where the
/// tiled kernel runs the same call, and runs a call over bf16 pools.
#[test]
fn paged_decode_lean_kernel_refuses_what_it_cannot_run() {
    on_every_device("paged decode lean errors", |ctx| {
        let shape = tiny_shape();
        let buf = |n: usize| ctx.buffer((n * 4) as u64, "x");
        let (q, pool, ints, lens, lse) = (buf(16)?, buf(64)?, buf(2)?, buf(1)?, buf(2)?);
        let f32_pools = DecodeOptions::new(8);
        let bf16_pools = DecodeOptions { dtype: DType::BF16, act: Some(DType::F32), ..f32_pools };
        let latent = DecodeShape { dv: 4, ..shape };
        let half = pool.slice(0, 128);
        let calls = [
            (shape, f32_pools, pool.view(), q.view(), false),
            (latent, bf16_pools, half, q.slice(0, 32), false),
            (shape, bf16_pools, half, q.view(), true),
        ];
        let mut rec = ctx.recorder(false)?;
        for (s, opt, pools, o, lean_runs) in calls {
            let x = PagedInputs { q: q.view(), k: pools, v: pools, table: ints.view(), lens: lens.view() };
            let out = DecodeOutputs { o, lse: lse.view(), work: None, counters: None, o16: None };
            let lean = decode_lean::with_kernel(Kernel::Lean, || decode::forward(&mut rec, &x, &out, &s, &opt, 1));
            assert_eq!(lean.is_ok(), lean_runs, "{s:?} {:?}: {lean:?}", opt.dtype);
            decode_lean::with_kernel(Kernel::Tiled, || decode::forward(&mut rec, &x, &out, &s, &opt, 1))?;
        }
        Ok(())
    });
}

/// Bad calls are errors, not device faults: a split call without work buffer, a pool view of
/// the wrong size.
#[test]
fn paged_decode_rejects_bad_calls() {
    on_every_device("paged decode errors", |ctx| {
        let shape = tiny_shape();
        let buf = |n: usize| ctx.buffer((n * 4) as u64, "x");
        let (q, pool, small, ints, lens, lse) = (buf(16)?, buf(64)?, buf(60)?, buf(2)?, buf(1)?, buf(2)?);
        let x = PagedInputs { q: q.view(), k: pool.view(), v: pool.view(), table: ints.view(), lens: lens.view() };
        let out = DecodeOutputs { o: q.view(), lse: lse.view(), work: None, counters: None, o16: None };
        let opt = DecodeOptions::new(8);
        let mut rec = ctx.recorder(false)?;
        assert!(decode::forward(&mut rec, &x, &out, &shape, &opt, 2).is_err());
        // A work buffer without counters is no better.
        let work = buf(decode::work_floats(&shape, 2) as usize)?;
        let no_counters = DecodeOutputs { work: Some(work.view()), ..out };
        assert!(decode::forward(&mut rec, &x, &no_counters, &shape, &opt, 2).is_err());
        let bad = PagedInputs { k: small.view(), ..x };
        assert!(decode::forward(&mut rec, &bad, &out, &shape, &opt, 1).is_err());
        assert!(decode::forward(&mut rec, &x, &out, &shape, &opt, 1).is_ok());
        Ok(())
    });
}

/// `decode::rope_qk` (q and k of a step in one dispatch) equals `rope::rope_forward` of q and of
/// k bit for bit, and the f64 reference to f32 tolerance: both layouts, partial rotary dims (a
/// copied tail), odd head counts, several tokens at scattered positions, mscale != 1.
#[test]
fn rope_of_q_and_k_in_one_dispatch() {
    use vkformers_kernels::rope::{self, reference as rope_ref, Rope, RopeLayout};
    on_every_device("decode rope qk", |ctx| {
        let mut rng = Rng::new(77);
        let shapes = [(1, 3, 1, 8, 8, RopeLayout::HalfSplit, 1.0), (3, 5, 2, 12, 6, RopeLayout::Interleaved, 1.3)];
        for (n, hq, hkv, d, r, layout, mscale) in shapes {
            let p = Rope { batch: 1, seq: n, heads: hq, head_dim: d, rotary_dim: r, layout, mscale, dtype: DType::F32 };
            let pk = Rope { heads: hkv, ..p };
            let q = rng.vec((n * hq * d) as usize, 1.0);
            let k = rng.vec((n * hkv * d) as usize, 1.0);
            let pos: Vec<i32> = (0..n as i32).map(|t| 37 * t + 5).collect();
            let inv = rope_ref::default_inv_freq(r, 10_000.0);
            let (qb, kb, pb, ib) = (
                ctx.buffer_from(&q, "q")?,
                ctx.buffer_from(&k, "k")?,
                ctx.buffer_from(&pos, "pos")?,
                ctx.buffer_from(&inv, "inv")?,
            );
            let outs: Vec<_> = [q.len(), k.len(), q.len(), k.len()]
                .iter()
                .map(|&l| ctx.buffer((l * 4) as u64, "out"))
                .collect::<Result<_>>()?;
            let mut rec = ctx.recorder(false)?;
            let io = (pb.view(), ib.view());
            decode::rope_qk(&mut rec, &p, hkv, (qb.view(), kb.view()), io, (outs[0].view(), outs[1].view()))?;
            rope::rope_forward(&mut rec, &p, qb.view(), pb.view(), ib.view(), outs[2].view())?;
            rope::rope_forward(&mut rec, &pk, kb.view(), pb.view(), ib.view(), outs[3].view())?;
            rec.submit()?;
            let got: Vec<Vec<f32>> = outs.iter().map(|b| ctx.read_vec(b.view())).collect::<Result<_>>()?;
            let what = format!("rope_qk n {n} hq {hq} hkv {hkv} d {d} r {r} {layout:?}");
            same_bits(&format!("{what}: q"), &got[0], &got[2]);
            same_bits(&format!("{what}: k"), &got[1], &got[3]);
            assert_close(&format!("{what}: q ref"), &got[0], &rope_ref::rope(&p, &f64s(&q), &pos, &inv), TOL_F32);
            assert_close(&format!("{what}: k ref"), &got[1], &rope_ref::rope(&pk, &f64s(&k), &pos, &inv), TOL_F32);
        }
        Ok(())
    });
}
