//! Broadcasting binary ops: reference gradients against finite differences; GPU forward,
//! sum_to_shape-based backward, scale and axpy against the reference on every device.

use vkformers_kernels::broadcast::{self, broadcast_shape, reference, BinaryOp};
use vkformers_kernels::testutil::{assert_close, assert_grad_matches_fd, f64s, Rng, TOL_F32};
use vkformers_vk::testing::on_every_device;
use vkformers_vk::{Buffer, Context, Result};

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
            broadcast::sum_to_shape(r, g.view(), &so, da.view(), sa)?;
            broadcast::sum_to_shape(r, g.view(), &so, db_neg.view(), sb)?;
        }
        BinaryOp::Mul => {
            broadcast::binary(r, BinaryOp::Mul, gv, (b.view(), sb), t1.view())?;
            broadcast::sum_to_shape(r, t1.view(), &so, da.view(), sa)?;
            broadcast::binary(r, BinaryOp::Mul, gv, (a.view(), sa), t2.view())?;
            broadcast::sum_to_shape(r, t2.view(), &so, db_neg.view(), sb)?;
        }
        BinaryOp::Div => {
            broadcast::binary(r, BinaryOp::Div, gv, (b.view(), sb), t1.view())?;
            broadcast::sum_to_shape(r, t1.view(), &so, da.view(), sa)?;
            broadcast::binary(r, BinaryOp::Mul, gv, (a.view(), sa), t2.view())?;
            broadcast::binary(r, BinaryOp::Div, (t2.view(), &so), (b.view(), sb), t3.view())?;
            broadcast::binary(r, BinaryOp::Div, (t3.view(), &so), (b.view(), sb), t2.view())?;
            broadcast::sum_to_shape(r, t2.view(), &so, db_neg.view(), sb)?;
        }
    }
    let alpha = if matches!(op, BinaryOp::Sub | BinaryOp::Div) { -1.0 } else { 1.0 };
    broadcast::scale(r, db_neg.view(), db.view(), alpha)?;
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
                    broadcast::binary(&mut rec, op, (a.view(), sa), (b.view(), sb), out.view())?;
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
            broadcast::sum_to_shape(&mut rec, g.view(), gs, out.view(), s)?;
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
            broadcast::scale(&mut rec, x.view(), out.view(), -0.37)?;
            broadcast::axpy(&mut rec, 1.5, x.view(), y.view())?;
            broadcast::axpy(&mut rec, -0.25, out.view(), y.view())?;
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

#[test]
fn bad_shapes_are_errors_naming_the_kernel() {
    on_every_device("broadcast errors", |ctx| {
        let a = buf(ctx, 6, "a")?;
        let b = buf(ctx, 6, "b")?;
        let mut rec = ctx.recorder(false)?;
        let e =
            broadcast::binary(&mut rec, BinaryOp::Sub, (a.view(), &[2, 3]), (b.view(), &[3, 2]), a.view()).unwrap_err();
        assert!(e.to_string().contains("broadcast/binary:sub") && e.to_string().contains("do not broadcast"), "{e}");
        let e = broadcast::binary(&mut rec, BinaryOp::Add, (a.view(), &[1, 1, 1, 2, 3]), (b.view(), &[6]), a.view())
            .unwrap_err();
        assert!(e.to_string().contains("more than 4 dims"), "{e}");
        let e = broadcast::sum_to_shape(&mut rec, a.view(), &[2, 3], b.view(), &[2, 1]).unwrap_err();
        assert!(e.to_string().contains("broadcast/sum_to_shape:tree"), "{e}");
        let e = broadcast::sum_to_shape(&mut rec, a.view(), &[2, 3], b.view(), &[3, 1]).unwrap_err();
        assert!(e.to_string().contains("does not broadcast"), "{e}");
        rec.submit()?;
        Ok(())
    });
}
