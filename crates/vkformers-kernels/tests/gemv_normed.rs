//! GEMV with a normed input (`gemv_group_normed`: the RMSNorm of x, plus a residual, computed
//! while x is loaded): one to three products against an f64 reference of
//! `y_p = rmsnorm(x + r) · W_pᵀ`, on odd shapes (k not a multiple of 8, m = 1..16 across every
//! row bucket, blocks of 4 rows of W ending inside a product), every gain mode (none, w, 1 + w),
//! with and without the residual, the wide-load path and the element path (padded rows); the sum
//! `x + r` the kernel writes equals the f32 add bit for bit, and the x̂ it writes matches the
//! reference. On every device with validation on (`VKFORMERS_GEMV_CPU_VARIANTS=0` runs the GPUs'
//! 128-thread variants, with their reductions across subgroups, on lavapipe too).

use vkformers_kernels::matmul::gemv::{self, GemvDesc, NormedInput};
use vkformers_kernels::matmul::DType;
use vkformers_kernels::testutil::storage::{round, upload};
use vkformers_kernels::testutil::{assert_close, Rng, Tol, TOL_F32};
use vkformers_vk::testing::on_every_device;
use vkformers_vk::{Buffer, BufferView, Context, Result, VkError};

/// Tolerance of y per weight dtype. W is rounded to its dtype before the upload and the reference
/// multiplies the same rounded values, so what is left is f32 rounding of x̂ (its sum of squares
/// in another order than the reference's) and of the products' sums: the same for every dtype.
fn tol(dtype: DType) -> Tol {
    match dtype {
        DType::F32 | DType::F16 | DType::BF16 => TOL_F32,
    }
}

/// One normed group to check.
#[derive(Clone, Copy, Debug)]
struct Case {
    m: u32,
    k: u32,
    /// Extra f32 between rows of x, r, hs and x̂ (0: packed; 1: odd rows, the element path).
    pad: u32,
    dtype: DType,
    /// 0: g = 1, 1: w, 2: 1 + w.
    gain: u32,
    residual: bool,
    write_normed: bool,
}

/// `(hs, x̂)` of rows of `[m, k]` rows `ldx` apart in f64: `h = x (+ r)`, `x̂ = h · rstd · g`.
fn reference_norm(c: &Case, ldx: usize, x: &[f32], r: &[f32], w: &[f32], eps: f32) -> (Vec<f32>, Vec<f64>) {
    let (m, k) = (c.m as usize, c.k as usize);
    let mut hs = vec![0f32; m * k];
    let mut xn = vec![0f64; m * k];
    for i in 0..m {
        let row: Vec<f32> =
            (0..k).map(|j| if c.residual { x[i * ldx + j] + r[i * ldx + j] } else { x[i * ldx + j] }).collect();
        let ss: f64 = row.iter().map(|&v| f64::from(v) * f64::from(v)).sum();
        let rstd = 1.0 / (ss / k as f64 + f64::from(eps)).sqrt();
        for j in 0..k {
            let g = match c.gain {
                0 => 1.0,
                1 => f64::from(w[j]),
                _ => 1.0 + f64::from(w[j]),
            };
            hs[i * k + j] = row[j];
            xn[i * k + j] = f64::from(row[j]) * rstd * g;
        }
    }
    (hs, xn)
}

/// Rows of `[m, k]` rows `ld` apart, packed.
fn packed_rows(v: &[f32], m: usize, k: usize, ld: usize) -> Vec<f32> {
    (0..m).flat_map(|i| v[i * ld..i * ld + k].iter().copied()).collect()
}

/// The device buffers of one case: x, r, w (the gain), hs and x̂ f32, rows `ldx` apart.
struct Inputs {
    x: Vec<f32>,
    r: Vec<f32>,
    w: Vec<f32>,
    bufs: [Buffer; 5],
}

fn inputs(ctx: &Context, c: &Case, rng: &mut Rng) -> Result<Inputs> {
    let ldx = (c.k + c.pad) as usize;
    let len = (c.m as usize - 1) * ldx + c.k as usize;
    // x and r of different scales, h of rows far from unit RMS: the norm must matter.
    let (x, r, w) = (rng.vec(len, 3.0), rng.vec(len, 0.5), rng.vec(c.k as usize, 1.5));
    let bufs = [
        ctx.buffer_from(&x, "x")?,
        ctx.buffer_from(&r, "r")?,
        ctx.buffer_from(&w, "gain")?,
        ctx.buffer_from(&vec![7.0f32; len], "hs")?,
        ctx.buffer_from(&vec![7.0f32; len], "normed")?,
    ];
    Ok(Inputs { x, r, w, bufs })
}

/// Runs one normed group of the products `ns` and checks y, hs and x̂.
fn check(ctx: &Context, c: Case, ns: &[u32], seed: u64) -> Result<()> {
    let mut rng = Rng::new(seed);
    let (m, k, ldx) = (c.m as usize, c.k as usize, (c.k + c.pad) as usize);
    let inp = inputs(ctx, &c, &mut rng)?;
    let mut ws = Vec::new();
    let (mut wbufs, mut ybufs) = (Vec::new(), Vec::new());
    for &n in ns {
        let mut w = round(c.dtype, &rng.vec(n as usize * k, 1.0));
        ws.push(w.clone());
        if w.len() % 2 == 1 {
            w.push(0.0); // 16-bit W is read as 4-byte words
        }
        wbufs.push(upload(ctx, c.dtype, &w, "w")?);
        ybufs.push(ctx.buffer_from(&vec![9.0f32; m * n as usize + 3], "y")?);
    }
    let eps = 1e-5;
    let [xb, rb, gb, hb, nb] = &inp.bufs;
    let norm = NormedInput {
        gain: (c.gain != 0).then(|| gb.view()),
        unit_offset: c.gain == 2,
        eps,
        residual: c.residual.then(|| (rb.view(), hb.view())),
        normed: c.write_normed.then(|| nb.view()),
    };
    let desc = GemvDesc { ldx: ldx as u32, ..GemvDesc::packed(c.m, ns[0], c.k, c.dtype) };
    let elem = c.dtype.bytes();
    let parts: Vec<(u32, BufferView<'_>, BufferView<'_>)> = ns
        .iter()
        .enumerate()
        .map(|(p, &n)| {
            (n, wbufs[p].buf.slice(0, u64::from(n) * k as u64 * elem), ybufs[p].slice(0, (m * n as usize * 4) as u64))
        })
        .collect();
    let mut rec = ctx.recorder(false)?;
    gemv::gemv_group_normed(&mut rec, &desc, xb.view(), &norm, &parts)?;
    rec.submit()?;

    let what = format!("{c:?} ns {ns:?}");
    let (hs_want, xn_want) = reference_norm(&c, ldx, &inp.x, &inp.r, &inp.w, eps);
    let untouched = |b: &Buffer| -> Result<Vec<f32>> { Ok(packed_rows(&ctx.read_vec::<f32>(b.view())?, m, k, ldx)) };
    let hs_got = untouched(hb)?;
    if c.residual {
        let bits = |v: &[f32]| v.iter().map(|x| x.to_bits()).collect::<Vec<_>>();
        assert_eq!(bits(&hs_got), bits(&hs_want), "{what}: hs != x + r in f32");
    } else {
        assert!(hs_got.iter().all(|&v| v == 7.0), "{what}: hs written without a residual");
    }
    let xn_got = untouched(nb)?;
    if c.write_normed {
        assert_close(&format!("{what}: x̂"), &xn_got, &xn_want, TOL_F32);
    } else {
        assert!(xn_got.iter().all(|&v| v == 7.0), "{what}: x̂ written though not asked for");
    }
    for (p, &n) in ns.iter().enumerate() {
        let n = n as usize;
        let got: Vec<f32> = ctx.read_vec(ybufs[p].view())?;
        let mut want = vec![9.0f64; m * n + 3];
        for i in 0..m {
            for j in 0..n {
                want[i * n + j] = (0..k).map(|t| xn_want[i * k + t] * f64::from(ws[p][j * k + t])).sum();
            }
        }
        assert_close(&format!("{what}: product {p}"), &got, &want, tol(c.dtype));
    }
    Ok(())
}

/// Groups of 1, 2 and 3 products (n with blocks of 4 rows ending inside them) on every weight
/// dtype, row bucket (m = 1..16, full and partly used), k a multiple of 8 and not (7, 13, 130,
/// 1001), the gain modes, with and without the residual, packed and padded rows.
#[test]
fn gpu_gemv_normed_input_matches_the_f64_reference() {
    on_every_device("gemv normed", |ctx| {
        let mut seed = 9000;
        let shapes = [(1, 1000), (2, 7), (3, 13), (4, 64), (5, 130), (8, 576), (9, 1001), (16, 40)];
        let groups: [&[u32]; 3] = [&[37, 9, 9], &[33, 34], &[13]];
        for dtype in [DType::F32, DType::F16, DType::BF16] {
            for (s, &(m, k)) in shapes.iter().enumerate() {
                seed += 1;
                let case = Case {
                    m,
                    k,
                    pad: (s % 3 == 2) as u32,
                    dtype,
                    gain: (s % 3) as u32,
                    residual: s % 2 == 0,
                    write_normed: s % 4 < 2,
                };
                check(ctx, case, groups[s % 3], seed)?;
            }
        }
        Ok(())
    });
}

/// Both ways of each switch on one shape: residual on and off, every gain mode, x̂ written.
#[test]
fn gpu_gemv_normed_input_every_mode() {
    on_every_device("gemv normed modes", |ctx| {
        let mut seed = 9500;
        for residual in [false, true] {
            for gain in 0..3 {
                seed += 1;
                let case = Case { m: 3, k: 136, pad: 0, dtype: DType::BF16, gain, residual, write_normed: true };
                check(ctx, case, &[21, 6, 5], seed)?;
            }
        }
        Ok(())
    });
}

/// Outputs overlapping an operand (an in-place add, x̂ over y) and empty products are errors
/// naming the kernel; nothing is recorded.
#[test]
fn bad_normed_inputs_are_errors() {
    on_every_device("gemv normed errors", |ctx| {
        let (x, r, y, hs) =
            (ctx.buffer(2 * 8 * 4, "x")?, ctx.buffer(2 * 8 * 4, "r")?, ctx.buffer(64, "y")?, ctx.buffer(64, "hs")?);
        let w = ctx.buffer(5 * 8 * 4, "w")?;
        let d = GemvDesc::packed(2, 5, 8, DType::F32);
        let base = NormedInput { gain: None, unit_offset: false, eps: 1e-6, residual: None, normed: None };
        let mut rec = ctx.recorder(false)?;
        let mut fails = |norm: NormedInput<'_>, n: u32, what: &str| {
            let e =
                gemv::gemv_group_normed(&mut rec, &d, x.view(), &norm, &[(n, w.view(), y.slice(0, 40))]).unwrap_err();
            assert!(
                matches!(&e, VkError::Kernel { kernel, message } if kernel.starts_with("matmul/gemv:f32_m4") && message.contains(what)),
                "{what}: {e}"
            );
        };
        fails(NormedInput { residual: Some((r.view(), x.view())), ..base }, 5, "hs: the view overlaps");
        fails(
            NormedInput { residual: Some((r.view(), hs.view())), normed: Some(y.view()), ..base },
            5,
            "normed: the view overlaps",
        );
        fails(
            NormedInput { residual: Some((r.view(), hs.view())), normed: Some(hs.view()), ..base },
            5,
            "hs: the view overlaps",
        );
        fails(base, 0, "empty product");
        fails(NormedInput { residual: Some((r.slice(0, 60), hs.view())), ..base }, 5, "r: needs 64 bytes");
        assert!(rec.is_empty());
        rec.submit()?;
        Ok(())
    });
}

/// The recorder sees the normed product write hs and x̂: a product reading hs (the next layer's
/// input) right after it gets a barrier and the sum's values; a product reading x̂ after that
/// needs no second barrier and gets the normed product's values; a product of other operands
/// recorded first after the normed one runs without a barrier.
#[test]
fn gpu_gemv_normed_outputs_are_seen_by_the_hazard_tracking() {
    on_every_device("gemv normed hazards", |ctx| {
        let (m, n, k) = (2u32, 9u32, 24u32);
        let mut rng = Rng::new(9900);
        let (x, r, w) =
            (rng.vec((m * k) as usize, 2.0), rng.vec((m * k) as usize, 1.0), rng.vec((n * k) as usize, 1.0));
        let (xb, rb, wb) = (ctx.buffer_from(&x, "x")?, ctx.buffer_from(&r, "r")?, ctx.buffer_from(&w, "w")?);
        let other = ctx.buffer_from(&rng.vec((m * k) as usize, 1.0), "other x")?;
        let bufs: Vec<Buffer> =
            (0..6).map(|i| ctx.buffer(u64::from(m * k.max(n)) * 4, &format!("out {i}"))).collect::<Result<_>>()?;
        let [hs, xn, y_normed, y_other, y_hs, y_xn] = &bufs[..] else { unreachable!() };
        let bytes = u64::from(m * n) * 4;
        fn y(b: &Buffer, bytes: u64) -> BufferView<'_> {
            b.slice(0, bytes)
        }
        let d = GemvDesc::packed(m, n, k, DType::F32);
        let norm = NormedInput {
            gain: None,
            unit_offset: false,
            eps: 1e-6,
            residual: Some((rb.view(), hs.slice(0, u64::from(m * k) * 4))),
            normed: Some(xn.slice(0, u64::from(m * k) * 4)),
        };
        let mut rec = ctx.recorder(false)?;
        gemv::gemv_group_normed(&mut rec, &d, xb.view(), &norm, &[(n, wb.view(), y(y_normed, bytes))])?;
        gemv::gemv_group(&mut rec, &d, other.view(), &[(n, wb.view(), y(y_other, bytes))])?;
        gemv::gemv_group(&mut rec, &d, hs.view(), &[(n, wb.view(), y(y_hs, bytes))])?;
        gemv::gemv_group(&mut rec, &d, xn.view(), &[(n, wb.view(), y(y_xn, bytes))])?;
        let report = rec.submit()?;
        assert_eq!(report.barriers, 1, "one barrier, before the first reader of hs or x̂");
        let read = |b: &Buffer| ctx.read_vec::<f32>(y(b, bytes));
        // The product of hs is the plain product of x + r.
        let sum: Vec<f64> = x.iter().zip(&r).map(|(a, b)| f64::from(a + b)).collect();
        let mut want = vec![0f64; (m * n) as usize];
        for i in 0..m as usize {
            for j in 0..n as usize {
                want[i * n as usize + j] =
                    (0..k as usize).map(|t| sum[i * k as usize + t] * f64::from(w[j * k as usize + t])).sum();
            }
        }
        assert_close("product of hs", &read(y_hs)?, &want, TOL_F32);
        let normed: Vec<f64> = read(y_normed)?.iter().map(|&v| f64::from(v)).collect();
        assert_close("product of x̂ against the normed product", &read(y_xn)?, &normed, TOL_F32);
        Ok(())
    });
}
