//! GEMVs recorded as a dispatch chain (`vkformers_vk::chain`, gemv.comp's `CHAIN`): a decoder's
//! worth of dependent products (normed q, o, normed gate/up, gated down, layer after layer,
//! the residual stream ping-ponging between two buffers so that later links overwrite what
//! earlier ones read) gives bit for bit what the same products give behind barriers, with the
//! barriers gone between links. On lavapipe the dispatches run one after another (the waits
//! find their counts reached); on GPUs that chain (NVIDIA) the links overlap, which is what the
//! test is for there: a wrong wait, a stale cache line or a write before the wait shows as a
//! differing bit.

use vkformers_kernels::glu::Glu;
use vkformers_kernels::matmul::gemv::{self, GemvDesc, NormedInput, Tuning};
use vkformers_kernels::matmul::DType;
use vkformers_kernels::testutil::storage::{round, upload};
use vkformers_kernels::testutil::{same_bits, Rng};
use vkformers_vk::testing::on_every_device;
use vkformers_vk::{Buffer, BufferView, Context, Recorder, Result, CHAIN_SLOTS};

/// Layers of the chain.
const LAYERS: usize = 12;

/// One layer's weights: q [h, h], o [h, h], gate and up [i, h], down [h, i]; gains [h].
struct Layer {
    q: Buffer,
    o: Buffer,
    gate: Buffer,
    up: Buffer,
    down: Buffer,
    g1: Buffer,
    g2: Buffer,
}

/// Activations: the residual stream's two buffers, the products' outputs.
struct Acts {
    hs: [Buffer; 2],
    q: Buffer,
    o: Buffer,
    gate: Buffer,
    up: Buffer,
    down: Buffer,
}

fn weight(ctx: &Context, rng: &mut Rng, n: u32, k: u32, dtype: DType) -> Result<Buffer> {
    let mut w = round(dtype, &rng.vec((n * k) as usize, 1.0 / (k as f32).sqrt()));
    if w.len() % 2 == 1 {
        w.push(0.0);
    }
    Ok(upload(ctx, dtype, &w, "w")?.buf)
}

/// Records the layers: x̂ = norm(x + r) · g1 → q; q · Woᵀ → o; norm(hs + o) · g2 → gate, up;
/// silu(gate) · up · Wdᵀ → down; the next layer reads the last hs and down.
fn record(rec: &mut Recorder, (m, h, i, dtype): (u32, u32, u32, DType), layers: &[Layer], a: &Acts) -> Result<()> {
    let bytes = |n: u32, k: u32| u64::from(n * k) * dtype.bytes();
    let (x0, r0) = (a.hs[0].view(), a.down.view());
    for (l, w) in layers.iter().enumerate() {
        // The first layer reads the stream from hs[0] and down (seeded); every layer writes
        // hs[1] and hs[0] in turn, so hs[0] is overwritten while nothing may still read it.
        let (x, r) = if l == 0 { (x0, r0) } else { (a.hs[0].view(), a.down.view()) };
        let d = GemvDesc::packed(m, h, h, dtype);
        gemv::gemv_group_normed(
            rec,
            &d,
            x,
            &norm(&w.g1, r, a.hs[1].view()),
            &[(h, w.q.slice(0, bytes(h, h)), a.q.view())],
        )?;
        gemv::gemv(rec, &d, a.q.view(), w.o.slice(0, bytes(h, h)), None, a.o.view())?;
        let parts = [(i, w.gate.slice(0, bytes(i, h)), a.gate.view()), (i, w.up.slice(0, bytes(i, h)), a.up.view())];
        gemv::gemv_group_normed(rec, &d, a.hs[1].view(), &norm(&w.g2, a.o.view(), a.hs[0].view()), &parts)?;
        let dd = GemvDesc::packed(m, h, i, dtype);
        gemv::gemv_glu(
            rec,
            &dd,
            (a.gate.view(), a.up.view(), Glu::SwiGlu),
            w.down.slice(0, bytes(h, i)),
            None,
            a.down.view(),
        )?;
    }
    Ok(())
}

/// RMSNorm (eps 1e-5) of x + r with gain g, hs = x + r written.
fn norm<'a>(gain: &'a Buffer, r: BufferView<'a>, hs: BufferView<'a>) -> NormedInput<'a> {
    NormedInput { gain: Some(gain.view()), unit_offset: false, eps: 1e-5, residual: Some((r, hs)), normed: None }
}

/// Runs the layers from the same inputs chained and not; returns (outputs, barriers) of each.
fn chained_and_not(ctx: &Context, shape: (u32, u32, u32, DType), seed: u64) -> Result<()> {
    let (m, h, i, dtype) = shape;
    let mut rng = Rng::new(seed);
    let layers: Vec<Layer> = (0..LAYERS)
        .map(|_| {
            Ok(Layer {
                q: weight(ctx, &mut rng, h, h, dtype)?,
                o: weight(ctx, &mut rng, h, h, dtype)?,
                gate: weight(ctx, &mut rng, i, h, dtype)?,
                up: weight(ctx, &mut rng, i, h, dtype)?,
                down: weight(ctx, &mut rng, h, i, dtype)?,
                g1: ctx.buffer_from(&rng.vec(h as usize, 1.5), "g1")?,
                g2: ctx.buffer_from(&rng.vec(h as usize, 1.5), "g2")?,
            })
        })
        .collect::<Result<_>>()?;
    let (x, r) = (rng.vec((m * h) as usize, 2.0), rng.vec((m * h) as usize, 1.0));
    let act = |n: u32| ctx.buffer(u64::from(m * n) * 4, "activation");
    let a = Acts { hs: [act(h)?, act(h)?], q: act(h)?, o: act(h)?, gate: act(i)?, up: act(i)?, down: act(h)? };
    let counters = ctx.buffer(u64::from(CHAIN_SLOTS) * 4, "chain counters")?;
    let outs = [&a.hs[0], &a.hs[1], &a.down];
    let mut runs = Vec::new();
    for chain in [false, true] {
        ctx.upload(&a.hs[0], 0, bytemuck::cast_slice(&x))?;
        ctx.upload(&a.down, 0, bytemuck::cast_slice(&r))?;
        let mut rec = ctx.recorder(false)?;
        if chain {
            rec.enable_chain(&counters)?;
        }
        record(&mut rec, shape, &layers, &a)?;
        let report = rec.submit()?;
        let got: Vec<Vec<f32>> = outs.iter().map(|b| ctx.read_vec::<f32>(b.view())).collect::<Result<_>>()?;
        runs.push((got, report.barriers));
    }
    let what = format!("{LAYERS} layers m {m} h {h} i {i} {dtype:?}");
    for (o, (c, p)) in runs[1].0.iter().zip(&runs[0].0).enumerate() {
        same_bits(&format!("{what}: output {o} chained vs not"), c, p);
        assert!(c.iter().all(|v| v.is_finite()), "{what}: output {o} not finite");
    }
    // Behind barriers every product waits for the one before (4 a layer); chained, only the
    // zeroing of the counters is fenced (one barrier before it, one after).
    let (plain, chained) = (runs[0].1, runs[1].1);
    assert!(plain >= 4 * LAYERS - 1, "{what}: {plain} barriers unchained");
    assert!(chained <= 2, "{what}: {chained} barriers chained (the links were not chained)");
    Ok(())
}

/// bf16 and f32 weights, 1 and 5 rows, k a multiple of the chunk (wide loads) and not (element
/// loads), each with the input staged and not and the grid capped (a workgroup does several
/// blocks) and not.
#[test]
fn gemv_chain_matches_barriers_bit_for_bit() {
    on_every_device("gemv chain", |ctx| {
        let tunings = [
            Tuning { prefetch: true, max_groups: None, pipe: false, stage: Some(true), probe: 0 },
            Tuning { prefetch: true, max_groups: Some(3), pipe: false, stage: Some(false), probe: 0 },
        ];
        let mut seed = 31_000;
        for t in tunings {
            for shape in [(1, 256, 704, DType::BF16), (5, 96, 200, DType::F32), (1, 90, 203, DType::F16)] {
                seed += 1;
                gemv::with_tuning(t, || chained_and_not(ctx, shape, seed))?;
            }
        }
        Ok(())
    });
}
