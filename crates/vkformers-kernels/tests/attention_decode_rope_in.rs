//! `rope_store::attend` (a decode step's rotary embedding and KV store inside the paged decode
//! attention, one dispatch) equals the two dispatches it replaces, `rope_store::rope_store` then
//! `decode::forward_tiled` on 128-key tiles, bit for bit: both pools everywhere (the new keys
//! and values at their slots, every other row untouched), o and lse. Several batch rows of
//! different lengths in random non-contiguous blocks, odd head counts, GQA groups of 1, 4, 8
//! and 12 (two row tiles: one stores, both read the new key), head dims 20, 64, 128 and 256,
//! both rope layouts with a partial rotary dim and mscale != 1, 1, several and empty splits, a
//! row whose new token is not stored (slot -1: attention reads the pool's key as it is), a
//! window with softcap and learned sinks, Llama 4's chunked mask; f32, f16 and bf16 pools under f32 activations; q, k and
//! v as dense tensors and as the column blocks of the packed q/k/v product's rows (strided).
//! Over 16-bit pools both paths also write o's 16-bit copy (`o16`), checked to be o rounded.

use vkformers_kernels::attention::decode::{self, DecodeOutputs, DecodeShape, PagedInputs, Pools};
use vkformers_kernels::attention::decode_lean::{self, Kernel};
use vkformers_kernels::attention::rope_store::{self, NewRows, NewToken};
use vkformers_kernels::dtype::DType;
use vkformers_kernels::rope::{reference as rope_ref, Rope, RopeLayout};
use vkformers_kernels::testutil::masks::{alibi_slopes, sink_logits, Masks, WithMasks};
use vkformers_kernels::testutil::paged::{max_len, packed_rows, run_cases, Layout};
use vkformers_kernels::testutil::storage::{download, round, upload, Stored};
use vkformers_kernels::testutil::{same_bits, Rng};
use vkformers_vk::{Buffer, BufferView, Context, Result};

#[derive(Clone, Debug)]
struct Case {
    name: &'static str,
    /// Keys of each row after the step (the new one included).
    lens: Vec<usize>,
    hq: usize,
    hkv: usize,
    d: usize,
    block_size: usize,
    /// Rotary dim, layout, mscale.
    rope: (usize, RopeLayout, f32),
    masks: Masks,
    /// `None`: `decode::splits`' choice on 128-key tiles.
    splits: Option<u32>,
    /// Rows whose new token has no slot (-1).
    unstored: Vec<usize>,
}

impl WithMasks for Case {
    fn masks_mut(&mut self) -> &mut Masks {
        &mut self.masks
    }
}

impl Case {
    fn new(name: &'static str, lens: &[usize], (hq, hkv, d): (usize, usize, usize), bs: usize) -> Self {
        Case {
            name,
            lens: lens.to_vec(),
            hq,
            hkv,
            d,
            block_size: bs,
            rope: (d, RopeLayout::HalfSplit, 1.0),
            masks: Masks { causal: true, ..Masks::default() },
            splits: Some(1),
            unstored: Vec::new(),
        }
    }

    fn rope(mut self, r: usize, layout: RopeLayout, mscale: f32) -> Self {
        self.rope = (r, layout, mscale);
        self
    }

    fn splits(mut self, s: Option<u32>) -> Self {
        self.splits = s;
        self
    }

    fn unstored(mut self, rows: &[usize]) -> Self {
        self.unstored = rows.to_vec();
        self
    }

    fn shape(&self, lay: &Layout) -> DecodeShape {
        lay.decode_shape((self.lens.len(), 1), (self.hq, self.hkv), (self.d, self.d, self.d))
    }
}

fn cases() -> Vec<Case> {
    let il = RopeLayout::Interleaved;
    vec![
        Case::new("gqa4 d64, rows 37/1/16", &[37, 1, 16], (8, 2, 64), 16),
        Case::new("mha 3 heads d64, interleaved half rotary, split 2", &[23, 9], (3, 3, 64), 5)
            .rope(32, il, 1.3)
            .splits(Some(2)),
        Case::new("gqa8 d128, split 3", &[300, 45, 130], (8, 1, 128), 16).splits(Some(3)),
        Case::new("gqa4 odd heads 20/5 d128, auto split", &[640, 200], (20, 5, 128), 16).splits(None),
        Case::new("mha 5 heads d64, a row not stored, split 2", &[20, 7, 140], (5, 5, 64), 8)
            .splits(Some(2))
            .unstored(&[1]),
        Case::new("gqa12 (two row tiles) d64, split 2", &[50, 130], (12, 1, 64), 16).splits(Some(2)),
        Case::new("window softcap sinks, 4 splits (some empty)", &[90, 33], (8, 2, 64), 16)
            .window(20)
            .softcap(4.0)
            .sinks()
            .splits(Some(4)),
        Case::new("chunked (Llama 4) 10, gqa4, 2 splits", &[37, 21, 60], (8, 2, 64), 5).chunk(10).splits(Some(2)),
        Case::new("d20 element loads, interleaved, 3 splits", &[41, 6], (6, 2, 20), 4)
            .rope(12, il, 0.9)
            .splits(Some(3)),
        Case::new("d256 gqa2, split 2", &[70, 129], (4, 2, 256), 16).splits(Some(2)),
    ]
}

/// The step's new rows: dense q `[B, Hq, D]`, k, v `[B, Hkv, D]` and the packed product's rows
/// `[B, (Hq + 2 Hkv) D]` made of them.
struct NewData {
    q: Vec<f32>,
    k: Vec<f32>,
    v: Vec<f32>,
    packed: Vec<f32>,
}

fn new_data(case: &Case, rng: &mut Rng) -> NewData {
    let b = case.lens.len();
    let (qw, kw) = (case.hq * case.d, case.hkv * case.d);
    let (q, k, v) = (rng.vec(b * qw, 1.5), rng.vec(b * kw, 1.5), rng.vec(b * kw, 1.0));
    let packed = packed_rows(&q, &k, &v, b);
    NewData { q, k, v, packed }
}

/// One path's pools and outputs (each path its own, from the same initial pools).
struct Outs {
    pools: [Stored; 2],
    o: Buffer,
    /// o's 16-bit copy, written by both paths over 16-bit pools (`DecodeOutputs::o16`).
    o16: Option<Stored>,
    lse: Buffer,
    work: Buffer,
    counters: Buffer,
}

fn outs(ctx: &Context, case: &Case, pool: &[f32], (dt, shape, splits): (DType, &DecodeShape, u32)) -> Result<Outs> {
    let b = case.lens.len();
    Ok(Outs {
        pools: [upload(ctx, dt, pool, "k pool")?, upload(ctx, dt, pool, "v pool")?],
        o: ctx.buffer_from(&vec![0f32; b * case.hq * case.d], "o")?,
        o16: (dt != DType::F32).then(|| upload(ctx, dt, &vec![0f32; b * case.hq * case.d], "o16")).transpose()?,
        lse: ctx.buffer_from(&vec![0f32; b * case.hq], "lse")?,
        work: ctx.buffer(decode::work_floats(shape, splits).max(1) * 4, "work")?,
        counters: ctx.buffer_from(&vec![0u32; decode::counter_words(shape) as usize], "counters")?,
    })
}

impl Outs {
    fn views(&self, shape: &DecodeShape, splits: u32) -> DecodeOutputs<'_> {
        let split = splits > 1;
        DecodeOutputs {
            o: self.o.view(),
            lse: self.lse.view(),
            work: split.then(|| self.work.slice(0, decode::work_floats(shape, splits) * 4)),
            counters: split.then(|| self.counters.view()),
            o16: self.o16.as_ref().map(Stored::view),
        }
    }

    fn pool_views(&self) -> (BufferView<'_>, BufferView<'_>) {
        (self.pools[0].view(), self.pools[1].view())
    }
}

/// q, k, v of the step as `NewRows`: dense buffers, or views of the packed rows `y` at their
/// column offsets (from the first row's first element to the last row's last one).
fn rows<'a>(case: &Case, dense: [&'a Buffer; 3], y: &'a Buffer, packed: bool) -> NewRows<'a> {
    if !packed {
        return NewRows { q: dense[0].view(), k: dense[1].view(), v: dense[2].view(), strides: None };
    }
    let (n, qw, kw) = (case.lens.len() as u32, (case.hq * case.d) as u32, (case.hkv * case.d) as u32);
    let w = qw + 2 * kw;
    let at = |col: u32, width: u32| y.slice(4 * u64::from(col), 4 * u64::from((n - 1) * w + width));
    NewRows { q: at(0, qw), k: at(qw, kw), v: at(qw + kw, kw), strides: Some((w, w)) }
}

fn check_one(ctx: &Context, case: &Case, seed: u64, dt: DType, packed: bool) -> Result<()> {
    let mut rng = Rng::new(seed);
    let lay = Layout::random(&case.lens, case.block_size, &mut rng);
    let shape = case.shape(&lay);
    let b = case.lens.len();
    let lean = decode_lean::preferred() == Kernel::Lean;
    let auto = || match lean {
        true => decode::splits(&shape, max_len(&case.lens)),
        false => decode::splits_for(&shape, max_len(&case.lens), decode::TILE),
    };
    let splits = case.splits.unwrap_or_else(auto);
    let kw = case.hkv * case.d;
    let pool_rows = lay.num_blocks * case.block_size;
    // Every pool row holds some old key (the new ones' rows too, overwritten by the store).
    let pool = round(dt, &rng.vec(pool_rows * kw, 1.5));
    let new = new_data(case, &mut rng);
    let dense = [ctx.buffer_from(&new.q, "q")?, ctx.buffer_from(&new.k, "k")?, ctx.buffer_from(&new.v, "v")?];
    let y = ctx.buffer_from(&new.packed, "packed qkv")?;
    let x = rows(case, [&dense[0], &dense[1], &dense[2]], &y, packed);
    let (r, layout, mscale) = case.rope;
    let pos: Vec<i32> = case.lens.iter().enumerate().map(|(n, &l)| (l + 5 * n) as i32 - 1).collect();
    let slots: Vec<i32> = (0..b)
        .map(|n| if case.unstored.contains(&n) { -1 } else { lay.pool_row(n, case.lens[n] - 1) as i32 })
        .collect();
    let inv = rope_ref::default_inv_freq(r as u32, 10_000.0);
    let (pb, sb, ib) =
        (ctx.buffer_from(&pos, "pos")?, ctx.buffer_from(&slots, "slots")?, ctx.buffer_from(&inv, "inv_freq")?);
    let (table, lens) = lay.upload(ctx, &case.lens)?;
    let (slopes, sinks) =
        (ctx.buffer_from(&alibi_slopes(case.hq), "slopes")?, ctx.buffer_from(&sink_logits(case.hq), "sinks")?);
    let opt = case.masks.decode(shape.d, (Some(slopes.view()), Some(sinks.view())), (dt, DType::F32));
    let [fused, split] = [0, 1].map(|_| outs(ctx, case, &pool, (dt, &shape, splits)));
    let (fused, split) = (fused?, split?);
    let mut rec = ctx.recorder(false)?;

    // Fused: one dispatch.
    let (fk, fv) = fused.pool_views();
    let token = NewToken {
        k: x.k,
        v: x.v,
        strides: x.strides,
        pos: pb.view(),
        inv_freq: ib.view(),
        slots: sb.view(),
        layout,
        rotary_dim: r as u32,
        mscale,
        pool_rows: pool_rows as u32,
    };
    let paged = PagedInputs { q: x.q, k: fk, v: fv, table: table.view(), lens: lens.view() };
    rope_store::attend(&mut rec, &token, &paged, &fused.views(&shape, splits), &shape, &opt, splits)?;

    // Unfused: rope + store, then the decode attention on the rotated q.
    let p = Rope {
        batch: b as u32,
        seq: 1,
        heads: case.hq as u32,
        head_dim: case.d as u32,
        rotary_dim: r as u32,
        layout,
        mscale,
        dtype: DType::F32,
    };
    let (sk, sv) = split.pool_views();
    let qo = ctx.buffer_from(&vec![0f32; new.q.len()], "rotated q")?;
    let pools = Pools { k: sk, v: sv, rows: pool_rows as u32, width: kw as u32 };
    rope_store::rope_store(&mut rec, &p, &x, (pb.view(), ib.view(), sb.view()), (qo.view(), &pools), dt)?;
    let paged = PagedInputs { q: qo.view(), k: sk, v: sv, table: table.view(), lens: lens.view() };
    let tiles = (splits, decode::TILE);
    decode::forward_tiled(&mut rec, &paged, &split.views(&shape, splits), &shape, &opt, tiles)?;
    rec.submit()?;

    let what = format!("{} {dt:?} packed {packed} ({splits} splits, lean {lean})", case.name);
    for (n, name) in ["k pool", "v pool"].iter().enumerate() {
        let (got, want) = (download(ctx, dt, fused.pools[n].view())?, download(ctx, dt, split.pools[n].view())?);
        same_bits(&format!("{what}: {name}"), &got, &want);
        // The stored rows changed (the test sees the store), the unstored row's did not.
        for (row, &len) in case.lens.iter().enumerate() {
            let at = lay.pool_row(row, len - 1) * kw;
            let changed = got[at..at + kw] != pool[at..at + kw];
            assert_eq!(changed, !case.unstored.contains(&row), "{what}: {name} row {row} stored");
        }
    }
    let (o, o_want) = (ctx.read_vec::<f32>(fused.o.view())?, ctx.read_vec::<f32>(split.o.view())?);
    same_bits(&format!("{what}: o"), &o, &o_want);
    assert!(o.iter().any(|&x| x != 0.0), "{what}: o is all zeros");
    same_bits(&format!("{what}: lse"), &ctx.read_vec(fused.lse.view())?, &ctx.read_vec(split.lse.view())?);
    // Over 16-bit pools both kernels write o again in the pools' type: o rounded, bit for bit.
    for (path, outs) in [("fused", &fused), ("apart", &split)] {
        if let Some(o16) = &outs.o16 {
            let want = round(dt, &ctx.read_vec::<f32>(outs.o.view())?);
            same_bits(&format!("{what}: {path} o16"), &download(ctx, dt, o16.view())?, &want);
        }
    }
    let counters = ctx.read_vec::<u32>(fused.counters.view())?;
    assert!(counters.iter().all(|&c| c == 0), "{what}: counters left non-zero");
    Ok(())
}

fn check(ctx: &Context, case: &Case, seed: u64, (dt, _): (DType, DType)) -> Result<()> {
    for packed in [false, true] {
        check_one(ctx, case, seed, dt, packed)?;
    }
    Ok(())
}

#[test]
fn rope_in_decode_attention_equals_rope_store_then_decode_f32() {
    run_cases("decode rope in attention", &cases(), (DType::F32, DType::F32), 500, check);
}

#[test]
fn rope_in_decode_attention_equals_rope_store_then_decode_bf16_pools() {
    run_cases("decode rope in attention", &cases(), (DType::BF16, DType::F32), 600, check);
}

#[test]
fn rope_in_decode_attention_equals_rope_store_then_decode_f16_pools() {
    run_cases("decode rope in attention", &cases(), (DType::F16, DType::F32), 700, check);
}

/// The lean kernel's rope variant (forced for both paths: `attend` and the plain lean kernel after
/// `rope_store`) on every case above it runs (16-bit pools, head dims a multiple of 8 up to 128),
/// and on TinyLlama's heads at batch 1 over 640 keys (auto split) and at batch 4 over ragged
/// multi-tile rows, and GQA 4 at d128 over rows of several 64-key tiles: pools, o, lse and
/// o16 bit for bit.
fn lean_cases() -> Vec<Case> {
    let fits = |c: &Case| c.d.is_multiple_of(8) && c.d <= decode_lean::MAX_HEAD_DIM as usize;
    let mut all: Vec<Case> = cases().into_iter().filter(fits).collect();
    all.extend([
        Case::new("lean tinyllama heads, 640 keys, auto split", &[640], (32, 4, 64), 16).splits(None),
        Case::new("lean tinyllama heads, ragged rows", &[700, 129, 2, 300], (32, 4, 64), 16),
        Case::new("lean gqa4 d128, multi-tile rows, split 2", &[300, 77], (32, 8, 128), 16).splits(Some(2)),
    ]);
    all
}

#[test]
fn rope_in_lean_decode_attention_equals_rope_store_then_lean_decode() {
    decode_lean::with_kernel(Kernel::Lean, || {
        run_cases("decode rope in lean attention", &lean_cases(), (DType::BF16, DType::F32), 800, check);
        run_cases("decode rope in lean attention", &lean_cases(), (DType::F16, DType::F32), 900, check);
    });
}

/// Calls the fused kernel cannot run are errors: Tq > 1, 16-bit q, an odd rotary dim.
#[test]
fn rope_in_decode_attention_rejects_what_it_cannot_run() {
    vkformers_vk::testing::on_every_device("decode rope in attention errors", |ctx| {
        let case = Case::new("small", &[5], (2, 1, 8), 4);
        let mut rng = Rng::new(3);
        let lay = Layout::random(&case.lens, 4, &mut rng);
        let shape = case.shape(&lay);
        let buf = |n: usize| ctx.buffer((n * 4) as u64, "x");
        let (q, kv, pool, one, lse) = (buf(16)?, buf(8)?, buf(lay.num_blocks * 4 * 8)?, buf(1)?, buf(2)?);
        let pool_rows = (lay.num_blocks * 4) as u32;
        let inv = buf(4)?;
        let token = NewToken {
            k: kv.view(),
            v: kv.view(),
            strides: None,
            pos: one.view(),
            inv_freq: inv.view(),
            slots: one.view(),
            layout: RopeLayout::HalfSplit,
            rotary_dim: 8,
            mscale: 1.0,
            pool_rows,
        };
        let table = ctx.buffer((lay.max_blocks * 4) as u64, "table")?;
        let x = PagedInputs { q: q.view(), k: pool.view(), v: pool.view(), table: table.view(), lens: one.view() };
        let out = DecodeOutputs { o: q.view(), lse: lse.view(), work: None, counters: None, o16: None };
        let f32_opt = case.masks.decode(8, (None, None), (DType::F32, DType::F32));
        let mut rec = ctx.recorder(false)?;
        assert!(rope_store::attend(&mut rec, &token, &x, &out, &shape, &f32_opt, 1).is_ok());
        let tq2 = DecodeShape { tq: 2, ..shape };
        assert!(rope_store::attend(&mut rec, &token, &x, &out, &tq2, &f32_opt, 1).is_err());
        let bf16_q = case.masks.decode(8, (None, None), (DType::BF16, DType::BF16));
        assert!(rope_store::attend(&mut rec, &token, &x, &out, &shape, &bf16_q, 1).is_err());
        let odd = NewToken { rotary_dim: 7, ..token };
        assert!(rope_store::attend(&mut rec, &odd, &x, &out, &shape, &f32_opt, 1).is_err());
        let past = NewToken { pool_rows: pool_rows + 1, ..token };
        assert!(rope_store::attend(&mut rec, &past, &x, &out, &shape, &f32_opt, 1).is_err());
        // No rows: the empty shape's error (was an overflow panic sizing the rows' spans).
        let empty = DecodeShape { batch: 0, ..shape };
        let e = rope_store::attend(&mut rec, &token, &x, &out, &empty, &f32_opt, 1).unwrap_err();
        assert!(e.to_string().contains("empty shape"), "{e}");
        Ok(())
    });
}
