//! The `twin` variants (RMSNorm forward, fused with a residual add or not, and its accumulating backward, RoPE forward and backward (of an f32 or a 16-bit dy), GLU forward (saving 16-bit gate and up) and backward (from f32 or 16-bit gate and up) of f32 tensors that also write their
//! output in f16 or bf16): on odd shapes, the f32 output matches the f64 reference and is bit
//! for bit the plain kernel's, and the 16-bit twin is bit for bit `dtype::cast` of that f32
//! output (what autocast made before, with a cast dispatch) and the host's rounding of it.

use vkformers_kernels::dtype::{self, DType, Twin};
use vkformers_kernels::glu::{self, Glu};
use vkformers_kernels::norm::{self, RmsNorm};
use vkformers_kernels::rope::{self, RopeLayout};
use vkformers_kernels::testutil::storage::{alloc, bits16, on_halves, round, upload_words, widen16, Stored};
use vkformers_kernels::testutil::twins::{glu_values, twin, GluInputs, RopeInputs, RMS_CASES, ROPE_SHAPES};
use vkformers_kernels::testutil::{assert_close, f64s, Rng, TOL_F32};
use vkformers_vk::testing::on_every_device;
use vkformers_vk::{Buffer, Context, Result};

/// A 16-bit device tensor of `n` values (padded to whole words, as the graph allocates them).
/// Four f32 outputs of `n` values: a twin launch's two and the plain launch's two.
fn f32_outs(ctx: &Context, n: usize) -> Result<Vec<Stored>> {
    (0..4).map(|i| alloc(ctx, DType::F32, n, &format!("out {i}"))).collect()
}

fn twin_buffer(ctx: &Context, n: usize, what: &str) -> Result<Buffer> {
    ctx.buffer((n as u64 * 2).next_multiple_of(4), what)
}

/// Checks the outputs of one twin launch: `y` (f32, `n` values) against `want` (f64 reference)
/// and `plain` (the plain kernel's f32 output) bit for bit, and `y16` against the cast kernel
/// and the host rounding of `y`, bit for bit.
fn check_outputs(
    ctx: &Context,
    what: &str,
    dt: DType,
    (y, y16): (&Buffer, &Buffer),
    plain: &Buffer,
    want: &[f64],
) -> Result<()> {
    let n = want.len();
    fn view(b: &Buffer, n: usize, bytes: u64) -> vkformers_vk::BufferView<'_> {
        b.slice(0, n as u64 * bytes)
    }
    let cast = twin_buffer(ctx, n, "cast")?;
    let mut rec = ctx.recorder(false)?;
    dtype::cast(&mut rec, view(y, n, 4), DType::F32, view(&cast, n, 2), dt)?;
    rec.submit()?;
    let got: Vec<f32> = ctx.read_vec(view(y, n, 4))?;
    assert_close(&format!("{what}: y"), &got, want, TOL_F32);
    let plain: Vec<f32> = ctx.read_vec(view(plain, n, 4))?;
    let bits = |v: &[f32]| v.iter().map(|x| x.to_bits()).collect::<Vec<_>>();
    assert_eq!(bits(&got), bits(&plain), "{what}: y differs from the plain kernel's");
    let twin: Vec<u16> = ctx.read_vec(view(y16, n, 2))?;
    assert_eq!(twin, ctx.read_vec::<u16>(view(&cast, n, 2))?, "{what}: twin differs from the cast of y");
    assert_eq!(twin, bits16(dt, &got), "{what}: twin differs from the host rounding of y");
    Ok(())
}

fn check_rms(ctx: &Context, rng: &mut Rng, dt: DType, (rows, dim): (usize, usize), weight: bool) -> Result<()> {
    let n = rows * dim;
    let (xs, ws) = (rng.vec(n, 3.0), rng.vec(dim, 1.0));
    let x = ctx.buffer_from(&xs, "x")?;
    let w = ctx.buffer_from(&ws, "w")?;
    let (y, plain) = (alloc(ctx, DType::F32, n, "y")?, alloc(ctx, DType::F32, n, "y plain")?);
    let y16 = twin_buffer(ctx, n, "y16")?;
    let (rstd, rstd2) = (ctx.buffer(rows as u64 * 4, "rstd")?, ctx.buffer(rows as u64 * 4, "rstd2")?);
    let p = RmsNorm { rows: rows as u32, dim: dim as u32, eps: 1e-5, unit_offset: false, dtype: DType::F32 };
    let wv = weight.then(|| w.view());
    let mut rec = ctx.recorder(false)?;
    let twin = twin(&y16, n, dt);
    norm::rms_norm_forward_twin(&mut rec, &p, (x.view(), wv), y.view(), twin, rstd.view())?;
    norm::rms_norm_forward(&mut rec, &p, x.view(), wv, plain.view(), rstd2.view())?;
    rec.submit()?;
    let wf = f64s(&ws);
    let (want, _) = norm::reference::rms_norm(&f64s(&xs), weight.then_some(&wf[..]), dim, 1e-5, false);
    check_outputs(ctx, &format!("rms {rows}x{dim} w {weight} {dt:?}"), dt, (&y.buf, &y16), &plain.buf, &want)
}

/// The residual add fused with the twin RMSNorm: h and y bit for bit the plain fused kernel's
/// (itself the add followed by the norm), y against the reference, the twin the cast of y.
fn check_add_rms(ctx: &Context, rng: &mut Rng, dt: DType, (rows, dim): (usize, usize)) -> Result<()> {
    let n = rows * dim;
    let (xs, rs, ws) = (rng.vec(n, 3.0), rng.vec(n, 1.0), rng.vec(dim, 1.0));
    let [x, r, w] = [&xs, &rs, &ws].map(|v| ctx.buffer_from(v, "input"));
    let (x, r, w) = (x?, r?, w?);
    let outs = f32_outs(ctx, n)?;
    let (rstd, rstd2, y16) =
        (ctx.buffer(rows as u64 * 4, "rstd")?, ctx.buffer(rows as u64 * 4, "rstd2")?, twin_buffer(ctx, n, "y16")?);
    let p = RmsNorm { rows: rows as u32, dim: dim as u32, eps: 1e-5, unit_offset: true, dtype: DType::F32 };
    let twin = twin(&y16, n, dt);
    let mut rec = ctx.recorder(false)?;
    let (xr, wv) = ((x.view(), r.view()), Some(w.view()));
    norm::add_rms_norm_forward_twin(&mut rec, &p, xr, wv, outs[0].view(), outs[1].view(), twin, rstd.view())?;
    norm::add_rms_norm_forward(&mut rec, &p, xr, wv, outs[2].view(), outs[3].view(), rstd2.view())?;
    rec.submit()?;
    let h: Vec<f32> = xs.iter().zip(&rs).map(|(a, b)| a + b).collect();
    let (want, _) = norm::reference::rms_norm(&f64s(&h), Some(&f64s(&ws)), dim, 1e-5, true);
    let what = format!("add rms {rows}x{dim} {dt:?}");
    check_outputs(ctx, &what, dt, (&outs[1].buf, &y16), &outs[3].buf, &want)?;
    let got_h: Vec<f32> = ctx.read_vec(outs[0].view())?;
    assert_eq!(
        got_h.iter().map(|v| v.to_bits()).collect::<Vec<_>>(),
        h.iter().map(|v| v.to_bits()).collect::<Vec<_>>(),
        "{what}: h"
    );
    Ok(())
}

fn check_rope(ctx: &Context, rng: &mut Rng, dt: DType, shape: (u32, u32, u32, u32, u32)) -> Result<()> {
    let ri = RopeInputs::draw(ctx, rng, shape, (RopeLayout::HalfSplit, 1.0))?;
    let (p, xs, n, ins) = (&ri.p, &ri.xs, ri.n(), ri.views());
    let (pos_v, inv_v) = (&ri.pos_v, &ri.inv_v);
    let (y, plain) = (alloc(ctx, DType::F32, n, "y")?, alloc(ctx, DType::F32, n, "y plain")?);
    let y16 = twin_buffer(ctx, n, "y16")?;
    let mut rec = ctx.recorder(false)?;
    let twin = twin(&y16, n, dt);
    rope::rope_forward_twin(&mut rec, p, ins, y.view(), twin)?;
    rope::rope_forward(&mut rec, p, ins.0, ins.1, ins.2, plain.view())?;
    rec.submit()?;
    let want = rope::reference::rope(p, &f64s(xs), pos_v, inv_v);
    check_outputs(ctx, &format!("rope {p:?} {dt:?}"), dt, (&y.buf, &y16), &plain.buf, &want)?;
    // The backward (x read as dy): the transposed rotation, and its twin.
    let mut rec = ctx.recorder(false)?;
    rope::rope_backward_twin(&mut rec, p, ins, y.view(), twin)?;
    rope::rope_backward(&mut rec, p, ins.0, ins.1, ins.2, plain.view())?;
    rec.submit()?;
    let want = rope::reference::rope_backward(p, &f64s(xs), pos_v, inv_v);
    check_outputs(ctx, &format!("rope backward {p:?} {dt:?}"), dt, (&y.buf, &y16), &plain.buf, &want)?;
    // The backward of a 16-bit dy (`twin_in16`: attention's dq / dk under autocast): bit for bit
    // the f32 backward of dy widened, and its twin.
    let wide: Vec<f32> = bits16(dt, xs).iter().map(|&b| widen16(dt, b)).collect();
    let (dy16, dy) = (upload_words(ctx, dt, xs, "dy16")?, ctx.buffer_from(&wide, "dy widened")?);
    let mut rec = ctx.recorder(false)?;
    let dy16 = dy16.slice(0, n as u64 * 2);
    rope::rope_backward_twin_in16(&mut rec, p, (dy16, ins.1, ins.2), y.view(), twin)?;
    rope::rope_backward(&mut rec, p, dy.view(), ins.1, ins.2, plain.view())?;
    rec.submit()?;
    let want = rope::reference::rope_backward(p, &f64s(&wide), pos_v, inv_v);
    check_outputs(ctx, &format!("rope backward of 16-bit dy {p:?} {dt:?}"), dt, (&y.buf, &y16), &plain.buf, &want)
}

/// The GLU backward twin (separate gate and up): dgate and dup with their 16-bit copies.
fn check_glu_backward(
    ctx: &Context,
    rng: &mut Rng,
    (kind, dt): (Glu, DType),
    (rows, inner): (usize, usize),
) -> Result<()> {
    let n = rows * inner;
    let GluInputs { gs, us, ds, gate, up, dout } = GluInputs::draw(ctx, rng, n)?;
    let outs = f32_outs(ctx, n)?;
    let twins = [twin_buffer(ctx, n, "dgate16")?, twin_buffer(ctx, n, "dup16")?];
    let mut rec = ctx.recorder(false)?;
    let t = [&twins[0], &twins[1]].map(|b| twin(b, n, dt));
    let ins = (gate.view(), up.view(), dout.view());
    glu::backward_twin(&mut rec, kind, ins, (outs[0].view(), outs[1].view()), t, (rows, inner))?;
    let (o2, o3) = (outs[2].view(), outs[3].view());
    glu::backward(&mut rec, kind, gate.view(), up.view(), dout.view(), o2, o3, rows, inner, DType::F32)?;
    rec.submit()?;
    let (dg, du) = glu::reference::backward(kind, &f64s(&gs), &f64s(&us), &f64s(&ds));
    let what = format!("glu backward {kind:?} {rows}x{inner} {dt:?}");
    check_outputs(ctx, &format!("{what} dgate"), dt, (&outs[0].buf, &twins[0]), &outs[2].buf, &dg)?;
    check_outputs(ctx, &format!("{what} dup"), dt, (&outs[1].buf, &twins[1]), &outs[3].buf, &du)
}

fn check_glu(
    ctx: &Context,
    rng: &mut Rng,
    (kind, dt): (Glu, DType),
    (rows, inner): (usize, usize),
    fused: bool,
) -> Result<()> {
    let n = rows * inner;
    let (gs, us) = (rng.vec(n, 3.0), rng.vec(n, 2.0));
    let gate_up = ctx.buffer_from(&glu::reference::join(&gs, &us, inner), "gate_up")?;
    let (gate, up) = (ctx.buffer_from(&gs, "gate")?, ctx.buffer_from(&us, "up")?);
    let (y, plain) = (alloc(ctx, DType::F32, n, "y")?, alloc(ctx, DType::F32, n, "y plain")?);
    let y16 = twin_buffer(ctx, n, "y16")?;
    let mut rec = ctx.recorder(false)?;
    let y16t = twin(&y16, n, dt);
    let saved = [twin_buffer(ctx, n, "gate16")?, twin_buffer(ctx, n, "up16")?];
    if fused {
        glu::forward_twin(&mut rec, kind, (gate_up.view(), None), y.view(), y16t, None, rows, inner)?;
        glu::forward_fused(&mut rec, kind, gate_up.view(), plain.view(), rows, inner, DType::F32)?;
    } else {
        let save = [&saved[0], &saved[1]].map(|b| twin(b, n, dt));
        let ins = (gate.view(), Some(up.view()));
        glu::forward_twin(&mut rec, kind, ins, y.view(), y16t, Some(save), rows, inner)?;
        glu::forward(&mut rec, kind, gate.view(), up.view(), plain.view(), rows, inner, DType::F32)?;
    }
    rec.submit()?;
    if !fused {
        for (b, xs) in saved.iter().zip([&gs, &us]) {
            let got: Vec<u16> = ctx.read_vec(b.slice(0, n as u64 * 2))?;
            assert_eq!(got, bits16(dt, xs), "glu {kind:?} {rows}x{inner} {dt:?}: saved 16-bit gate / up");
        }
    }
    let want = glu::reference::forward(kind, &f64s(&gs), &f64s(&us));
    check_outputs(
        ctx,
        &format!("glu {kind:?} {rows}x{inner} fused {fused} {dt:?}"),
        dt,
        (&y.buf, &y16),
        &plain.buf,
        &want,
    )
}

/// The GLU backward from 16-bit gate and up: dgate, dup match the reference on the rounded
/// values and, bit for bit, the f32 backward of those values; the twins are their casts.
fn check_glu_saved16(
    ctx: &Context,
    rng: &mut Rng,
    (kind, dt): (Glu, DType),
    (rows, inner): (usize, usize),
) -> Result<()> {
    let n = rows * inner;
    let (gs, us, ds) = glu_values(rng, n);
    let (gr, ur) = (round(dt, &gs), round(dt, &us));
    let half = |xs: &[f32]| ctx.buffer_from(&bits16(dt, xs), "16-bit input");
    let (g16, u16) = (half(&gs)?, half(&us)?);
    let (gate, up, dout) = (ctx.buffer_from(&gr, "gate")?, ctx.buffer_from(&ur, "up")?, ctx.buffer_from(&ds, "dout")?);
    let outs = f32_outs(ctx, n)?;
    let twins: Vec<_> = (0..4).map(|_| twin_buffer(ctx, n, "twin")).collect::<Result<_>>()?;
    let mut rec = ctx.recorder(false)?;
    let ins = ([twin(&g16, n, dt), twin(&u16, n, dt)], dout.view());
    let twins_a = [twin(&twins[0], n, dt), twin(&twins[1], n, dt)];
    glu::backward_saved16(&mut rec, kind, ins, (outs[0].view(), outs[1].view()), twins_a, (rows, inner))?;
    let ins = (gate.view(), up.view(), dout.view());
    let twins_b = [twin(&twins[2], n, dt), twin(&twins[3], n, dt)];
    glu::backward_twin(&mut rec, kind, ins, (outs[2].view(), outs[3].view()), twins_b, (rows, inner))?;
    rec.submit()?;
    let (dg, du) = glu::reference::backward(kind, &f64s(&gr), &f64s(&ur), &f64s(&ds));
    let what = format!("glu saved16 backward {kind:?} {rows}x{inner} {dt:?}");
    check_outputs(ctx, &format!("{what} dgate"), dt, (&outs[0].buf, &twins[0]), &outs[2].buf, &dg)?;
    check_outputs(ctx, &format!("{what} dup"), dt, (&outs[1].buf, &twins[1]), &outs[3].buf, &du)
}

/// Weight gradients into `dw` with `s` as their scratch (overwritten).
fn grads<'a>(dw: &'a Stored, s: &'a Buffer) -> Option<norm::ParamGrads<'a>> {
    Some(norm::ParamGrads { dw: dw.view(), db: None, scratch: s.view(), accumulate: false })
}

/// The RMSNorm backward that adds the gradient x already has (`prev`, when given) and writes
/// a 16-bit twin: dx matches the reference and, bit for bit, the plain backward followed by
/// the add kernel; its twin is the cast of dx; dw is the plain one.
fn check_rms_backward_acc(
    ctx: &Context,
    rng: &mut Rng,
    dt: DType,
    (rows, dim): (usize, usize),
    prev: bool,
) -> Result<()> {
    let n = rows * dim;
    let (xs, ws, gs, ps) = (rng.vec(n, 3.0), rng.vec(dim, 1.0), rng.vec(n, 1.0), rng.vec(n, 1.0));
    let [x, w, dy, pv] = [&xs, &ws, &gs, &ps].map(|v| ctx.buffer_from(v, "input"));
    let (x, w, dy, pv) = (x?, w?, dy?, pv?);
    let p = RmsNorm { rows: rows as u32, dim: dim as u32, eps: 1e-5, unit_offset: false, dtype: DType::F32 };
    let outs = f32_outs(ctx, n)?;
    let (dw, dw_plain) = (alloc(ctx, DType::F32, dim, "dw")?, alloc(ctx, DType::F32, dim, "dw plain")?);
    let (rstd, y16) = (ctx.buffer(rows as u64 * 4, "rstd")?, twin_buffer(ctx, n, "dx16")?);
    let bytes = norm::weight_grad_scratch_bytes(rows as u32, dim as u32);
    let (s1, s2) = (ctx.buffer(bytes, "scratch")?, ctx.buffer(bytes, "scratch 2")?);
    let mut rec = ctx.recorder(false)?;
    norm::rms_norm_forward(&mut rec, &p, x.view(), Some(w.view()), outs[3].view(), rstd.view())?;
    let twin = twin(&y16, n, dt);
    let out = norm::DxOut { dx: outs[0].view(), prev: prev.then(|| pv.view()), twin: Some(twin) };
    let ins = (x.view(), Some(w.view()), rstd.view());
    norm::rms_norm_backward_acc(&mut rec, &p, ins, dy.view(), out, grads(&dw, &s1))?;
    let (plain, sum) = (outs[1].view(), outs[2].view());
    norm::rms_norm_backward(
        &mut rec,
        &p,
        x.view(),
        Some(w.view()),
        rstd.view(),
        dy.view(),
        plain,
        grads(&dw_plain, &s2),
    )?;
    vkformers_kernels::elementwise::add(&mut rec, pv.view(), plain, sum)?;
    rec.submit()?;
    let (mut want, _) = norm::reference::rms_norm_backward(&f64s(&xs), Some(&f64s(&ws)), &f64s(&gs), dim, 1e-5, false);
    if prev {
        want.iter_mut().zip(&ps).for_each(|(w, &p)| *w += f64::from(p));
    }
    let same_as = if prev { &outs[2].buf } else { &outs[1].buf };
    let what = format!("rms backward {rows}x{dim} prev {prev} {dt:?}");
    check_outputs(ctx, &what, dt, (&outs[0].buf, &y16), same_as, &want)?;
    let bits = |b: &Buffer| -> Result<Vec<u32>> {
        Ok(ctx.read_vec::<f32>(b.slice(0, dim as u64 * 4))?.iter().map(|v| v.to_bits()).collect())
    };
    assert_eq!(bits(&dw.buf)?, bits(&dw_plain.buf)?, "{what}: dw");
    Ok(())
}

#[test]
fn twins_are_the_cast_of_the_f32_output() {
    on_halves("twin", 16, |ctx, rng, dt| {
        for (shape, weight) in RMS_CASES {
            check_rms(ctx, rng, dt, shape, weight)?;
            check_rms_backward_acc(ctx, rng, dt, shape, weight)?;
            check_add_rms(ctx, rng, dt, shape)?;
        }
        for shape in ROPE_SHAPES {
            check_rope(ctx, rng, dt, shape)?;
        }
        for kind in Glu::ALL {
            for (shape, fused) in [((1, 1), false), ((3, 7), true), ((5, 9), false), ((2, 33), true)] {
                check_glu(ctx, rng, (kind, dt), shape, fused)?;
                check_glu_backward(ctx, rng, (kind, dt), shape)?;
                check_glu_saved16(ctx, rng, (kind, dt), shape)?;
            }
        }
        Ok(())
    });
}

#[test]
fn twin_of_f32_or_a_short_view_is_an_error() {
    on_every_device("twin errors", |ctx| {
        let x = ctx.buffer(6 * 4, "x")?;
        let short = ctx.buffer(4, "short")?;
        let p = RmsNorm { rows: 2, dim: 3, eps: 1e-5, unit_offset: false, dtype: DType::F32 };
        let mut rec = ctx.recorder(false)?;
        let f32_twin = Twin { view: x.view(), dtype: DType::F32 };
        let e = norm::rms_norm_forward_twin(&mut rec, &p, (x.view(), None), x.view(), f32_twin, short.view());
        assert!(e.is_err());
        let rstd = ctx.buffer(2 * 4, "rstd")?;
        let twin = Twin { view: short.view(), dtype: DType::BF16 };
        let e = norm::rms_norm_forward_twin(&mut rec, &p, (x.view(), None), x.view(), twin, rstd.view()).unwrap_err();
        assert!(e.to_string().contains("twin"), "{e}");
        let e = glu::forward_twin(&mut rec, Glu::SwiGlu, (x.view(), Some(x.view())), x.view(), twin, None, 2, 3)
            .unwrap_err();
        assert!(e.to_string().contains("glu/forward:swiglu_twin"), "{e}");
        rec.submit()?;
        Ok(())
    });
}
