//! Cross-entropy: reference gradient vs finite differences; GPU kernels vs the f64 reference on
//! odd shapes on every device, with validation on; logits and dlogits in f32, f16 and bf16
//! (logits rounded on the host, the reference computed on the rounded values; dlogits compared
//! with the storage type's tolerance, the f32 outputs with f32's).

use vkformers_kernels::dtype::DType;
use vkformers_kernels::loss::{self, reference, CrossEntropy};
use vkformers_kernels::testutil::storage::{alloc, read, round, supported, tol, upload};
use vkformers_kernels::testutil::{assert_close, assert_grad_matches_fd, f64s, rel_l2, Rng, TOL_F32};
use vkformers_vk::testing::on_every_device;
use vkformers_vk::{Context, Result, VkError};

const IGNORE: i32 = -100;

/// Labels in [0, vocab) with about a quarter of the rows ignored (-100).
fn labels(rng: &mut Rng, rows: usize, vocab: usize, ignore_frac: f64) -> Vec<i32> {
    (0..rows).map(|_| if rng.uniform() < ignore_frac { IGNORE } else { rng.below(vocab) as i32 }).collect()
}

#[test]
fn reference_backward_matches_finite_differences() {
    let mut rng = Rng::new(1);
    for (rows, vocab) in [(1, 1), (1, 5), (4, 7), (6, 3)] {
        let x = f64s(&rng.vec(rows * vocab, 3.0));
        let mut l = labels(&mut rng, rows, vocab, 0.3);
        l[0] = (vocab - 1) as i32; // at least one counted row
        let g = 0.7;
        let analytic = reference::backward(&x, &l, vocab, g);
        let f = |x: &[f64]| g * reference::forward(x, &l, vocab).1;
        assert_grad_matches_fd(&format!("cross-entropy [{rows}, {vocab}]"), f, &x, &analytic);
    }
}

#[test]
fn reference_matches_closed_forms() {
    // Uniform logits: loss = ln V; all rows ignored: loss and gradient 0.
    let (rows, vocab) = (3, 11);
    let x = vec![0.25; rows * vocab];
    let (per_row, mean) = reference::forward(&x, &[1, IGNORE, 10], vocab);
    assert!((mean - (vocab as f64).ln()).abs() < 1e-12 && per_row[1] == 0.0);
    let (_, mean) = reference::forward(&x, &[IGNORE; 3], vocab);
    assert_eq!(mean, 0.0);
    assert!(reference::backward(&x, &[IGNORE, -1, 11], vocab, 1.0).iter().all(|&d| d == 0.0));
}

/// Bound on the relative L2 error of dlogits: f32 math, or the rounding of each stored element
/// (at most the unit roundoff: 2^-11 for f16, 2^-8 for bf16), with a factor 2 of headroom.
fn rel_l2_bound(dt: DType) -> f64 {
    match dt {
        DType::F32 => 1e-5,
        DType::F16 => 2.0 * 2f64.powi(-11),
        DType::BF16 => 2.0 * 2f64.powi(-8),
    }
}

struct Out {
    count: f32,
    rows: Vec<f32>,
    lse: Vec<f32>,
    mean: f32,
    dlogits_fused: Vec<f32>,
    dlogits_bwd: Vec<f32>,
}

/// Runs count → forward_backward → mean, and forward → backward, in one batch; logits (`xs`,
/// representable in `dt`) and dlogits stored in `dt`.
fn run_gpu(ctx: &Context, dt: DType, xs: &[f32], ls: &[i32], vocab: usize, g: f32) -> Result<Out> {
    let rows = ls.len();
    let x = upload(ctx, dt, xs, "logits")?;
    let l = ctx.buffer_from(ls, "labels")?;
    let gb = ctx.buffer_from(&[g], "g")?;
    let f32s = |n: usize, what: &str| ctx.buffer((n * 4) as u64, what);
    let (count, mean) = (f32s(1, "count")?, f32s(1, "mean")?);
    let (loss_rows, lse, loss_rows2, lse2) =
        (f32s(rows, "rows")?, f32s(rows, "lse")?, f32s(rows, "r2")?, f32s(rows, "l2")?);
    let (d1, d2) = (alloc(ctx, dt, rows * vocab, "dlogits")?, alloc(ctx, dt, rows * vocab, "dlogits2")?);
    let ce = CrossEntropy { logits: x.view(), labels: l.view(), rows: rows as u32, vocab: vocab as u32, dtype: dt };
    let mut rec = ctx.recorder(false)?;
    loss::count_labels(&mut rec, l.view(), vocab as u32, count.view())?;
    loss::forward_backward(&mut rec, &ce, count.view(), gb.view(), loss_rows.view(), lse.view(), d1.view())?;
    loss::mean_loss(&mut rec, loss_rows.view(), count.view(), mean.view())?;
    loss::forward(&mut rec, &ce, loss_rows2.view(), lse2.view())?;
    loss::backward(&mut rec, &ce, lse2.view(), count.view(), gb.view(), d2.view())?;
    rec.submit()?;
    let out = Out {
        count: ctx.read_vec::<f32>(count.view())?[0],
        rows: ctx.read_vec(loss_rows.view())?,
        lse: ctx.read_vec(lse.view())?,
        mean: ctx.read_vec::<f32>(mean.view())?[0],
        dlogits_fused: read(ctx, dt, &d1)?,
        dlogits_bwd: read(ctx, dt, &d2)?,
    };
    // The forward-only variant must agree bit for bit with the fused one.
    assert_eq!(ctx.read_vec::<f32>(loss_rows2.view())?, out.rows, "forward vs fused forward");
    assert_eq!(ctx.read_vec::<f32>(lse2.view())?, out.lse, "lse: forward vs fused forward");
    Ok(out)
}

#[allow(clippy::too_many_arguments)]
fn check_shape(
    ctx: &Context,
    rng: &mut Rng,
    dt: DType,
    rows: usize,
    vocab: usize,
    scale: f32,
    ignore: f64,
) -> Result<()> {
    let xs = round(dt, &rng.vec(rows * vocab, scale));
    let ls = labels(rng, rows, vocab, ignore);
    let g = 0.8f32;
    let got = run_gpu(ctx, dt, &xs, &ls, vocab, g)?;
    let x = f64s(&xs);
    let what = format!("{dt:?} [{rows}, {vocab}] scale {scale}");
    assert_eq!(got.count as usize, reference::count(&ls, vocab), "{what}: count");
    let (want_rows, want_mean) = reference::forward(&x, &ls, vocab);
    assert_close(&format!("{what}: loss rows"), &got.rows, &want_rows, TOL_F32);
    assert_close(&format!("{what}: lse"), &got.lse, &reference::row_lse(&x, vocab), TOL_F32);
    assert_close(&format!("{what}: mean"), &[got.mean], &[want_mean], TOL_F32);
    let want_d = reference::backward(&x, &ls, vocab, f64::from(g));
    for (name, d) in [("fused", &got.dlogits_fused), ("bwd", &got.dlogits_bwd)] {
        assert_close(&format!("{what}: dlogits {name}"), d, &want_d, tol(dt));
        // Gradients are O(1 / (vocab * count)): check them relative to their own size too.
        let err = rel_l2(&f64s(d), &want_d);
        assert!(err <= rel_l2_bound(dt), "{what}: dlogits {name}: rel L2 {err:e}");
        for (r, &l) in ls.iter().enumerate() {
            if l == IGNORE {
                assert!(d[r * vocab..(r + 1) * vocab].iter().all(|&v| v == 0.0), "{what}: ignored row {r}");
            }
        }
    }
    Ok(())
}

fn odd_shapes_in(dt: DType, seed: u64) {
    on_every_device(&format!("cross-entropy {dt:?}"), |ctx| {
        if !supported(ctx, dt, "cross-entropy") {
            return Ok(());
        }
        let mut rng = Rng::new(seed);
        for (rows, vocab) in [(1, 1), (3, 1), (1, 7), (5, 7), (9, 255), (4, 257), (13, 1001), (3, 4099), (2, 50_257)] {
            check_shape(ctx, &mut rng, dt, rows, vocab, 4.0, 0.25)?;
        }
        // Large logits (overflow without the max shift) and a single row that counts.
        check_shape(ctx, &mut rng, dt, 6, 333, 80.0, 0.25)?;
        check_shape(ctx, &mut rng, dt, 1, 1001, 2.0, 0.0)?;
        // Many rows: more than one row per thread in count / mean.
        check_shape(ctx, &mut rng, dt, 700, 3, 2.0, 0.3)?;
        Ok(())
    });
}

#[test]
fn gpu_matches_reference_on_odd_shapes() {
    odd_shapes_in(DType::F32, 7);
}

#[test]
fn gpu_f16_matches_reference_on_odd_shapes() {
    odd_shapes_in(DType::F16, 17);
}

#[test]
fn gpu_bf16_matches_reference_on_odd_shapes() {
    odd_shapes_in(DType::BF16, 27);
}

#[test]
fn all_rows_ignored_gives_zero_loss_and_gradient() {
    on_every_device("cross-entropy all ignored", |ctx| {
        let (rows, vocab) = (5, 9);
        let xs = Rng::new(3).vec(rows * vocab, 1.0);
        let got = run_gpu(ctx, DType::F32, &xs, &[IGNORE, -1, 9, IGNORE, 1000], vocab, 1.0)?;
        assert_eq!((got.count, got.mean), (0.0, 0.0));
        assert!(got.rows.iter().all(|&v| v == 0.0));
        assert!(got.dlogits_fused.iter().chain(&got.dlogits_bwd).all(|&v| v == 0.0));
        Ok(())
    });
}

#[test]
fn masked_vocabulary_entries_at_minus_infinity() {
    for dt in [DType::F32, DType::F16, DType::BF16] {
        on_every_device(&format!("cross-entropy -inf logits {dt:?}"), |ctx| {
            if !supported(ctx, dt, "cross-entropy -inf logits") {
                return Ok(());
            }
            let (rows, vocab) = (3, 600);
            let mut xs = round(dt, &Rng::new(5).vec(rows * vocab, 2.0));
            for (i, x) in xs.iter_mut().enumerate() {
                if i % 3 != 0 {
                    *x = f32::NEG_INFINITY;
                }
            }
            let ls = [0, 3, 597];
            let got = run_gpu(ctx, dt, &xs, &ls, vocab, 1.0)?;
            let (want_rows, want_mean) = reference::forward(&f64s(&xs), &ls, vocab);
            assert_close("rows", &got.rows, &want_rows, TOL_F32);
            assert_close("mean", &[got.mean], &[want_mean], TOL_F32);
            let want_d = reference::backward(&f64s(&xs), &ls, vocab, 1.0);
            assert_close("dlogits", &got.dlogits_fused, &want_d, tol(dt));
            assert_close("dlogits bwd", &got.dlogits_bwd, &want_d, tol(dt));
            Ok(())
        });
    }
}

#[test]
fn mean_is_deterministic() {
    on_every_device("cross-entropy determinism", |ctx| {
        let mut rng = Rng::new(11);
        let (rows, vocab) = (300, 17);
        let xs = rng.vec(rows * vocab, 3.0);
        let ls = labels(&mut rng, rows, vocab, 0.1);
        let a = run_gpu(ctx, DType::F32, &xs, &ls, vocab, 1.0)?;
        let b = run_gpu(ctx, DType::F32, &xs, &ls, vocab, 1.0)?;
        assert_eq!(a.mean.to_bits(), b.mean.to_bits());
        assert_eq!(a.dlogits_fused, b.dlogits_fused);
        Ok(())
    });
}

#[test]
fn wrong_shapes_are_errors_naming_the_kernel() {
    on_every_device("cross-entropy errors", |ctx| {
        let x = ctx.buffer(4 * 10, "x")?;
        let l = ctx.buffer(4 * 2, "l")?;
        let small = ctx.buffer(4, "small")?;
        let two = ctx.buffer(8, "two")?;
        let mut rec = ctx.recorder(false)?;
        let ce = CrossEntropy { logits: x.view(), labels: l.view(), rows: 2, vocab: 4, dtype: DType::F32 };
        let e = loss::forward(&mut rec, &ce, two.view(), two.view()).unwrap_err();
        assert!(matches!(&e, VkError::Kernel { kernel, .. } if kernel == "loss/cross_entropy:fwd"), "{e}");
        let ce = CrossEntropy { vocab: 5, ..ce };
        let e = loss::forward_backward(&mut rec, &ce, small.view(), small.view(), two.view(), small.view(), x.view())
            .unwrap_err();
        assert!(
            matches!(&e, VkError::Kernel { kernel, message } if kernel == "loss/cross_entropy:fwd_bwd" && message.contains("lse")),
            "{e}"
        );
        // 40 bytes are [2, 10] bf16 logits; dlogits must match them (8 bytes do not).
        let ce16 = CrossEntropy { vocab: 10, dtype: DType::BF16, ..ce };
        let e = loss::backward(&mut rec, &ce16, two.view(), small.view(), small.view(), two.view()).unwrap_err();
        assert!(
            matches!(&e, VkError::Kernel { kernel, message } if kernel == "loss/cross_entropy_bwd:bf16" && message.contains("dlogits")),
            "{e}"
        );
        let e = loss::backward(&mut rec, &ce, two.view(), small.view(), small.view(), two.view()).unwrap_err();
        assert!(matches!(&e, VkError::Kernel { kernel, .. } if kernel == "loss/cross_entropy_bwd"), "{e}");
        let e = loss::mean_loss(&mut rec, two.view(), two.view(), small.view()).unwrap_err();
        assert!(matches!(&e, VkError::Kernel { kernel, .. } if kernel == "loss/mean"), "{e}");
        rec.submit()?;
        Ok(())
    });
}
