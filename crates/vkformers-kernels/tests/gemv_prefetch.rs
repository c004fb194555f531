//! The GEMV's loads issued ahead (`PREFETCH`, `VKFORMERS_GEMV_PREFETCH`; a block's next chunk
//! pair, `PIPE`, `VKFORMERS_GEMV_PIPE`) and its input staged in shared memory (`STAGE`,
//! `VKFORMERS_GEMV_STAGE`) change where and when values
//! arrive, never which values or in what order they are summed: every output of a product with
//! prefetch on equals the one with it off bit for bit, and so do both with the grid capped to a
//! few workgroups (each then does several row blocks, loading the next one's weights before it
//! reduces the current one). Covered: plain products (bias, k not a multiple of the chunk, odd
//! layouts, m up to 16), grouped products, gated inputs, normed inputs (residual and x̂ output on
//! and off, k past PF chunks a thread), each checked against the f64 reference too.
//! `VKFORMERS_GEMV_CPU_VARIANTS=0` runs the GPUs' 128-thread variants on lavapipe.

use vkformers_kernels::glu::{reference as glu_ref, Glu};
use vkformers_kernels::matmul::gemv::{self, GemvDesc, NormedInput, Tuning};
use vkformers_kernels::matmul::{reference, DType, GemmDesc};
use vkformers_kernels::testutil::storage::{round, upload};
use vkformers_kernels::testutil::{assert_close, f64s, same_bits, Rng, TOL_F32};
use vkformers_vk::testing::on_every_device;
use vkformers_vk::{Buffer, BufferView, Context, Recorder, Result};

/// Prefetch off and on, each with one workgroup per block and with the grid capped to 3; the
/// next chunk pair's loads ahead (`PIPE`) with and without prefetch; the input staged in shared
/// memory (`STAGE`) with a capped grid (a workgroup's blocks all read the one staging), with and
/// without PIPE.
const TUNINGS: [Tuning; 7] = [
    Tuning { prefetch: false, max_groups: None, pipe: false, stage: Some(false), probe: 0 },
    Tuning { prefetch: true, max_groups: None, pipe: false, stage: Some(false), probe: 0 },
    Tuning { prefetch: false, max_groups: Some(3), pipe: false, stage: Some(false), probe: 0 },
    Tuning { prefetch: true, max_groups: Some(3), pipe: false, stage: Some(false), probe: 0 },
    Tuning { prefetch: true, max_groups: None, pipe: true, stage: Some(false), probe: 0 },
    Tuning { prefetch: false, max_groups: Some(3), pipe: true, stage: Some(true), probe: 0 },
    Tuning { prefetch: true, max_groups: Some(3), pipe: false, stage: Some(true), probe: 0 },
];

/// Runs `record` (which writes into the buffers `outs`, refilled with 9.0 before each run) under
/// every tuning and asserts every output bit for bit equal to the first tuning's; returns those.
fn same_under_every_tuning(
    ctx: &Context,
    what: &str,
    outs: &[&Buffer],
    record: impl Fn(&mut Recorder) -> Result<()>,
) -> Result<Vec<Vec<f32>>> {
    let mut first: Option<Vec<Vec<f32>>> = None;
    for t in TUNINGS {
        for b in outs {
            ctx.upload(b, 0, bytemuck::cast_slice(&vec![9.0f32; (b.size() / 4) as usize]))?;
        }
        let mut rec = ctx.recorder(false)?;
        gemv::with_tuning(t, || record(&mut rec))?;
        rec.submit()?;
        let got: Vec<Vec<f32>> = outs.iter().map(|b| ctx.read_vec::<f32>(b.view())).collect::<Result<_>>()?;
        match &first {
            None => first = Some(got),
            Some(want) => {
                for (i, (g, w)) in got.iter().zip(want).enumerate() {
                    same_bits(&format!("{what}: output {i} under {t:?} vs {:?}", TUNINGS[0]), g, w);
                }
            }
        }
    }
    Ok(first.expect("tunings"))
}

/// W `[n, k]` of random values rounded to `dtype`, uploaded (16-bit padded to whole words).
fn weight(ctx: &Context, rng: &mut Rng, n: u32, k: u32, dtype: DType) -> Result<(Vec<f32>, Buffer)> {
    let mut w = round(dtype, &rng.vec((n * k) as usize, 1.0));
    let buf = {
        let mut padded = w.clone();
        if padded.len() % 2 == 1 {
            padded.push(0.0);
        }
        upload(ctx, dtype, &padded, "w")?.buf
    };
    w.truncate((n * k) as usize);
    Ok((w, buf))
}

/// The f64 product `x · Wᵀ (+ bias)` of packed operands.
fn reference_product(m: u32, n: u32, k: u32, x: &[f64], w: &[f32], bias: Option<&[f32]>) -> Vec<f64> {
    let mut want = vec![0.0; (m * n) as usize];
    let gd = GemmDesc { has_bias: bias.is_some(), ..GemmDesc::packed(m, n, k, false, true) };
    reference::gemm(&gd, x, &f64s(w), bias.map(f64s).as_deref(), &mut want);
    want
}

/// One plain product, x rows `ldx = k + pad` apart, with or without bias.
fn plain(ctx: &Context, (m, n, k, pad): (u32, u32, u32, u32), dtype: DType, bias: bool, seed: u64) -> Result<()> {
    let mut rng = Rng::new(seed);
    let ldx = k + pad;
    let x = rng.vec(((m - 1) * ldx + k) as usize, 1.0);
    let (w, wb) = weight(ctx, &mut rng, n, k, dtype)?;
    let b = rng.vec(n as usize, 1.0);
    let (xb, bb, yb) =
        (ctx.buffer_from(&x, "x")?, ctx.buffer_from(&b, "bias")?, ctx.buffer(u64::from(m * n) * 4, "y")?);
    let desc = GemvDesc { ldx, has_bias: bias, ..GemvDesc::packed(m, n, k, dtype) };
    let wv = wb.slice(0, u64::from(n * k) * dtype.bytes());
    let what = format!("plain {desc:?}");
    let got = same_under_every_tuning(ctx, &what, &[&yb], |rec| {
        gemv::gemv(rec, &desc, xb.view(), wv, bias.then(|| bb.view()), yb.view())
    })?;
    let xp: Vec<f64> = (0..m as usize).flat_map(|i| f64s(&x[i * ldx as usize..][..k as usize])).collect();
    assert_close(&what, &got[0], &reference_product(m, n, k, &xp, &w, bias.then_some(&b[..])), TOL_F32);
    Ok(())
}

/// Plain products: every row bucket, k a multiple of the chunk and not, several chunk pairs a
/// thread (k past 2 · 8 · 8 elements on the one-subgroup variants, past 2 · 128 · 8 on the
/// others), padded rows (the element path), bias on and off, n ending inside a block of 4.
#[test]
fn gpu_gemv_prefetch_plain_products_bit_for_bit() {
    on_every_device("gemv prefetch plain", |ctx| {
        let shapes =
            [(1, 13, 2048, 0), (3, 9, 7, 0), (5, 6, 1001, 1), (8, 5, 4100, 0), (16, 7, 300, 4), (1, 33, 2100, 0)];
        let mut seed = 11_000;
        for dtype in [DType::F32, DType::BF16, DType::F16] {
            for &shape in &shapes {
                seed += 1;
                plain(ctx, shape, dtype, seed % 2 == 0, seed)?;
            }
        }
        Ok(())
    });
}

/// Grouped products (q/k/v-like, gate/up-like) and gated inputs.
#[test]
fn gpu_gemv_prefetch_groups_and_gated_inputs_bit_for_bit() {
    on_every_device("gemv prefetch groups", |ctx| {
        let mut seed = 12_000;
        for dtype in [DType::F32, DType::BF16] {
            for (m, k, ns) in [(1, 2056, &[17u32, 9, 9][..]), (4, 13, &[21, 22][..]), (16, 520, &[5, 6, 7][..])] {
                seed += 1;
                let mut rng = Rng::new(seed);
                let x = rng.vec((m * k) as usize, 1.0);
                let xb = ctx.buffer_from(&x, "x")?;
                let ws: Vec<(Vec<f32>, Buffer)> =
                    ns.iter().map(|&n| weight(ctx, &mut rng, n, k, dtype)).collect::<Result<_>>()?;
                let ys: Vec<Buffer> =
                    ns.iter().map(|&n| ctx.buffer(u64::from(m * n) * 4, "y")).collect::<Result<_>>()?;
                let desc = GemvDesc::packed(m, ns[0], k, dtype);
                let what = format!("group {ns:?} {dtype:?} m {m} k {k}");
                let got = same_under_every_tuning(ctx, &what, &ys.iter().collect::<Vec<_>>(), |rec| {
                    let parts: Vec<(u32, BufferView<'_>, BufferView<'_>)> = ns
                        .iter()
                        .zip(&ws)
                        .zip(&ys)
                        .map(|((&n, w), y)| (n, w.1.slice(0, u64::from(n * k) * dtype.bytes()), y.view()))
                        .collect();
                    gemv::gemv_group(rec, &desc, xb.view(), &parts)
                })?;
                for (p, &n) in ns.iter().enumerate() {
                    assert_close(&what, &got[p], &reference_product(m, n, k, &f64s(&x), &ws[p].0, None), TOL_F32);
                }
                gated(ctx, (m, ns[1], k, dtype), seed)?;
            }
        }
        Ok(())
    });
}

/// One gated product `f(gate) · up · Wᵀ + bias` (SwiGLU).
fn gated(ctx: &Context, (m, n, k, dtype): (u32, u32, u32, DType), seed: u64) -> Result<()> {
    let mut rng = Rng::new(seed + 500);
    let (gate, up) = (rng.vec((m * k) as usize, 2.0), rng.vec((m * k) as usize, 1.0));
    let (w, wb) = weight(ctx, &mut rng, n, k, dtype)?;
    let b = rng.vec(n as usize, 1.0);
    let (gb, ub, bb) = (ctx.buffer_from(&gate, "gate")?, ctx.buffer_from(&up, "up")?, ctx.buffer_from(&b, "bias")?);
    let yb = ctx.buffer(u64::from(m * n) * 4, "y")?;
    let desc = GemvDesc { has_bias: true, ..GemvDesc::packed(m, n, k, dtype) };
    let what = format!("gated {desc:?}");
    let got = same_under_every_tuning(ctx, &what, &[&yb], |rec| {
        let wv = wb.slice(0, u64::from(n * k) * dtype.bytes());
        gemv::gemv_glu(rec, &desc, (gb.view(), ub.view(), Glu::SwiGlu), wv, Some(bb.view()), yb.view())
    })?;
    let x = glu_ref::forward(Glu::SwiGlu, &f64s(&gate), &f64s(&up));
    assert_close(&what, &got[0], &reference_product(m, n, k, &x, &w, Some(&b)), TOL_F32);
    Ok(())
}

/// One normed group (gain w, eps 1e-5): y_p, and hs and x̂ where asked, bit for bit under every
/// tuning; y_0 against the f64 reference of RMSNorm(x (+ r)) · w · W_0ᵀ.
fn normed(
    ctx: &Context,
    (m, k, dtype): (u32, u32, DType),
    residual: bool,
    write_normed: bool,
    seed: u64,
) -> Result<()> {
    let mut rng = Rng::new(seed);
    let ns = [13u32, 6];
    let len = (m * k) as usize;
    let (x, r, g) = (rng.vec(len, 3.0), rng.vec(len, 0.5), rng.vec(k as usize, 1.5));
    let (xb, rb, gb) = (ctx.buffer_from(&x, "x")?, ctx.buffer_from(&r, "r")?, ctx.buffer_from(&g, "gain")?);
    let ws: Vec<(Vec<f32>, Buffer)> = ns.iter().map(|&n| weight(ctx, &mut rng, n, k, dtype)).collect::<Result<_>>()?;
    let mut outs: Vec<Buffer> = ns.iter().map(|&n| ctx.buffer(u64::from(m * n) * 4, "y")).collect::<Result<_>>()?;
    outs.push(ctx.buffer(len as u64 * 4, "hs")?);
    outs.push(ctx.buffer(len as u64 * 4, "normed")?);
    let desc = GemvDesc::packed(m, ns[0], k, dtype);
    let what = format!("normed m {m} k {k} {dtype:?} residual {residual} x̂ {write_normed}");
    let got = same_under_every_tuning(ctx, &what, &outs.iter().collect::<Vec<_>>(), |rec| {
        let norm = NormedInput {
            gain: Some(gb.view()),
            unit_offset: false,
            eps: 1e-5,
            residual: residual.then(|| (rb.view(), outs[2].view())),
            normed: write_normed.then(|| outs[3].view()),
        };
        let parts: Vec<(u32, BufferView<'_>, BufferView<'_>)> = ns
            .iter()
            .zip(&ws)
            .zip(&outs)
            .map(|((&n, w), y)| (n, w.1.slice(0, u64::from(n * k) * dtype.bytes()), y.view()))
            .collect();
        gemv::gemv_group_normed(rec, &desc, xb.view(), &norm, &parts)
    })?;
    let mut xn: Vec<f64> = x.iter().zip(&r).map(|(a, b)| f64::from(if residual { a + b } else { *a })).collect();
    for row in xn.chunks_mut(k as usize) {
        let rstd = 1.0 / (row.iter().map(|h| h * h).sum::<f64>() / f64::from(k) + 1e-5).sqrt();
        row.iter_mut().zip(&g).for_each(|(h, g)| *h *= rstd * f64::from(*g));
    }
    assert_close(&what, &got[0], &reference_product(m, ns[0], k, &xn, &ws[0].0, None), TOL_F32);
    Ok(())
}

/// Normed inputs: residual and x̂ output on and off, k not a multiple of the chunk, k past PF
/// chunks a thread of the 128-thread variants (4 · 128 · 8 bf16 elements), m across buckets.
#[test]
fn gpu_gemv_prefetch_normed_inputs_bit_for_bit() {
    on_every_device("gemv prefetch normed", |ctx| {
        let mut seed = 13_000;
        for (m, k, dtype) in
            [(1, 2048, DType::BF16), (3, 1001, DType::F32), (2, 4500, DType::BF16), (9, 70, DType::F16)]
        {
            for (residual, write_normed) in [(true, false), (false, true), (true, true)] {
                seed += 1;
                normed(ctx, (m, k, dtype), residual, write_normed, seed)?;
            }
        }
        Ok(())
    });
}
