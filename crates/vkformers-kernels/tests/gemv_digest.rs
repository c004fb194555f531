//! Digests of the GEMV's outputs on fixed inputs, to compare two revisions of the kernel bit for
//! bit (a change meant to move loads, not values): run
//! `cargo test -p vkformers-kernels --test gemv_digest -- --ignored --nocapture` on each
//! revision (and under each `VKFORMERS_GEMV_*` setting) and compare the printed lines. It uses
//! only the launchers' long-standing entry points, so it builds on older revisions too.

use vkformers_kernels::glu::Glu;
use vkformers_kernels::matmul::gemv::{self, GemvDesc, NormedInput};
use vkformers_kernels::matmul::DType;
use vkformers_kernels::testutil::storage::{round, upload};
use vkformers_kernels::testutil::Rng;
use vkformers_vk::testing::on_every_device;
use vkformers_vk::{Buffer, BufferView, Context, Recorder, Result};

/// FNV-1a over the bits of every output.
fn digest(ctx: &Context, outs: &[&Buffer]) -> Result<u64> {
    let mut h = 0xcbf2_9ce4_8422_2325u64;
    for b in outs {
        for v in ctx.read_vec::<f32>(b.view())? {
            for byte in v.to_bits().to_le_bytes() {
                h = (h ^ u64::from(byte)).wrapping_mul(0x100_0000_01b3);
            }
        }
    }
    Ok(h)
}

fn run(ctx: &Context, what: &str, outs: &[&Buffer], record: impl FnOnce(&mut Recorder) -> Result<()>) -> Result<()> {
    let mut rec = ctx.recorder(false)?;
    record(&mut rec)?;
    rec.submit()?;
    println!("digest {what}: {:016x}", digest(ctx, outs)?);
    Ok(())
}

fn weight(ctx: &Context, rng: &mut Rng, n: u32, k: u32, dtype: DType) -> Result<Buffer> {
    let mut w = round(dtype, &rng.vec((n * k) as usize, 1.0));
    if w.len() % 2 == 1 {
        w.push(0.0);
    }
    Ok(upload(ctx, dtype, &w, "w")?.buf)
}

/// A plain product (bias), a group of three, a gated product and a normed group (residual, x̂
/// written) per shape and dtype.
fn every_kind(ctx: &Context, (m, k, dtype): (u32, u32, DType), seed: u64) -> Result<()> {
    let mut rng = Rng::new(seed);
    let ns = [13u32, 6, 9];
    let len = (m * k) as usize;
    let xs: Vec<Buffer> = (0..3).map(|i| ctx.buffer_from(&rng.vec(len, 1.0 + i as f32), "x")).collect::<Result<_>>()?;
    let gain = ctx.buffer_from(&rng.vec(k as usize, 1.5), "gain")?;
    let bias = ctx.buffer_from(&rng.vec(ns[0] as usize, 1.0), "bias")?;
    let ws: Vec<Buffer> = ns.iter().map(|&n| weight(ctx, &mut rng, n, k, dtype)).collect::<Result<_>>()?;
    let ys: Vec<Buffer> = ns.iter().map(|&n| ctx.buffer(u64::from(m * n) * 4, "y")).collect::<Result<_>>()?;
    let (hs, xn) = (ctx.buffer(len as u64 * 4, "hs")?, ctx.buffer(len as u64 * 4, "x̂")?);
    let wv = |p: usize| ws[p].slice(0, u64::from(ns[p] * k) * dtype.bytes());
    let parts: Vec<(u32, BufferView<'_>, BufferView<'_>)> = (0..3).map(|p| (ns[p], wv(p), ys[p].view())).collect();
    let d = GemvDesc { has_bias: true, ..GemvDesc::packed(m, ns[0], k, dtype) };
    let tag = format!("m {m} k {k} {dtype:?}");
    run(ctx, &format!("plain {tag}"), &[&ys[0]], |rec| {
        gemv::gemv(rec, &d, xs[0].view(), wv(0), Some(bias.view()), ys[0].view())
    })?;
    let dg = GemvDesc { has_bias: false, ..d };
    run(ctx, &format!("group {tag}"), &ys.iter().collect::<Vec<_>>(), |rec| {
        gemv::gemv_group(rec, &dg, xs[0].view(), &parts)
    })?;
    let gated = (xs[0].view(), xs[1].view(), Glu::SwiGlu);
    run(ctx, &format!("gated {tag}"), &[&ys[0]], |rec| {
        gemv::gemv_glu(rec, &d, gated, wv(0), Some(bias.view()), ys[0].view())
    })?;
    let norm = NormedInput {
        gain: Some(gain.view()),
        unit_offset: true,
        eps: 1e-5,
        residual: Some((xs[2].view(), hs.view())),
        normed: Some(xn.view()),
    };
    let mut outs: Vec<&Buffer> = ys.iter().collect();
    outs.extend([&hs, &xn]);
    run(ctx, &format!("normed {tag}"), &outs, |rec| gemv::gemv_group_normed(rec, &dg, xs[1].view(), &norm, &parts))
}

#[test]
#[ignore = "prints digests to compare kernel revisions; run with --ignored --nocapture"]
fn gpu_gemv_output_digests() {
    on_every_device("gemv digests", |ctx| {
        let shapes = [(1, 2048, DType::BF16), (4, 1001, DType::F32), (3, 4500, DType::BF16), (16, 70, DType::F16)];
        for (s, &shape) in shapes.iter().enumerate() {
            every_kind(ctx, shape, 14_000 + s as u64)?;
        }
        Ok(())
    });
}
