//! The wide latent decode (`attention::decode_latent`) against the f64 reference of
//! `attention/reference`: each row's latent rows `[c | k_rot]` (D columns, one key head shared by
//! all query heads; values = their first Dv columns) scattered over a pool through a random block
//! table, every pool row no table entry reaches NaN (a stray read shows in the output). The
//! reference sees each row alone (query i at `len − Tq + i`). Both widths (d320, d576), odd D and
//! Dv, query heads in one or several tiles of 16, Tq 1 and > 1, causal or not, window, chunk,
//! softcap, ALiBi, an empty row, forced and automatic splits, f32 / f16 / bf16 pools and f32 q
//! over 16-bit pools. Both load paths: rows of a multiple of 8 columns over an aligned pool take
//! the 16-byte loads (each check asserts which path the launcher chose), odd widths and a pool at
//! an odd offset the element loads.

use vkformers_kernels::attention::decode::DecodeOptions;
use vkformers_kernels::attention::decode_latent::{self, LatentInputs, LatentOutputs, LatentShape};
use vkformers_kernels::dtype::DType;
use vkformers_kernels::testutil::masks::{alibi_slopes, Masks, WithMasks};
use vkformers_kernels::testutil::paged::{latent_values, max_len, reference_rows, run_cases, Layout};
use vkformers_kernels::testutil::storage::{download, round, tol, upload};
use vkformers_kernels::testutil::{assert_close, Rng, TOL_F32};
use vkformers_vk::testing::on_every_device;
use vkformers_vk::{Context, Result};

#[derive(Clone, Debug)]
struct Case {
    name: &'static str,
    lens: Vec<usize>,
    tq: usize,
    hq: usize,
    d: usize,
    dv: usize,
    block_size: usize,
    masks: Masks,
    /// `None`: `decode_latent::splits`' choice.
    splits: Option<u32>,
    /// Elements before the pool in its buffer (1: not 16-byte aligned, the element path).
    pool_offset: usize,
}

impl WithMasks for Case {
    fn masks_mut(&mut self) -> &mut Masks {
        &mut self.masks
    }
}

impl Case {
    /// A causal case (decode steps are).
    fn new(name: &'static str, lens: &[usize], tq: usize, (hq, d, dv): (usize, usize, usize), bs: usize) -> Self {
        let masks = Masks { causal: true, ..Masks::default() };
        Case { name, lens: lens.to_vec(), tq, hq, d, dv, block_size: bs, masks, splits: Some(1), pool_offset: 0 }
    }

    fn pool_offset(mut self, elements: usize) -> Self {
        self.pool_offset = elements;
        self
    }

    /// Whether the launcher should read this case's pool with 16-byte loads.
    fn wide(&self, dt: DType) -> bool {
        let allowed = std::env::var("VKFORMERS_LATENT_WIDE").map_or(true, |v| v != "0");
        allowed && self.d.is_multiple_of(8) && (self.pool_offset * dt.bytes() as usize).is_multiple_of(16)
    }

    fn splits(mut self, s: Option<u32>) -> Self {
        self.splits = s;
        self
    }
}

/// The reference o [B, Tq, Hq, Dv] and lse [B, Hq, Tq], one row at a time: keys are the latent
/// rows, values their first Dv columns.
fn expected(case: &Case, q: &[Vec<f32>], k: &[Vec<f32>], scale: f32) -> (Vec<f64>, Vec<f64>) {
    let v: Vec<Vec<f32>> = k.iter().map(|k| latent_values(k, case.d, case.dv)).collect();
    reference_rows(&case.masks, (case.tq, case.hq, 1, case.d, case.dv), &case.lens, [q, k, &v], scale)
}

/// Checks `case` with a pool of `dt`, q and o of `act` (`dt`, or f32 over a 16-bit pool).
fn check(ctx: &Context, case: &Case, seed: u64, (dt, act): (DType, DType)) -> Result<()> {
    let mut rng = Rng::new(seed);
    let lay = Layout::random(&case.lens, case.block_size, &mut rng);
    let amp = if case.masks.softcap > 0.0 { 3.0 } else { 1.0 };
    let q: Vec<Vec<f32>> = case.lens.iter().map(|_| round(act, &rng.vec(case.tq * case.hq * case.d, amp))).collect();
    let k: Vec<Vec<f32>> = case.lens.iter().map(|&l| round(dt, &rng.vec(l * case.d, amp))).collect();
    let mut pool = vec![f32::NAN; case.pool_offset + lay.num_blocks * case.block_size * case.d];
    for (b, &len) in case.lens.iter().enumerate() {
        for j in 0..len {
            let at = case.pool_offset + lay.pool_row(b, j) * case.d;
            pool[at..at + case.d].copy_from_slice(&k[b][j * case.d..(j + 1) * case.d]);
        }
    }
    let batch = case.lens.len();
    let shape = lay.latent_shape((batch, case.tq), case.hq, (case.d, case.dv));
    let splits = case.splits.unwrap_or_else(|| decode_latent::splits(&shape, max_len(&case.lens)));
    let (bq, bpool) = (upload(ctx, act, &q.concat(), "q")?, upload(ctx, dt, &pool, "pool")?);
    let (table, lens) = lay.upload(ctx, &case.lens)?;
    let slopes = ctx.buffer_from(&alibi_slopes(case.hq), "slopes")?;
    let rows = batch * case.tq * case.hq;
    let o = upload(ctx, act, &vec![f32::NAN; rows * case.dv], "o")?;
    let lse = ctx.buffer((rows * 4) as u64, "lse")?;
    let work = ctx.buffer(decode_latent::work_floats(&shape, splits).max(1) * 4, "work")?;
    let opt = case.masks.decode(shape.d, (Some(slopes.view()), None), (dt, act));
    let pool_view =
        bpool.buf.slice(case.pool_offset as u64 * dt.bytes(), (pool.len() - case.pool_offset) as u64 * dt.bytes());
    let x = LatentInputs { q: bq.view(), pool: pool_view, table: table.view(), lens: lens.view() };
    let wide = decode_latent::reads_wide(shape.d, &x);
    assert_eq!(wide, case.wide(dt), "{}: load path", case.name);
    let w = (splits > 1).then(|| work.slice(0, decode_latent::work_floats(&shape, splits) * 4));
    let out = LatentOutputs { o: o.view(), lse: lse.view(), work: w };
    let mut rec = ctx.recorder(false)?;
    decode_latent::forward(&mut rec, &x, &out, &shape, &opt, splits)?;
    rec.submit()?;

    let path = if wide { "16-byte loads" } else { "element loads" };
    let name = format!("{} {dt:?}, q/o {act:?} ({splits} splits, {path})", case.name);
    let (want_o, want_lse) = expected(case, &q, &k, opt.scale);
    let (got_o, got_lse) = (download(ctx, act, o.view())?, ctx.read_vec::<f32>(lse.view())?);
    eprintln!("{name}: max |err| o {:.2e}, lse {:.2e}", max_err(&got_o, &want_o), max_err(&got_lse, &want_lse));
    assert_close(&format!("{name}: o"), &got_o, &want_o, tol(dt));
    assert_close(&format!("{name}: lse"), &got_lse, &want_lse, TOL_F32);
    Ok(())
}

/// Largest |got − want| over the finite wants (an empty row's lse is the mask value).
fn max_err(got: &[f32], want: &[f64]) -> f64 {
    got.iter().zip(want).filter(|(_, w)| w.abs() < 1e29).map(|(&g, w)| (f64::from(g) - w).abs()).fold(0.0, f64::max)
}

fn run(test: &str, cases: &[Case], types: (DType, DType)) {
    run_cases(test, cases, types, 2000, check);
}

fn cases() -> Vec<Case> {
    vec![
        // MiniCPM3's row (256 + 32), 5 heads in one tile, an empty row, one of one key.
        Case::new("d288 dv256 tq1 hq5 bs5, rows 37/0/1", &[37, 0, 1], 1, (5, 288, 256), 5),
        // DeepSeek-V3's row (512 + 64), 16 heads: one full tile.
        Case::new("d576 dv512 tq1 hq16 bs16", &[45, 20], 1, (16, 576, 512), 16),
        // Odd widths (element loads past every multiple of 8), 3 new rows of 3 heads.
        Case::new("d299 dv283 tq3 hq3 bs4", &[17, 30], 3, (3, 299, 283), 4),
        // Two row tiles (the second partial), 2 new rows, forced split.
        Case::new("d576 dv512 tq2 hq20 split 3", &[100, 9], 2, (20, 576, 512), 16).splits(Some(3)),
        // Automatic split of a long row, with a short one (empty splits).
        Case::new("d330 dv300 split auto", &[700, 3], 1, (4, 330, 300), 32).splits(None),
        Case::new("d264 dv256 window 20 split 4", &[90, 33], 3, (6, 264, 256), 16).window(20).splits(Some(4)),
        Case::new("d300 dv280 chunk 10 tq3", &[37, 21], 3, (2, 300, 280), 5).chunk(10),
        Case::new("d288 dv272 softcap alibi", &[15, 7], 2, (3, 288, 272), 4).softcap(2.0).alibi(),
        Case::new("d320 dv288 not causal", &[12, 8], 3, (2, 320, 288), 4).not_causal(),
        // 16-byte loads with splits: DeepSeek-V3's row over a long and a short row (automatic
        // splits, tiles past a split's end), MiniCPM3's over 5 forced splits of odd lengths.
        Case::new("d576 dv512 tq1 hq16 split auto", &[300, 61], 1, (16, 576, 512), 16).splits(None),
        Case::new("d288 dv256 tq2 hq7 split 5", &[77, 41], 2, (7, 288, 256), 8).splits(Some(5)),
        Case::new("d320 dv256 tq1 hq9 split 2", &[50, 19], 1, (9, 320, 256), 4).splits(Some(2)),
        // A width of the wide path over a pool one element off 16 bytes: the element path.
        Case::new("d576 dv512 pool offset 1", &[40, 23], 1, (5, 576, 512), 16).pool_offset(1),
    ]
}

#[test]
fn latent_decode_matches_reference_f32() {
    run("latent decode", &cases(), (DType::F32, DType::F32));
}

fn cases_16bit() -> Vec<Case> {
    let all = cases();
    [0, 1, 3, 4, 7, 9, 10, 12].iter().map(|&i| all[i].clone()).collect()
}

#[test]
fn latent_decode_matches_reference_16bit() {
    run("latent decode", &cases_16bit(), (DType::BF16, DType::BF16));
    run("latent decode", &cases_16bit(), (DType::F16, DType::F16));
}

/// f32 q and o over a 16-bit pool (a model's f32 activations over a bf16 cache).
#[test]
fn latent_decode_f32_queries_over_16bit_pools() {
    run("latent decode", &cases_16bit(), (DType::BF16, DType::F32));
    run("latent decode", &cases_16bit(), (DType::F16, DType::F32));
}

/// Bad calls are errors, not device faults: rows over 576 columns, dv > d, a split call without
/// a work buffer, learned sinks, a pool of the wrong size.
#[test]
fn latent_decode_rejects_bad_calls() {
    on_every_device("latent decode errors", |ctx| {
        let shape =
            LatentShape { batch: 1, tq: 1, hq: 2, d: 300, dv: 256, block_size: 4, num_blocks: 2, max_blocks: 2 };
        let buf = |n: usize| ctx.buffer((n * 4) as u64, "x");
        let (q, pool, small, ints, lens, lse, o) =
            (buf(600)?, buf(2400)?, buf(2399)?, buf(2)?, buf(1)?, buf(2)?, buf(512)?);
        let x = LatentInputs { q: q.view(), pool: pool.view(), table: ints.view(), lens: lens.view() };
        let out = LatentOutputs { o: o.view(), lse: lse.view(), work: None };
        let opt = DecodeOptions::new(300);
        let mut rec = ctx.recorder(false)?;
        assert!(decode_latent::forward(&mut rec, &x, &out, &shape, &opt, 2).is_err());
        let wide = LatentShape { d: 600, ..shape };
        assert!(decode_latent::forward(&mut rec, &x, &out, &wide, &opt, 1).is_err());
        let dv = LatentShape { dv: 301, ..shape };
        assert!(decode_latent::forward(&mut rec, &x, &out, &dv, &opt, 1).is_err());
        let sinks = DecodeOptions { sinks: Some(lse.view()), ..opt };
        assert!(decode_latent::forward(&mut rec, &x, &out, &shape, &sinks, 1).is_err());
        let bad = LatentInputs { pool: small.view(), ..x };
        assert!(decode_latent::forward(&mut rec, &bad, &out, &shape, &opt, 1).is_err());
        assert!(decode_latent::forward(&mut rec, &x, &out, &shape, &opt, 1).is_ok());
        Ok(())
    });
}
