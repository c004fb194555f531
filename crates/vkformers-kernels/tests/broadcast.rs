//! Broadcasting binary ops: reference gradients against finite differences; GPU forward,
//! sum_to_shape-based backward, scale and axpy against the reference on every device; each
//! kernel again in f16 and bf16 storage (16-bit inputs are rounded on the host, the reference
//! runs on the rounded values).

use vkformers_kernels::broadcast::{self, broadcast_shape, reference, BinaryOp};
use vkformers_kernels::dtype::DType;
use vkformers_kernels::testutil::storage::{download, on_halves, round, tol, upload};
use vkformers_kernels::testutil::{assert_close, assert_grad_matches_fd, f64s, Rng, TOL_F32};
use vkformers_vk::testing::on_every_device;
use vkformers_vk::{Buffer, Context, Result};

const F32: DType = DType::F32;

/// (a shape, b shape) pairs: trailing/leading/middle broadcasts, scalars, equal shapes.
const SHAPES: &[(&[usize], &[usize])] = &[
    (&[3, 5], &[5]),
    (&[3, 1], &[1, 5]),
    (&[1], &[7, 3]),
    (&[], &[2, 3]),
    (&[2, 3, 4, 5], &[3, 1, 5]),
    (&[17, 1, 9], &[1, 13, 1]),
    (&[1, 1], &[1, 1]),
    (&[2, 1, 3, 1], &[1, 5, 1, 7]),
    (&[4, 257], &[4, 257]),
    (&[1001], &[1]),
    (&[300, 1], &[300, 301]),
];

/// Operand values; divisors are kept away from 0.
fn operand(rng: &mut Rng, n: usize, divisor: bool) -> Vec<f32> {
    let v = rng.vec(n, 2.0);
    if divisor {
        v.iter().map(|x| if *x < 0.0 { x - 0.5 } else { x + 0.5 }).collect()
    } else {
        v
    }
}

fn numel(s: &[usize]) -> usize {
    s.iter().product()
}

#[test]
fn broadcast_shape_follows_numpy() {
    assert_eq!(broadcast_shape(&[3, 1], &[1, 5]), Some(vec![3, 5]));
    assert_eq!(broadcast_shape(&[], &[2]), Some(vec![2]));
    assert_eq!(broadcast_shape(&[2, 1, 4], &[3, 1]), Some(vec![2, 3, 4]));
    assert_eq!(broadcast_shape(&[2, 3], &[3, 2]), None);
}

#[test]
fn reference_backward_matches_finite_differences() {
    let mut rng = Rng::new(5);
    for op in BinaryOp::ALL {
        for &(sa, sb) in SHAPES.iter().filter(|(a, b)| numel(a) * numel(b) < 2000) {
            let a = f64s(&operand(&mut rng, numel(sa), false));
            let b = f64s(&operand(&mut rng, numel(sb), op == BinaryOp::Div));
            let out_shape = broadcast_shape(sa, sb).expect("broadcast");
            let w = f64s(&rng.vec(numel(&out_shape), 1.0));
            let dot = |y: Vec<f64>| y.iter().zip(&w).map(|(p, q)| p * q).sum::<f64>();
            let (da, db) = reference::backward(op, &a, sa, &b, sb, &w);
            let what = format!("{op:?} {sa:?} {sb:?}");
            assert_grad_matches_fd(&format!("{what} da"), |x| dot(reference::forward(op, x, sa, &b, sb).0), &a, &da);
            assert_grad_matches_fd(&format!("{what} db"), |x| dot(reference::forward(op, &a, sa, x, sb).0), &b, &db);
        }
    }
}

fn buf(ctx: &Context, n: usize, what: &str) -> Result<Buffer> {
    ctx.buffer((n * 4) as u64, what)
}

/// GPU gradients of `a (op) b` built from `binary`, `sum_to_shape` and `scale`.
fn gpu_backward(
    ctx: &Context,
    op: BinaryOp,
    (a, sa): (&Buffer, &[usize]),
    (b, sb): (&Buffer, &[usize]),
    g: &Buffer,
) -> Result<(Vec<f32>, Vec<f32>)> {
    let so = broadcast_shape(sa, sb).expect("broadcast");
    let no = numel(&so);
    let (da, db) = (buf(ctx, numel(sa), "da")?, buf(ctx, numel(sb), "db")?);
    let (t1, t2, t3) = (buf(ctx, no, "t1")?, buf(ctx, no, "t2")?, buf(ctx, no, "t3")?);
    let db_neg = buf(ctx, numel(sb), "-db")?;
    let mut rec = ctx.recorder(false)?;
    let r = &mut rec;
    let gv = (g.view(), &so[..]);
    match op {
        BinaryOp::Add | BinaryOp::Sub => {
            broadcast::sum_to_shape(r, g.view(), &so, da.view(), sa, F32, F32)?;
            broadcast::sum_to_shape(r, g.view(), &so, db_neg.view(), sb, F32, F32)?;
        }
        BinaryOp::Mul => {
            broadcast::binary(r, BinaryOp::Mul, gv, (b.view(), sb), t1.view(), F32)?;
            broadcast::sum_to_shape(r, t1.view(), &so, da.view(), sa, F32, F32)?;
            broadcast::binary(r, BinaryOp::Mul, gv, (a.view(), sa), t2.view(), F32)?;
            broadcast::sum_to_shape(r, t2.view(), &so, db_neg.view(), sb, F32, F32)?;
        }
        BinaryOp::Div => {
            broadcast::binary(r, BinaryOp::Div, gv, (b.view(), sb), t1.view(), F32)?;
            broadcast::sum_to_shape(r, t1.view(), &so, da.view(), sa, F32, F32)?;
            broadcast::binary(r, BinaryOp::Mul, gv, (a.view(), sa), t2.view(), F32)?;
            broadcast::binary(r, BinaryOp::Div, (t2.view(), &so), (b.view(), sb), t3.view(), F32)?;
            broadcast::binary(r, BinaryOp::Div, (t3.view(), &so), (b.view(), sb), t2.view(), F32)?;
            broadcast::sum_to_shape(r, t2.view(), &so, db_neg.view(), sb, F32, F32)?;
        }
    }
    let alpha = if matches!(op, BinaryOp::Sub | BinaryOp::Div) { -1.0 } else { 1.0 };
    broadcast::scale(r, db_neg.view(), db.view(), alpha, F32)?;
    rec.submit()?;
    Ok((ctx.read_vec(da.view())?, ctx.read_vec(db.view())?))
}

#[test]
fn gpu_forward_and_backward_match_reference() {
    on_every_device("broadcast", |ctx| {
        let mut rng = Rng::new(9);
        for op in BinaryOp::ALL {
            for &(sa, sb) in SHAPES {
                for (sa, sb) in [(sa, sb), (sb, sa)] {
                    let av = operand(&mut rng, numel(sa), false);
                    let bv = operand(&mut rng, numel(sb), op == BinaryOp::Div);
                    let (a64, b64) = (f64s(&av), f64s(&bv));
                    let (want, so) = reference::forward(op, &a64, sa, &b64, sb);
                    let gv = rng.vec(want.len(), 1.0);
                    let (want_da, want_db) = reference::backward(op, &a64, sa, &b64, sb, &f64s(&gv));
                    let what = format!("{op:?} {sa:?} {sb:?}");

                    let (a, b, g) =
                        (ctx.buffer_from(&av, "a")?, ctx.buffer_from(&bv, "b")?, ctx.buffer_from(&gv, "g")?);
                    let out = buf(ctx, numel(&so), "out")?;
                    let mut rec = ctx.recorder(false)?;
                    broadcast::binary(&mut rec, op, (a.view(), sa), (b.view(), sb), out.view(), F32)?;
                    rec.submit()?;
                    assert_close(&format!("{what} forward"), &ctx.read_vec::<f32>(out.view())?, &want, TOL_F32);
                    let (da, db) = gpu_backward(ctx, op, (&a, sa), (&b, sb), &g)?;
                    assert_close(&format!("{what} da"), &da, &want_da, TOL_F32);
                    assert_close(&format!("{what} db"), &db, &want_db, TOL_F32);
                }
            }
        }
        Ok(())
    });
}

#[test]
fn sum_to_shape_of_a_large_broadcast() {
    on_every_device("sum_to_shape large", |ctx| {
        let mut rng = Rng::new(13);
        for (gs, s) in [(&[100_003usize][..], &[1usize][..]), (&[3, 7, 1001], &[1, 7, 1]), (&[70_001, 3], &[70_001, 1])]
        {
            let gv = rng.vec(numel(gs), 1.0);
            let want = reference::sum_to_shape(&f64s(&gv), gs, s);
            let g = ctx.buffer_from(&gv, "g")?;
            let out = buf(ctx, numel(s), "out")?;
            let mut rec = ctx.recorder(false)?;
            broadcast::sum_to_shape(&mut rec, g.view(), gs, out.view(), s, F32, F32)?;
            rec.submit()?;
            assert_close(&format!("sum {gs:?} to {s:?}"), &ctx.read_vec::<f32>(out.view())?, &want, TOL_F32);
        }
        Ok(())
    });
}

#[test]
fn scale_and_axpy_match_reference() {
    on_every_device("scale/axpy", |ctx| {
        let mut rng = Rng::new(17);
        for n in [1, 7, 257, 5003] {
            let (xv, yv) = (rng.vec(n, 3.0), rng.vec(n, 3.0));
            let (x, y) = (ctx.buffer_from(&xv, "x")?, ctx.buffer_from(&yv, "y")?);
            let out = buf(ctx, n, "out")?;
            let mut rec = ctx.recorder(false)?;
            broadcast::scale(&mut rec, x.view(), out.view(), -0.37, F32)?;
            broadcast::axpy(&mut rec, 1.5, x.view(), y.view(), F32)?;
            broadcast::axpy(&mut rec, -0.25, out.view(), y.view(), F32)?;
            rec.submit()?;
            let (x64, y64) = (f64s(&xv), f64s(&yv));
            let s = reference::scale(&x64, f64::from(-0.37f32));
            let want_y = reference::axpy(-0.25, &s, &reference::axpy(1.5, &x64, &y64));
            assert_close(&format!("scale n={n}"), &ctx.read_vec::<f32>(out.view())?, &s, TOL_F32);
            assert_close(&format!("axpy n={n}"), &ctx.read_vec::<f32>(y.view())?, &want_y, TOL_F32);
        }
        Ok(())
    });
}

/// `binary` for every op and shape pair (both orders), `sum_to_shape` of each output shape to
/// each operand's (into the storage type and into f32), `scale` and `axpy`, in storage `dt`.
fn check_16(ctx: &Context, dt: DType, rng: &mut Rng) -> Result<()> {
    for op in BinaryOp::ALL {
        for &(sa, sb) in SHAPES {
            for (sa, sb) in [(sa, sb), (sb, sa)] {
                let av = round(dt, &operand(rng, numel(sa), false));
                let bv = round(dt, &operand(rng, numel(sb), op == BinaryOp::Div));
                let (want, so) = reference::forward(op, &f64s(&av), sa, &f64s(&bv), sb);
                let bytes = numel(&so) as u64 * dt.bytes();
                let (a, b) = (upload(ctx, dt, &av, "a")?, upload(ctx, dt, &bv, "b")?);
                let out = ctx.buffer(bytes, "out")?;
                let mut rec = ctx.recorder(false)?;
                broadcast::binary(&mut rec, op, (a.view(), sa), (b.view(), sb), out.slice(0, bytes), dt)?;
                rec.submit()?;
                let got = download(ctx, dt, out.slice(0, bytes))?;
                assert_close(&format!("{op:?} {dt:?} {sa:?} {sb:?}"), &got, &want, tol(dt));
            }
        }
    }
    let mut sums: Vec<(Vec<usize>, Vec<usize>)> = SHAPES
        .iter()
        .flat_map(|&(sa, sb)| {
            let so = broadcast_shape(sa, sb).expect("broadcast");
            [(so.clone(), sa.to_vec()), (so, sb.to_vec())]
        })
        .collect();
    sums.extend([(vec![100_003], vec![1]), (vec![3, 7, 1001], vec![1, 7, 1]), (vec![70_001, 3], vec![70_001, 1])]);
    for (gs, s) in &sums {
        let gv = round(dt, &rng.vec(numel(gs), 1.0));
        let want = reference::sum_to_shape(&f64s(&gv), gs, s);
        let g = upload(ctx, dt, &gv, "g")?;
        let bytes = numel(s) as u64 * dt.bytes();
        let (out, out32) = (ctx.buffer(bytes, "out")?, buf(ctx, numel(s), "out f32")?);
        let mut rec = ctx.recorder(false)?;
        broadcast::sum_to_shape(&mut rec, g.view(), gs, out.slice(0, bytes), s, dt, dt)?;
        broadcast::sum_to_shape(&mut rec, g.view(), gs, out32.view(), s, dt, F32)?;
        rec.submit()?;
        let what = format!("sum {dt:?} {gs:?} to {s:?}");
        assert_close(&what, &download(ctx, dt, out.slice(0, bytes))?, &want, tol(dt));
        // Into f32 nothing is rounded after the f32 sum.
        assert_close(&format!("{what} into f32"), &ctx.read_vec::<f32>(out32.view())?, &want, TOL_F32);
    }
    for n in [1, 7, 257, 5003] {
        let (xv, yv) = (round(dt, &rng.vec(n, 3.0)), rng.vec(n, 3.0));
        let (x, y) = (upload(ctx, dt, &xv, "x")?, ctx.buffer_from(&yv, "y")?);
        let bytes = n as u64 * dt.bytes();
        let out = ctx.buffer(bytes, "out")?;
        let mut rec = ctx.recorder(false)?;
        broadcast::scale(&mut rec, x.view(), out.slice(0, bytes), -0.37, dt)?;
        broadcast::axpy(&mut rec, 1.5, x.view(), y.view(), dt)?;
        rec.submit()?;
        let (x64, y64) = (f64s(&xv), f64s(&yv));
        let s = reference::scale(&x64, f64::from(-0.37f32));
        assert_close(&format!("scale {dt:?} n={n}"), &download(ctx, dt, out.slice(0, bytes))?, &s, tol(dt));
        // The f32 accumulator is not rounded to 16 bits.
        let want_y = reference::axpy(1.5, &x64, &y64);
        assert_close(&format!("axpy {dt:?} n={n}"), &ctx.read_vec::<f32>(y.view())?, &want_y, TOL_F32);
    }
    Ok(())
}

#[test]
fn gpu_kernels_in_16_bits_match_reference() {
    on_halves("broadcast f16/bf16", 19, |ctx, rng, dt| check_16(ctx, dt, rng));
}

#[test]
fn bad_shapes_are_errors_naming_the_kernel() {
    on_every_device("broadcast errors", |ctx| {
        let a = buf(ctx, 6, "a")?;
        let b = buf(ctx, 6, "b")?;
        let mut rec = ctx.recorder(false)?;
        let e = broadcast::binary(&mut rec, BinaryOp::Sub, (a.view(), &[2, 3]), (b.view(), &[3, 2]), a.view(), F32)
            .unwrap_err();
        assert!(e.to_string().contains("broadcast/binary:sub") && e.to_string().contains("do not broadcast"), "{e}");
        let e =
            broadcast::binary(&mut rec, BinaryOp::Add, (a.view(), &[1, 1, 1, 2, 3]), (b.view(), &[6]), a.view(), F32)
                .unwrap_err();
        assert!(e.to_string().contains("more than 4 dims"), "{e}");
        let e = broadcast::sum_to_shape(&mut rec, a.view(), &[2, 3], b.view(), &[2, 1], F32, F32).unwrap_err();
        assert!(e.to_string().contains("broadcast/sum_to_shape:tree"), "{e}");
        let e = broadcast::sum_to_shape(&mut rec, a.view(), &[2, 3], b.view(), &[3, 1], F32, F32).unwrap_err();
        assert!(e.to_string().contains("does not broadcast"), "{e}");
        let e = broadcast::sum_to_shape(&mut rec, a.view(), &[2, 3], b.view(), &[2, 3], F32, DType::F16).unwrap_err();
        assert!(e.to_string().contains("out must be f32 or the gradient's type"), "{e}");
        if ctx.caps().fp16 {
            // x: 12 bf16, y: 6 f32.
            let e = broadcast::axpy(&mut rec, 1.0, a.view(), b.view(), DType::BF16).unwrap_err();
            assert!(e.to_string().contains("broadcast/axpy:bf16"), "{e}");
            let e = broadcast::scale(&mut rec, a.view(), a.slice(0, 22), 2.0, DType::F16).unwrap_err();
            assert!(e.to_string().contains("broadcast/scale:f16"), "{e}");
        }
        rec.submit()?;
        Ok(())
    });
}
