//! The multi-tensor gradient norm (`optim/sum_squares_multi` + `optim/norm_clip`) on every
//! device vs the f64 reference and vs the per-buffer path, with validation on.

use vkformers_kernels::elementwise;
use vkformers_kernels::optim::{self, grad_norm_multi as multi, reference, LossScale};
use vkformers_kernels::testutil::{assert_close, f64s, Rng, TOL_F32};
use vkformers_vk::testing::on_every_device;
use vkformers_vk::{Buffer, BufferView, Context, Result, VkError};

/// Gradients of `sizes` as views of one buffer (consecutive, 4-byte aligned only).
struct Grads {
    data: Vec<Vec<f32>>,
    buf: Buffer,
}

impl Grads {
    fn new(ctx: &Context, rng: &mut Rng, sizes: &[usize]) -> Result<Self> {
        let data: Vec<Vec<f32>> = sizes.iter().map(|&n| rng.vec(n, 1.0)).collect();
        let flat: Vec<f32> = data.concat();
        Ok(Grads { buf: ctx.buffer_from(&flat, "grads")?, data })
    }

    fn views(&self) -> Vec<BufferView<'_>> {
        let mut at = 0;
        self.data
            .iter()
            .map(|d| {
                let v = self.buf.slice(at, d.len() as u64 * 4);
                at += d.len() as u64 * 4;
                v
            })
            .collect()
    }

    fn want_norm(&self) -> f64 {
        let g64: Vec<Vec<f64>> = self.data.iter().map(|d| f64s(d)).collect();
        reference::global_norm(&g64.iter().map(Vec::as_slice).collect::<Vec<_>>())
    }
}

/// (norm, coef) of `views` by the multi-tensor path, with the batch's dispatch count.
fn multi_norm(ctx: &Context, views: &[BufferView<'_>], max: f32, ls: LossScale) -> Result<(f32, f32, usize)> {
    let scratch = ctx.buffer(multi::scratch_len(views) * 4, "scratch")?;
    let (norm, coef) = (ctx.buffer(4, "norm")?, ctx.buffer(4, "coef")?);
    let mut rec = ctx.recorder(false)?;
    multi::grad_norm_multi_scaled(&mut rec, views, scratch.view(), max, norm.view(), coef.view(), ls)?;
    let report = rec.submit()?;
    Ok((ctx.read_vec::<f32>(norm.view())?[0], ctx.read_vec::<f32>(coef.view())?[0], report.dispatches))
}

#[test]
fn multi_tensor_norm_and_coef_match_reference() {
    on_every_device("multi-tensor grad norm", |ctx| {
        let mut rng = Rng::new(21);
        // One element; odd sizes; a buffer of several chunks with a short last one; more than
        // 128 chunks of one buffer.
        let cases: [(&[usize], f32); 4] =
            [(&[1], 0.1), (&[7, 1, 16_385, 1001], 1.0), (&[70_001, 3], 1e4), (&[4_194_311, 40_001, 5], 1.0)];
        for (sizes, max) in cases {
            let grads = Grads::new(ctx, &mut rng, sizes)?;
            let (norm, coef, _) = multi_norm(ctx, &grads.views(), max, LossScale::NONE)?;
            let want = grads.want_norm();
            let want_coef = reference::clip_coef(want, f64::from(max));
            assert_close(&format!("norm {sizes:?}"), &[norm], &[want], TOL_F32);
            assert_close(&format!("coef {sizes:?}"), &[coef], &[want_coef], TOL_F32);
            if want_coef == 1.0 {
                assert_eq!(coef, 1.0, "no clipping below max_norm");
            }
        }
        Ok(())
    });
}

#[test]
fn thousands_of_buffers_take_two_dispatches() {
    on_every_device("multi-tensor grad norm, 5000 buffers", |ctx| {
        let mut rng = Rng::new(22);
        // 5000 entries: a table of 80,000 bytes, written by two update commands.
        let sizes: Vec<usize> = (0..5000).map(|i| 1 + (i * 37) % 301).collect();
        let grads = Grads::new(ctx, &mut rng, &sizes)?;
        let (norm, _, dispatches) = multi_norm(ctx, &grads.views(), 1.0, LossScale::NONE)?;
        assert_close("norm of 5000 buffers", &[norm], &[grads.want_norm()], TOL_F32);
        assert_eq!(dispatches, 2 + 2, "two table updates, sum_squares_multi, norm_clip");
        Ok(())
    });
}

#[test]
fn multi_tensor_norm_agrees_with_the_per_buffer_path_and_is_deterministic() {
    on_every_device("multi-tensor grad norm determinism", |ctx| {
        let mut rng = Rng::new(23);
        let grads = Grads::new(ctx, &mut rng, &[100_003, 5, 65_536, 32_769])?;
        let views = grads.views();
        let partials = ctx.buffer(optim::partials_len(&views) * 4, "partials")?;
        let (norm, coef) = (ctx.buffer(4, "norm")?, ctx.buffer(4, "coef")?);
        let mut rec = ctx.recorder(false)?;
        optim::grad_norm(&mut rec, &views, partials.view(), 1.0, norm.view(), coef.view())?;
        rec.submit()?;
        let per_buffer = ctx.read_vec::<f32>(norm.view())?[0];
        let mut bits = Vec::new();
        for _ in 0..3 {
            bits.push(multi_norm(ctx, &views, 1.0, LossScale::NONE)?.0.to_bits());
        }
        assert!(bits.windows(2).all(|w| w[0] == w[1]), "{bits:?}");
        // Two f32 summation orders of ~200K squares: a few ulps apart.
        let multi = f32::from_bits(bits[0]);
        assert!((multi - per_buffer).abs() <= 4e-6 * per_buffer, "multi {multi} vs per-buffer {per_buffer}");
        Ok(())
    });
}

#[test]
fn workgroups_striding_over_the_chunks_give_the_same_partials() {
    on_every_device("multi-tensor grad norm strided", |ctx| {
        // 3 + 1 + 2 chunks on 1, 2 and 4 workgroups (a 1.1B model has more chunks than
        // workgroups on some devices): the same partial sums, bit for bit.
        let mut rng = Rng::new(26);
        let c = multi::CHUNK as usize;
        let grads = Grads::new(ctx, &mut rng, &[2 * c + 5, 9, c + 1])?;
        let views = grads.views();
        let scratch = ctx.buffer(multi::scratch_len(&views) * 4, "scratch")?;
        let (table, partials) = (scratch.slice(0, 48), scratch.slice(48, scratch.size() - 48));
        let mut all = Vec::new();
        for groups in [u32::MAX, 1, 2, 4] {
            let mut rec = ctx.recorder(false)?;
            let chunks = multi::sum_squares_multi_in(&mut rec, &views, table, partials, groups.min(65_535))?;
            rec.submit()?;
            assert_eq!(chunks, 6);
            all.push(ctx.read_vec::<u32>(scratch.slice(48, 24))?);
        }
        assert!(all.windows(2).all(|w| w[0] == w[1]), "{all:?}");
        Ok(())
    });
}

#[test]
fn loss_scaled_norm_unscales_and_flags_overflow() {
    on_every_device("multi-tensor grad norm, loss scaling", |ctx| {
        let mut rng = Rng::new(24);
        let grads = Grads::new(ctx, &mut rng, &[33, 40_000])?;
        let ls = LossScale { scale: 1024.0, skip_nonfinite: true };
        let (norm, coef, _) = multi_norm(ctx, &grads.views(), 1.0, ls)?;
        // The buffers hold 1024 x the true gradients: the norm is the true one / 1024.
        let want = grads.want_norm() / 1024.0;
        assert_close("unscaled norm", &[norm], &[want], TOL_F32);
        assert_close("unscaling clip coef", &[coef], &[reference::clip_coef(want, 1.0) / 1024.0], TOL_F32);
        let inf = ctx.buffer_from(&[1.0f32, f32::INFINITY, 2.0], "inf")?;
        let (_, coef, _) = multi_norm(ctx, &[grads.views()[0], inf.view()], 1.0, ls)?;
        assert_eq!(coef, -1.0, "overflow skips the step");
        Ok(())
    });
}

#[test]
fn indirect_reads_order_a_later_write_of_a_gradient() {
    on_every_device("multi-tensor grad norm hazards", |ctx| {
        let mut rng = Rng::new(25);
        let grads = Grads::new(ctx, &mut rng, &[300, 70_000])?;
        let views = grads.views();
        let scratch = ctx.buffer(multi::scratch_len(&views) * 4, "scratch")?;
        let (table, partials) = (scratch.slice(0, 32), scratch.slice(32, scratch.size() - 32));
        let mut rec = ctx.recorder(false)?;
        let chunks = multi::sum_squares_multi(&mut rec, &views, table, partials)?;
        // The gradients are only reached through the table: overwriting one must still wait.
        elementwise::fill(&mut rec, views[1], 0.0)?;
        let report = rec.submit()?;
        assert_eq!(chunks, 1 + 3);
        assert_eq!(report.barriers, 2, "table update | sums | fill");
        let sums = ctx.read_vec::<f32>(scratch.slice(32, 16))?;
        let want: f64 = f64s(&grads.data[1]).iter().map(|x| x * x).sum();
        assert_close("chunk sums before the fill", &[sums[1..].iter().sum::<f32>()], &[want], TOL_F32);
        Ok(())
    });
}

#[test]
fn bad_arguments_are_errors_naming_the_kernel() {
    on_every_device("multi-tensor grad norm errors", |ctx| {
        let a = ctx.buffer(40, "a")?;
        let small = ctx.buffer(8, "small")?;
        let (norm, coef) = (ctx.buffer(4, "norm")?, ctx.buffer(4, "coef")?);
        let mut rec = ctx.recorder(false)?;
        let named = |e: &VkError| matches!(e, VkError::Kernel { kernel, .. } if kernel == "optim/sum_squares_multi");
        let e = multi::grad_norm_multi_scaled(&mut rec, &[], a.view(), 1.0, norm.view(), coef.view(), LossScale::NONE);
        assert!(e.as_ref().is_err_and(named), "{e:?}");
        let e = multi::grad_norm_multi_scaled(
            &mut rec,
            &[a.view()],
            small.view(),
            1.0,
            norm.view(),
            coef.view(),
            LossScale::NONE,
        );
        assert!(e.as_ref().is_err_and(named), "{e:?}");
        let e = multi::sum_squares_multi(&mut rec, &[a.slice(0, 6)], a.slice(0, 16), small.view());
        assert!(e.as_ref().is_err_and(named), "{e:?}");
        rec.submit()?;
        Ok(())
    });
}
