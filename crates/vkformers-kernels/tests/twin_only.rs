//! The `_twin_only` launchers (RMSNorm forward, fused with a residual add or not; RoPE forward
//! and the backward of a 16-bit dy; GLU forward saving 16-bit gate and up, and its backward
//! from them; the cross-entropy backward): the same kernels as the `twin` launchers with the
//! f32 stores off. On odd shapes, every 16-bit output (and rstd, h) is bit for bit the twin
//! launcher's, which `twin.rs` holds to the f64 reference and to the cast of the f32 output.

use vkformers_kernels::dtype::{DType, Twin};
use vkformers_kernels::glu::{self, Glu};
use vkformers_kernels::loss::{self, CrossEntropy};
use vkformers_kernels::norm::{self, RmsNorm};
use vkformers_kernels::rope::{self, Rope, RopeLayout};
use vkformers_kernels::testutil::storage::on_halves;
use vkformers_kernels::testutil::twins::{twin, GluInputs, RopeInputs, RMS_CASES, ROPE_SHAPES};
use vkformers_kernels::testutil::Rng;
use vkformers_vk::{Buffer, Context, Result};

/// A 16-bit device buffer of `n` values (padded to whole words, as the graph allocates them),
/// filled with a pattern no kernel writes, so an unwritten value shows.
fn half_buffer(ctx: &Context, n: usize, what: &str) -> Result<Buffer> {
    ctx.buffer_from(&vec![0x7fc1_7fc1u32; n.div_ceil(2)], what)
}

fn f32_buffer(ctx: &Context, n: usize, what: &str) -> Result<Buffer> {
    ctx.buffer_from(&vec![f32::NAN; n], what)
}

/// The saved 16-bit gate and up of a GLU forward: `b[1]`, `b[2]`.
fn save(b: &[Buffer], n: usize, dtype: DType) -> [Twin<'_>; 2] {
    [twin(&b[1], n, dtype), twin(&b[2], n, dtype)]
}

/// The first `n` 16-bit values of `a` and `b` are equal, bit for bit.
fn same16(ctx: &Context, what: &str, (a, b): (&Buffer, &Buffer), n: usize) -> Result<()> {
    let (x, y): (Vec<u16>, Vec<u16>) =
        (ctx.read_vec(a.slice(0, n as u64 * 2))?, ctx.read_vec(b.slice(0, n as u64 * 2))?);
    assert_eq!(x, y, "{what}: the 16-bit output differs from the twin launcher's");
    Ok(())
}

/// The first `n` f32 values of `a` and `b` are equal, bit for bit.
fn same32(ctx: &Context, what: &str, (a, b): (&Buffer, &Buffer), n: usize) -> Result<()> {
    let bits = |v: Vec<f32>| v.into_iter().map(f32::to_bits).collect::<Vec<_>>();
    let (x, y) = (ctx.read_vec(a.slice(0, n as u64 * 4))?, ctx.read_vec(b.slice(0, n as u64 * 4))?);
    assert_eq!(bits(x), bits(y), "{what}: differs from the twin launcher's");
    Ok(())
}

fn check_rms(ctx: &Context, rng: &mut Rng, dt: DType, (rows, dim): (usize, usize), weight: bool) -> Result<()> {
    let n = rows * dim;
    let (xs, rs, ws) = (rng.vec(n, 3.0), rng.vec(n, 1.0), rng.vec(dim, 1.0));
    let (x, r, w) = (ctx.buffer_from(&xs, "x")?, ctx.buffer_from(&rs, "r")?, ctx.buffer_from(&ws, "w")?);
    let (y, h, h_only) = (f32_buffer(ctx, n, "y")?, f32_buffer(ctx, n, "h")?, f32_buffer(ctx, n, "h only")?);
    let [t_full, t_only] = [half_buffer(ctx, n, "twin")?, half_buffer(ctx, n, "twin only")?];
    let [rstd, rstd_only] = [f32_buffer(ctx, rows, "rstd")?, f32_buffer(ctx, rows, "rstd only")?];
    let p = RmsNorm { rows: rows as u32, dim: dim as u32, eps: 1e-5, unit_offset: !weight, dtype: DType::F32 };
    let wv = weight.then(|| w.view());
    let what = format!("rms {rows}x{dim} w {weight} {dt:?}");
    let mut rec = ctx.recorder(false)?;
    norm::rms_norm_forward_twin(&mut rec, &p, (x.view(), wv), y.view(), twin(&t_full, n, dt), rstd.view())?;
    norm::rms_norm_forward_twin_only(&mut rec, &p, (x.view(), wv), twin(&t_only, n, dt), rstd_only.view())?;
    rec.submit()?;
    same16(ctx, &what, (&t_full, &t_only), n)?;
    same32(ctx, &format!("{what}: rstd"), (&rstd, &rstd_only), rows)?;
    let mut rec = ctx.recorder(false)?;
    let xr = (x.view(), r.view());
    norm::add_rms_norm_forward_twin(&mut rec, &p, xr, wv, h.view(), y.view(), twin(&t_full, n, dt), rstd.view())?;
    norm::add_rms_norm_forward_twin_only(&mut rec, &p, xr, wv, h_only.view(), twin(&t_only, n, dt), rstd_only.view())?;
    rec.submit()?;
    let what = format!("add {what}");
    same16(ctx, &what, (&t_full, &t_only), n)?;
    same32(ctx, &format!("{what}: h"), (&h, &h_only), n)?;
    same32(ctx, &format!("{what}: rstd"), (&rstd, &rstd_only), rows)
}

fn check_rope(ctx: &Context, rng: &mut Rng, dt: DType, shape: (u32, u32, u32, u32, u32)) -> Result<()> {
    let ri = RopeInputs::draw(ctx, rng, shape, (RopeLayout::Interleaved, 1.25))?;
    let (p, n, ins) = (&ri.p, ri.n(), ri.views());
    let y = f32_buffer(ctx, n, "y")?;
    let [t_full, t_only] = [half_buffer(ctx, n, "twin")?, half_buffer(ctx, n, "twin only")?];
    let what = format!("rope {p:?} {dt:?}");
    let mut rec = ctx.recorder(false)?;
    rope::rope_forward_twin(&mut rec, p, ins, y.view(), twin(&t_full, n, dt))?;
    rope::rope_forward_twin_only(&mut rec, p, ins, twin(&t_only, n, dt))?;
    rec.submit()?;
    same16(ctx, &what, (&t_full, &t_only), n)?;
    // The backward of a 16-bit dy (the forward's twin read as dy).
    let [d_full, d_only] = [half_buffer(ctx, n, "dx twin")?, half_buffer(ctx, n, "dx twin only")?];
    let mut rec = ctx.recorder(false)?;
    let ins = (t_full.slice(0, n as u64 * 2), ins.1, ins.2);
    rope::rope_backward_twin_in16(&mut rec, p, ins, y.view(), twin(&d_full, n, dt))?;
    rope::rope_backward_in16_twin_only(&mut rec, p, ins, twin(&d_only, n, dt))?;
    rec.submit()?;
    same16(ctx, &format!("{what} backward"), (&d_full, &d_only), n)?;
    check_rope_strided(ctx, p, dt, &ri.xs, (&ri.pos, &ri.inv), (&t_only, &d_only))
}

/// The view of `b` from its `col`-th value of `bytes` bytes on.
fn from(b: &Buffer, col: usize, bytes: u64) -> vkformers_vk::BufferView<'_> {
    b.slice(col as u64 * bytes, b.size() - col as u64 * bytes)
}

/// The strided launchers (training's q and k read in place from the packed q/k/v output, dq and
/// dk written into its packed gradient): x placed at column 3 of token rows 5 wider than the
/// heads; the forward's twin and the backward's (into the same columns of a marked buffer) are
/// bit for bit the contiguous launchers' (`want`: forward, backward twins), other columns kept.
fn check_rope_strided(
    ctx: &Context,
    p: &Rope,
    dt: DType,
    xs: &[f32],
    (pos, inv): (&Buffer, &Buffer),
    (fwd, bwd): (&Buffer, &Buffer),
) -> Result<()> {
    let (tokens, row) = ((p.batch * p.seq) as usize, (p.heads * p.head_dim) as usize);
    let (col0, width) = (3, row + 5);
    let n = tokens * row;
    let mut wide = vec![f32::NAN; tokens * width];
    for t in 0..tokens {
        wide[t * width + col0..t * width + col0 + row].copy_from_slice(&xs[t * row..(t + 1) * row]);
    }
    let wide = ctx.buffer_from(&wide, "x in packed rows")?;
    let q = half_buffer(ctx, n, "strided forward")?;
    let packed = half_buffer(ctx, tokens * width + 1, "packed gradient")?;
    let what = format!("strided rope {p:?} {dt:?}");
    let mut rec = ctx.recorder(false)?;
    rope::rope_forward_twin_only_strided(
        &mut rec,
        p,
        (from(&wide, col0, 4), pos.view(), inv.view()),
        width as u32,
        twin(&q, n, dt),
    )?;
    let ins = (fwd.slice(0, n as u64 * 2), pos.view(), inv.view());
    let dst = Twin { view: from(&packed, col0, 2), dtype: dt };
    rope::rope_backward_in16_twin_only_strided(&mut rec, p, ins, dst, width as u32)?;
    rec.submit()?;
    same16(ctx, &format!("{what} forward"), (fwd, &q), n)?;
    let got: Vec<u16> = ctx.read_vec(packed.slice(0, (tokens * width) as u64 * 2))?;
    let want: Vec<u16> = ctx.read_vec(bwd.slice(0, n as u64 * 2))?;
    for t in 0..tokens {
        let r = &got[t * width..(t + 1) * width];
        assert_eq!(&r[col0..col0 + row], &want[t * row..(t + 1) * row], "{what} backward, token {t}");
        assert!(r[..col0].iter().chain(&r[col0 + row..]).all(|&v| v == 0x7fc1), "{what}: other columns kept");
    }
    Ok(())
}

fn check_glu(ctx: &Context, rng: &mut Rng, (kind, dt): (Glu, DType), (rows, inner): (usize, usize)) -> Result<()> {
    let n = rows * inner;
    let GluInputs { gate, up, dout, .. } = GluInputs::draw(ctx, rng, n)?;
    // Per launcher (full, only): out, saved gate, saved up.
    let full: Vec<Buffer> = (0..3).map(|_| half_buffer(ctx, n, "full")).collect::<Result<_>>()?;
    let only: Vec<Buffer> = (0..3).map(|_| half_buffer(ctx, n, "only")).collect::<Result<_>>()?;
    let y = f32_buffer(ctx, n, "y")?;
    let what = format!("glu {kind:?} {rows}x{inner} {dt:?}");
    let mut rec = ctx.recorder(false)?;
    let ins = (gate.view(), Some(up.view()));
    glu::forward_twin(&mut rec, kind, ins, y.view(), twin(&full[0], n, dt), Some(save(&full, n, dt)), rows, inner)?;
    glu::forward_twin_only(&mut rec, kind, ins, twin(&only[0], n, dt), Some(save(&only, n, dt)), (rows, inner))?;
    rec.submit()?;
    for (i, part) in ["out", "saved gate", "saved up"].iter().enumerate() {
        same16(ctx, &format!("{what}: {part}"), (&full[i], &only[i]), n)?;
    }
    // The backward from the saved 16-bit gate and up.
    let (dgate, dup) = (f32_buffer(ctx, n, "dgate")?, f32_buffer(ctx, n, "dup")?);
    let [dg_full, du_full, dg_only, du_only] = [
        half_buffer(ctx, n, "dg")?,
        half_buffer(ctx, n, "du")?,
        half_buffer(ctx, n, "dg only")?,
        half_buffer(ctx, n, "du only")?,
    ];
    let mut rec = ctx.recorder(false)?;
    let ins = (save(&full, n, dt), dout.view());
    let full_twins = [twin(&dg_full, n, dt), twin(&du_full, n, dt)];
    glu::backward_saved16(&mut rec, kind, ins, (dgate.view(), dup.view()), full_twins, (rows, inner))?;
    glu::backward_saved16_twin_only(
        &mut rec,
        kind,
        ins,
        [twin(&dg_only, n, dt), twin(&du_only, n, dt)],
        (rows, inner),
    )?;
    rec.submit()?;
    same16(ctx, &format!("{what} backward: dgate"), (&dg_full, &dg_only), n)?;
    same16(ctx, &format!("{what} backward: dup"), (&du_full, &du_only), n)
}

/// The gate and up halves of a 16-bit gate_up buffer of `rows x 2 inner` values (up: from
/// `inner` values on).
fn halves(b: &Buffer, inner: usize, dt: DType) -> [Twin<'_>; 2] {
    let n2 = b.size() / 2;
    [
        Twin { view: b.slice(0, n2 * 2), dtype: dt },
        Twin { view: b.slice(inner as u64 * 2, (n2 - inner as u64) * 2), dtype: dt },
    ]
}

/// The GLU of a fused gate_up `[rows, 2 inner]` (the training forward's packed gate/up
/// product) saving a 16-bit gate_up, and its backward from it writing dgate_up in the packed
/// layout (f32 with its twin, or the twin only): bit for bit the separate launchers' values
/// (`check_glu`'s, held to the f64 reference by twin.rs), each row's gate then up.
fn check_glu_fused(
    ctx: &Context,
    rng: &mut Rng,
    (kind, dt): (Glu, DType),
    (rows, inner): (usize, usize),
) -> Result<()> {
    let n = rows * inner;
    let GluInputs { gs, us, gate, up, dout, .. } = GluInputs::draw(ctx, rng, n)?;
    let packed = |a: &[f32], b: &[f32]| -> Vec<f32> {
        (0..rows).flat_map(|r| [&a[r * inner..(r + 1) * inner], &b[r * inner..(r + 1) * inner]].concat()).collect()
    };
    let gate_up = ctx.buffer_from(&packed(&gs, &us), "gate_up")?;
    let sep: Vec<Buffer> = (0..3).map(|_| half_buffer(ctx, n, "separate")).collect::<Result<_>>()?;
    let (out16, saved) = (half_buffer(ctx, n, "out16")?, half_buffer(ctx, 2 * n, "saved gate_up")?);
    let what = format!("fused glu {kind:?} {rows}x{inner} {dt:?}");
    let mut rec = ctx.recorder(false)?;
    glu::forward_twin_only(
        &mut rec,
        kind,
        (gate.view(), Some(up.view())),
        twin(&sep[0], n, dt),
        Some(save(&sep, n, dt)),
        (rows, inner),
    )?;
    glu::forward_twin_only(
        &mut rec,
        kind,
        (gate_up.view(), None),
        twin(&out16, n, dt),
        Some(halves(&saved, inner, dt)),
        (rows, inner),
    )?;
    rec.submit()?;
    same16(ctx, &format!("{what}: out"), (&sep[0], &out16), n)?;
    let read16 = |b: &Buffer, m: usize| -> Result<Vec<u16>> { ctx.read_vec(b.slice(0, m as u64 * 2)) };
    let interleave = |a: Vec<u16>, b: Vec<u16>| -> Vec<u16> {
        (0..rows).flat_map(|r| [&a[r * inner..(r + 1) * inner], &b[r * inner..(r + 1) * inner]].concat()).collect()
    };
    assert_eq!(read16(&saved, 2 * n)?, interleave(read16(&sep[1], n)?, read16(&sep[2], n)?), "{what}: saved gate_up");
    // Backward: separate (f32 + twins) against fused (f32 + twin, and twin only).
    let (dgate, dup, d_packed) =
        (f32_buffer(ctx, n, "dgate")?, f32_buffer(ctx, n, "dup")?, f32_buffer(ctx, 2 * n, "d")?);
    let [dg16, du16] = [half_buffer(ctx, n, "dg16")?, half_buffer(ctx, n, "du16")?];
    let [d16, d16_only] = [half_buffer(ctx, 2 * n, "d16")?, half_buffer(ctx, 2 * n, "d16 only")?];
    let mut rec = ctx.recorder(false)?;
    let sep_twins = [twin(&dg16, n, dt), twin(&du16, n, dt)];
    glu::backward_saved16(
        &mut rec,
        kind,
        (save(&sep, n, dt), dout.view()),
        (dgate.view(), dup.view()),
        sep_twins,
        (rows, inner),
    )?;
    let ins = (twin(&saved, 2 * n, dt), dout.view());
    glu::backward_fused_saved16(&mut rec, kind, ins, Some(d_packed.view()), twin(&d16, 2 * n, dt), (rows, inner))?;
    glu::backward_fused_saved16(&mut rec, kind, ins, None, twin(&d16_only, 2 * n, dt), (rows, inner))?;
    rec.submit()?;
    let want16 = interleave(read16(&dg16, n)?, read16(&du16, n)?);
    assert_eq!(read16(&d16, 2 * n)?, want16, "{what}: 16-bit dgate_up");
    assert_eq!(read16(&d16_only, 2 * n)?, want16, "{what}: 16-bit only dgate_up");
    let (dg, du): (Vec<f32>, Vec<f32>) = (ctx.read_vec(dgate.view())?, ctx.read_vec(dup.view())?);
    let got: Vec<f32> = ctx.read_vec(d_packed.view())?;
    let bits = |v: Vec<f32>| v.into_iter().map(f32::to_bits).collect::<Vec<_>>();
    assert_eq!(bits(got), bits(packed(&dg, &du)), "{what}: f32 dgate_up");
    Ok(())
}

/// The cross-entropy backward into 16-bit dlogits: bit for bit the f32 backward's values
/// rounded as the twins round (the f32 kernel's output cast by `dtype::cast`).
fn check_loss(ctx: &Context, rng: &mut Rng, dt: DType, (rows, vocab): (usize, usize)) -> Result<()> {
    let n = rows * vocab;
    let logits = ctx.buffer_from(&rng.vec(n, 4.0), "logits")?;
    // Every third row ignored (-100).
    let labels_v: Vec<i32> = (0..rows).map(|r| if r % 3 == 2 { -100 } else { rng.below(vocab) as i32 }).collect();
    let labels = ctx.buffer_from(&labels_v, "labels")?;
    let (loss_rows, lse, count) =
        (f32_buffer(ctx, rows, "loss")?, f32_buffer(ctx, rows, "lse")?, f32_buffer(ctx, 1, "n")?);
    let g = ctx.buffer_from(&[0.75f32], "g")?;
    let (d32, cast, d16) = (f32_buffer(ctx, n, "dlogits")?, half_buffer(ctx, n, "cast")?, half_buffer(ctx, n, "d16")?);
    let ce = CrossEntropy {
        logits: logits.view(),
        labels: labels.view(),
        rows: rows as u32,
        vocab: vocab as u32,
        dtype: DType::F32,
    };
    let mut rec = ctx.recorder(false)?;
    loss::count_labels(&mut rec, labels.view(), vocab as u32, count.view())?;
    loss::forward(&mut rec, &ce, loss_rows.view(), lse.view())?;
    loss::backward(&mut rec, &ce, lse.view(), count.view(), g.view(), d32.view())?;
    vkformers_kernels::dtype::cast(&mut rec, d32.view(), DType::F32, cast.slice(0, n as u64 * 2), dt)?;
    loss::backward_twin_only(&mut rec, &ce, (lse.view(), count.view(), g.view()), twin(&d16, n, dt))?;
    rec.submit()?;
    same16(ctx, &format!("cross-entropy backward {rows}x{vocab} {dt:?}"), (&cast, &d16), n)
}

#[test]
fn twin_only_launches_write_the_twin_launches_16_bit_outputs() {
    on_halves("twin only", 17, |ctx, rng, dt| {
        for (shape, weight) in RMS_CASES {
            check_rms(ctx, rng, dt, shape, weight)?;
        }
        for shape in ROPE_SHAPES {
            check_rope(ctx, rng, dt, shape)?;
        }
        for kind in Glu::ALL {
            for shape in [(1, 1), (3, 7), (5, 9), (2, 33)] {
                check_glu(ctx, rng, (kind, dt), shape)?;
                check_glu_fused(ctx, rng, (kind, dt), shape)?;
            }
        }
        for shape in [(1, 1), (4, 7), (5, 300)] {
            check_loss(ctx, rng, dt, shape)?;
        }
        Ok(())
    });
}
