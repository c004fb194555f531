//! GEMV (`y = x · Wᵀ + bias` for up to 16 rows of x): the GPU kernel against the f64 GEMM
//! reference on odd shapes, every W dtype and row bucket, with and without bias, on the
//! wide-load path (aligned) and the element path (odd k, padded rows, odd offsets), on every
//! device with validation on.

use vkformers_kernels::glu::{self, reference as glu_ref, Glu};
use vkformers_kernels::matmul::gemv::{self, GemvDesc};
use vkformers_kernels::matmul::{reference, DType, GemmDesc};
use vkformers_kernels::testutil::storage::{round, upload};
use vkformers_kernels::testutil::{assert_close, f64s, Rng, TOL_F32};
use vkformers_vk::testing::on_every_device;
use vkformers_vk::{BufferView, Context, Result, VkError};

/// Every bucket of the variants (1, ≤ 4, ≤ 8, ≤ 16), full and partly used.
const ROWS: [u32; 6] = [1, 3, 5, 8, 12, 16];
const DEPTHS: [u32; 4] = [1, 7, 576, 1000];

/// Where the operands sit: the wide-load path needs k a multiple of 16 bytes of W, 16-byte
/// aligned W and x, and ldx a multiple of 4; `Offset` keeps that with padded rows and views
/// 16 bytes into their buffers, `Odd` breaks it (ldx odd, W at an odd element or word).
#[derive(Clone, Copy, Debug)]
enum Layout {
    Packed,
    Offset,
    Odd,
}

const LAYOUTS: [Layout; 3] = [Layout::Packed, Layout::Offset, Layout::Odd];

/// One product to check.
#[derive(Clone, Copy, Debug)]
struct Case {
    m: u32,
    n: u32,
    k: u32,
    dtype: DType,
    has_bias: bool,
    layout: Layout,
}

/// (ldx, ldy, elements of x before the view, elements of W before the view).
fn placement(layout: Layout, n: u32, k: u32, dtype: DType) -> (u32, u32, usize, usize) {
    match layout {
        Layout::Packed => (k, n, 0, 0),
        Layout::Offset => (k.next_multiple_of(4) + 4, n + 3, 4, 16 / dtype.bytes() as usize),
        Layout::Odd => (k + 1, n + 1, 1, 1),
    }
}

/// Runs one GEMV with random operands (W rounded to its dtype, as the kernel sees it) and
/// checks all of y, padding included, against the reference: the rows of y that the GEMV
/// writes, and the padding between them untouched.
fn check(ctx: &Context, case: Case, seed: u64) -> Result<()> {
    let Case { m, n, k, dtype, has_bias, layout } = case;
    let (ldx, ldy, x_pad, w_pad) = placement(layout, n, k, dtype);
    let desc = GemvDesc { m, n, k, ldx, ldy, dtype, has_bias };
    let (mu, nu, ku) = (m as usize, n as usize, k as usize);
    let mut rng = Rng::new(seed);
    let x_len = (mu - 1) * ldx as usize + ku;
    let y_len = (mu - 1) * ldy as usize + nu;
    let x_all = rng.vec(x_pad + x_len, 1.0);
    // 16-bit W is read as 4-byte words: pad the buffer to an even number of elements.
    let mut w_all = round(dtype, &rng.vec(w_pad + nu * ku, 1.0));
    if w_all.len() % 2 == 1 {
        w_all.push(0.0);
    }
    let bias = rng.vec(nu, 1.0);
    let y0 = rng.vec(y_len, 1.0);

    let xb = ctx.buffer_from(&x_all, "x")?;
    let wb = upload(ctx, dtype, &w_all, "w")?;
    let bb = ctx.buffer_from(&bias, "bias")?;
    let yb = ctx.buffer_from(&y0, "y")?;
    let elem = dtype.bytes();
    let x_view = xb.slice(x_pad as u64 * 4, x_len as u64 * 4);
    let w_view = wb.buf.slice(w_pad as u64 * elem, (nu * ku) as u64 * elem);
    let mut rec = ctx.recorder(false)?;
    gemv::gemv(&mut rec, &desc, x_view, w_view, has_bias.then(|| bb.view()), yb.view())?;
    rec.submit()?;
    let got: Vec<f32> = ctx.read_vec(yb.view())?;

    let gd = GemmDesc { lda: ldx, ldc: ldy, has_bias, ..GemmDesc::packed(m, n, k, false, true) };
    let mut want = f64s(&y0);
    let (xs, ws) = (f64s(&x_all[x_pad..]), f64s(&w_all[w_pad..w_pad + nu * ku]));
    reference::gemm(&gd, &xs, &ws, has_bias.then_some(&f64s(&bias)[..]), &mut want);
    // W was rounded before upload, so the only error left is f32 accumulation: f32 tolerance.
    assert_close(&format!("{desc:?} {layout:?}"), &got, &want, TOL_F32);
    Ok(())
}

/// Every row bucket, depth and layout on narrow outputs (n = 1 and 33: an N tail inside one
/// workgroup of 4 rows of W), bias on every other case; then n = 4099 on a few (m, k), one
/// layout each.
fn check_dtype(ctx: &Context, dtype: DType, depths: &[u32], seed0: u64) -> Result<()> {
    let mut seed = seed0;
    for &m in &ROWS {
        for &k in depths {
            for n in [1, 33] {
                for layout in LAYOUTS {
                    seed += 1;
                    check(ctx, Case { m, n, k, dtype, has_bias: seed % 2 == 1, layout }, seed)?;
                }
            }
        }
    }
    let wide = [(1, 1000, Layout::Packed), (3, 576, Layout::Offset), (8, 7, Layout::Odd), (16, 1000, Layout::Offset)];
    for (m, k, layout) in wide {
        seed += 1;
        check(ctx, Case { m, n: 4099, k, dtype, has_bias: seed % 2 == 1, layout }, seed)?;
    }
    Ok(())
}

#[test]
fn gpu_gemv_f32_weights() {
    on_every_device("gemv f32", |ctx| check_dtype(ctx, DType::F32, &DEPTHS, 1000));
}

#[test]
fn gpu_gemv_f16_weights() {
    // k = 6 is word-aligned rows but not whole chunks of 8: the element path.
    on_every_device("gemv f16", |ctx| check_dtype(ctx, DType::F16, &[1, 6, 7, 576, 1000], 2000));
}

#[test]
fn gpu_gemv_bf16_weights() {
    on_every_device("gemv bf16", |ctx| check_dtype(ctx, DType::BF16, &[1, 6, 7, 576, 1000], 3000));
}

/// More rows of W than the grid holds workgroups (65535 × 4): the grid-stride loop.
#[test]
fn gpu_gemv_grid_stride_over_many_outputs() {
    on_every_device("gemv grid stride", |ctx| {
        let n = 65_535 * 4 + 9;
        check(ctx, Case { m: 2, n, k: 1, dtype: DType::BF16, has_bias: true, layout: Layout::Packed }, 4000)?;
        check(ctx, Case { m: 1, n, k: 8, dtype: DType::F32, has_bias: false, layout: Layout::Offset }, 4001)
    });
}

/// k = 0: y is the bias (or zeros), and nothing is read through x or W.
#[test]
fn gpu_gemv_empty_depth_gives_the_bias() {
    on_every_device("gemv k = 0", |ctx| {
        let (x, w) = (ctx.buffer(4, "x")?, ctx.buffer(4, "w")?);
        let bias = ctx.buffer_from(&[1.5f32, -2.0, 0.25], "bias")?;
        let y = ctx.buffer_from(&[9.0f32; 6], "y")?;
        let mut rec = ctx.recorder(false)?;
        let with = GemvDesc { has_bias: true, ..GemvDesc::packed(2, 3, 0, DType::BF16) };
        gemv::gemv(&mut rec, &with, x.view(), w.view(), Some(bias.view()), y.view())?;
        rec.submit()?;
        assert_eq!(ctx.read_vec::<f32>(y.view())?, [1.5, -2.0, 0.25, 1.5, -2.0, 0.25]);
        let mut rec = ctx.recorder(false)?;
        gemv::gemv(&mut rec, &GemvDesc::packed(2, 3, 0, DType::F32), x.view(), w.view(), None, y.view())?;
        rec.submit()?;
        assert_eq!(ctx.read_vec::<f32>(y.view())?, [0.0; 6]);
        Ok(())
    });
}

#[test]
fn bad_descriptions_are_errors_naming_the_kernel() {
    on_every_device("gemv errors", |ctx| {
        let x = ctx.buffer(2 * 5 * 4, "x")?; // f32 [2, 5]
        let w = ctx.buffer(3 * 5 * 2, "w")?; // bf16 [3, 5]: 30 bytes, not whole words
        let y = ctx.buffer(2 * 3 * 4, "y")?;
        let d = GemvDesc::packed(2, 3, 5, DType::BF16);
        let mut rec = ctx.recorder(false)?;
        let is_err = |e: &VkError, what: &str| matches!(e, VkError::Kernel { kernel, message } if kernel.starts_with("matmul/gemv:bf16_m4") && message.contains(what));
        let mut fails =
            |d: &GemvDesc, x: BufferView, w: BufferView, bias: Option<BufferView>, y: BufferView, what: &str| {
                let e = gemv::gemv(&mut rec, d, x, w, bias, y).unwrap_err();
                assert!(is_err(&e, what), "{what}: {e}");
            };
        fails(&d, x.view(), w.view(), None, y.view(), "pad the buffer");
        let w = ctx.buffer(32, "w")?;
        fails(&d, x.view(), w.slice(0, 28), None, y.view(), "W: needs 30 bytes");
        fails(&d, x.view(), w.slice(1, 30), None, y.view(), "not a multiple of 2");
        fails(&d, x.slice(0, 36), w.view(), None, y.view(), "x: needs 40 bytes");
        fails(&GemvDesc { ldx: 4, ..d }, x.view(), w.view(), None, y.view(), "ldx 4 below k 5");
        fails(&GemvDesc { ldy: 4, ..d }, x.view(), w.view(), None, y.view(), "y: needs 28 bytes");
        fails(&GemvDesc { ldy: 2, ..d }, x.view(), w.view(), None, y.view(), "ldy 2 below n 3");
        fails(&GemvDesc { has_bias: true, ..d }, x.view(), w.view(), None, y.view(), "has_bias");
        fails(&GemvDesc { has_bias: true, ..d }, x.view(), w.view(), Some(y.slice(0, 8)), y.view(), "bias: 8 bytes");
        let e = gemv::gemv(&mut rec, &GemvDesc { m: 17, ..d }, x.view(), w.view(), None, y.view()).unwrap_err();
        assert!(
            matches!(&e, VkError::Kernel { kernel, message } if kernel.starts_with("matmul/gemv:bf16_m") && message.contains("m = 17 rows above the 16")),
            "{e}"
        );
        assert!(rec.is_empty());
        rec.submit()?;
        Ok(())
    });
}

/// One group of products `y_p = x · W_pᵀ` (the parts' n), each W in its own buffer (the first
/// at `w_pad` elements into it): the grouped dispatch equals one `gemv` per weight bit for bit,
/// and the f64 reference to f32 tolerance; the padding of y past each product untouched.
fn check_group(ctx: &Context, (m, k, dtype): (u32, u32, DType), ns: &[u32], w_pad: usize, seed: u64) -> Result<()> {
    let mut rng = Rng::new(seed);
    let x = rng.vec((m * k) as usize, 1.0);
    let xb = ctx.buffer_from(&x, "x")?;
    let elem = dtype.bytes();
    let (mut wbufs, mut ybufs, mut solo, mut ws) = (Vec::new(), Vec::new(), Vec::new(), Vec::new());
    for (p, &n) in ns.iter().enumerate() {
        let pad = if p == 0 { w_pad } else { 0 };
        let mut w = round(dtype, &rng.vec(pad + (n * k) as usize, 1.0));
        if w.len() % 2 == 1 {
            w.push(0.0);
        }
        wbufs.push((upload(ctx, dtype, &w, "w")?, pad));
        let y0 = rng.vec((m * n) as usize + 3, 1.0);
        ybufs.push((ctx.buffer_from(&y0, "y")?, ctx.buffer_from(&y0, "y solo")?, y0));
        ws.push(w[pad..pad + (n * k) as usize].to_vec());
    }
    let desc = GemvDesc::packed(m, ns[0], k, dtype);
    let view = |i: usize| wbufs[i].0.buf.slice(wbufs[i].1 as u64 * elem, u64::from(ns[i] * k) * elem);
    fn yv(b: &vkformers_vk::Buffer, bytes: u64) -> BufferView<'_> {
        b.slice(0, bytes)
    }
    let parts: Vec<_> = (0..ns.len()).map(|i| (ns[i], view(i), yv(&ybufs[i].0, u64::from(m * ns[i]) * 4))).collect();
    let mut rec = ctx.recorder(false)?;
    gemv::gemv_group(&mut rec, &desc, xb.view(), &parts)?;
    for (i, &n) in ns.iter().enumerate() {
        gemv::gemv(
            &mut rec,
            &GemvDesc { n, ldy: n, ..desc },
            xb.view(),
            view(i),
            None,
            yv(&ybufs[i].1, u64::from(m * n) * 4),
        )?;
    }
    rec.submit()?;
    for (i, &n) in ns.iter().enumerate() {
        let got: Vec<f32> = ctx.read_vec(ybufs[i].0.view())?;
        solo.push(ctx.read_vec::<f32>(ybufs[i].1.view())?);
        let what = format!("group {ns:?} {dtype:?} m {m} k {k} pad {w_pad}: product {i}");
        assert_eq!(
            got.iter().map(|v| v.to_bits()).collect::<Vec<_>>(),
            solo[i].iter().map(|v| v.to_bits()).collect::<Vec<_>>(),
            "{what}: grouped != alone"
        );
        let mut want = f64s(&ybufs[i].2);
        reference::gemm(&GemmDesc::packed(m, n, k, false, true), &f64s(&x), &f64s(&ws[i]), None, &mut want);
        assert_close(&what, &got, &want, TOL_F32);
    }
    Ok(())
}

/// q/k/v-like and gate/up-like groups: odd n (blocks of 4 rows end inside each product), every
/// row bucket's first variant, the wide path and the element path (k = 7; W at an odd element).
#[test]
fn gpu_gemv_group_equals_one_product_per_weight() {
    on_every_device("gemv group", |ctx| {
        let mut seed = 5000;
        for dtype in [DType::F32, DType::BF16] {
            for (m, k) in [(1, 576), (5, 7), (16, 64)] {
                for (ns, pad) in [(&[37u32, 9, 9][..], 0), (&[33, 34][..], 0), (&[13, 5, 6][..], 1)] {
                    seed += 1;
                    check_group(ctx, (m, k, dtype), ns, pad, seed)?;
                }
            }
        }
        Ok(())
    });
}

/// One gated product: `gemv_glu` on (gate, up) against `glu::forward` then `gemv` (bit for
/// bit: the same f and products) and against the f64 reference of f(gate)·up·Wᵀ (+ bias).
fn check_glu(ctx: &Context, (m, n, k, dtype): (u32, u32, u32, DType), kind: Glu, bias: bool, seed: u64) -> Result<()> {
    let mut rng = Rng::new(seed);
    let (gate, up) = (rng.vec((m * k) as usize, 2.0), rng.vec((m * k) as usize, 1.0));
    let mut w = round(dtype, &rng.vec((n * k) as usize, 1.0));
    if w.len() % 2 == 1 {
        w.push(0.0);
    }
    let b = rng.vec(n as usize, 1.0);
    let (gb, ub, bb) = (ctx.buffer_from(&gate, "gate")?, ctx.buffer_from(&up, "up")?, ctx.buffer_from(&b, "bias")?);
    let wb = upload(ctx, dtype, &w, "w")?;
    let wv = wb.buf.slice(0, u64::from(n * k) * dtype.bytes());
    let (yf, xs, ys) = (
        ctx.buffer((m * n * 4) as u64, "y fused")?,
        ctx.buffer((m * k * 4) as u64, "x")?,
        ctx.buffer((m * n * 4) as u64, "y")?,
    );
    let desc = GemvDesc { has_bias: bias, ..GemvDesc::packed(m, n, k, dtype) };
    let bv = bias.then(|| bb.view());
    let mut rec = ctx.recorder(false)?;
    gemv::gemv_glu(&mut rec, &desc, (gb.view(), ub.view(), kind), wv, bv, yf.view())?;
    glu::forward(&mut rec, kind, gb.view(), ub.view(), xs.view(), m as usize, k as usize, DType::F32)?;
    gemv::gemv(&mut rec, &desc, xs.view(), wv, bv, ys.view())?;
    rec.submit()?;
    let (got, solo): (Vec<f32>, Vec<f32>) = (ctx.read_vec(yf.view())?, ctx.read_vec(ys.view())?);
    let what = format!("gemv_glu {kind:?} {dtype:?} m {m} n {n} k {k} bias {bias}");
    let bits = |v: &[f32]| v.iter().map(|x| x.to_bits()).collect::<Vec<_>>();
    assert_eq!(bits(&got), bits(&solo), "{what}: fused != glu then gemv");
    let x = glu_ref::forward(kind, &f64s(&gate), &f64s(&up));
    let mut want = vec![0.0; (m * n) as usize];
    let gd = GemmDesc { has_bias: bias, ..GemmDesc::packed(m, n, k, false, true) };
    reference::gemm(&gd, &x, &f64s(&w[..(n * k) as usize]), bias.then_some(&f64s(&b)[..]), &mut want);
    assert_close(&what, &got, &want, TOL_F32);
    Ok(())
}

/// Gated input on every GLU kind: the wide path (k a multiple of 8) and the element path
/// (k = 7, 13), a row bucket of each size class, an N tail inside a block of 4 rows.
#[test]
fn gpu_gemv_glu_equals_glu_then_gemv() {
    on_every_device("gemv glu", |ctx| {
        let mut seed = 7000;
        for kind in [Glu::SwiGlu, Glu::GeGlu, Glu::GeGluTanh] {
            for dtype in [DType::F32, DType::BF16] {
                for (m, n, k) in [(1, 33, 576), (3, 9, 7), (16, 6, 64), (5, 37, 13)] {
                    seed += 1;
                    check_glu(ctx, (m, n, k, dtype), kind, seed % 2 == 0, seed)?;
                }
            }
        }
        Ok(())
    });
}
