//! `optim/adamw_multi` (every parameter in one dispatch) against `optim/adamw` run once per
//! parameter: the same bits for the parameters, moments and 16-bit copies, over two steps,
//! with and without the clip coefficient, fresh and stored moments, decay on and off, and a
//! skipped step; bf16 and f16 copies; arrays 16-byte aligned (the kernel's wide path) and not
//! (its element loop). On every device with validation on.

use vkformers_kernels::dtype::DType;
use vkformers_kernels::optim::adamw_multi::{self as multi, MultiParam};
use vkformers_kernels::optim::{self, AdamW, AdamWBuffers, Moments};
use vkformers_kernels::testutil::Rng;
use vkformers_vk::testing::on_every_device;
use vkformers_vk::{Buffer, BufferView, Context, Result, VkError};

/// One parameter's buffers on the device.
struct State {
    p: Buffer,
    g: Buffer,
    m: Buffer,
    v: Buffer,
    copy: Option<Buffer>,
    decay: f64,
    /// Elements before the parameter's first in each of its buffers (1: the f32 arrays start
    /// 4 bytes past 16-byte alignment, the copy 2 bytes past 8).
    off: u64,
    n: u64,
}

impl State {
    fn new(ctx: &Context, rng: &mut Rng, n: usize, copy: bool, decay: f64, off: u64) -> Result<Self> {
        let len = n + off as usize;
        let nan = vec![f32::NAN; len]; // fresh moments are never read
        Ok(State {
            p: ctx.buffer_from(&rng.vec(len, 1.0), "p")?,
            g: ctx.buffer_from(&rng.vec(len, 0.5), "g")?,
            m: ctx.buffer_from(&nan, "m")?,
            v: ctx.buffer_from(&nan, "v")?,
            copy: if copy { Some(ctx.buffer((len as u64 * 2).next_multiple_of(4), "copy")?) } else { None },
            decay,
            off,
            n: n as u64,
        })
    }

    /// The parameter's elements of one of its f32 buffers.
    fn at<'a>(&self, b: &'a Buffer) -> BufferView<'a> {
        b.slice(self.off * 4, self.n * 4)
    }

    /// The parameter's elements of its 16-bit copy.
    fn copy_view(&self) -> Option<BufferView<'_>> {
        self.copy.as_ref().map(|c| c.slice(self.off * 2, self.n * 2))
    }

    fn bits(&self, ctx: &Context) -> Result<Vec<Vec<u32>>> {
        let mut out = vec![];
        for b in [&self.p, &self.m, &self.v].into_iter().chain(self.copy.as_ref()) {
            out.push(ctx.read_vec::<u32>(b.view())?);
        }
        Ok(out)
    }
}

/// Parameters of these sizes (every third without weight decay, every other with a copy).
fn states(ctx: &Context, seed: u64, sizes: &[usize], copies: bool) -> Result<Vec<State>> {
    states_at(ctx, seed, sizes, copies, 0)
}

/// [`states`] with each parameter `off` elements into its buffers.
fn states_at(ctx: &Context, seed: u64, sizes: &[usize], copies: bool, off: u64) -> Result<Vec<State>> {
    let mut rng = Rng::new(seed);
    let decay = |i: usize| if i % 3 == 2 { 0.0 } else { 0.1 };
    sizes.iter().enumerate().map(|(i, &n)| State::new(ctx, &mut rng, n, copies && i % 2 == 0, decay(i), off)).collect()
}

/// Steps `1..=steps` of both paths; `scale` is the clip coefficient (None: unscaled).
fn run(ctx: &Context, ss: &[State], multi_path: bool, scale: Option<f32>, steps: u64) -> Result<()> {
    run_on(ctx, ss, (multi_path.then_some(u32::MAX), DType::BF16), scale, steps)
}

/// [`run`], the multi-tensor path on at most `groups` workgroups (None: the per-parameter path),
/// the copies in `copy_dt` (where the device has 16-bit storage).
fn run_on(
    ctx: &Context,
    ss: &[State],
    (groups, copy_dt): (Option<u32>, DType),
    scale: Option<f32>,
    steps: u64,
) -> Result<()> {
    let hp = AdamW { lr: 1e-2, weight_decay: 0.5, ..AdamW::default() };
    let coef = ctx.buffer_from(&[scale.unwrap_or(1.0)], "coef")?;
    let grad_scale = scale.map(|_| coef.view());
    let dt = ctx.caps().fp16.then_some(copy_dt);
    let table = ctx.buffer(ss.len() as u64 * multi::ENTRY_BYTES, "table")?;
    for step in 1..=steps {
        let moments = if step == 1 { Moments::Fresh } else { Moments::Stored };
        let mut rec = ctx.recorder(false)?;
        if let Some(max_groups) = groups {
            let ps: Vec<MultiParam<'_>> = ss
                .iter()
                .map(|s| MultiParam {
                    param: s.at(&s.p),
                    grad: s.at(&s.g),
                    exp_avg: s.at(&s.m),
                    exp_avg_sq: s.at(&s.v),
                    copy: s.copy_view().filter(|_| dt.is_some()),
                    weight_decay: s.decay,
                    moments,
                })
                .collect();
            let max_groups = max_groups.min(65_535);
            multi::adamw_step_multi_in(&mut rec, &ps, (dt, grad_scale), table.view(), &hp, step, max_groups)?;
        } else {
            for s in ss {
                let bufs = AdamWBuffers {
                    param: s.at(&s.p),
                    grad: s.at(&s.g),
                    exp_avg: s.at(&s.m),
                    exp_avg_sq: s.at(&s.v),
                    grad_scale,
                };
                let copy = s.copy_view().zip(dt);
                let hp = AdamW { weight_decay: s.decay, ..hp };
                optim::adamw_step_from(&mut rec, &bufs, copy, &hp, step, moments)?;
            }
        }
        rec.submit()?;
    }
    Ok(())
}

fn same_bits(ctx: &Context, sizes: &[usize], scale: Option<f32>, copies: bool) -> Result<()> {
    same_bits_at(ctx, sizes, scale, copies, (0, DType::BF16))
}

/// [`same_bits`] with each parameter `off` elements into its buffers and copies in `copy_dt`.
fn same_bits_at(
    ctx: &Context,
    sizes: &[usize],
    scale: Option<f32>,
    copies: bool,
    (off, copy_dt): (u64, DType),
) -> Result<()> {
    let (a, b) = (states_at(ctx, 7, sizes, copies, off)?, states_at(ctx, 7, sizes, copies, off)?);
    run_on(ctx, &a, (Some(u32::MAX), copy_dt), scale, 2)?;
    run_on(ctx, &b, (None, copy_dt), scale, 2)?;
    for (i, (x, y)) in a.iter().zip(&b).enumerate() {
        assert!(x.bits(ctx)? == y.bits(ctx)?, "sizes {sizes:?} scale {scale:?}: parameter {i} differs");
    }
    Ok(())
}

#[test]
fn one_dispatch_for_all_parameters_gives_the_per_parameter_bits() {
    on_every_device("adamw multi", |ctx| {
        // One element; sizes around a chunk; a parameter of several chunks, the last short.
        let c = multi::CHUNK as usize;
        same_bits(ctx, &[1, c - 1, c, c + 1, 37, 4 * c + 17], None, true)?;
        same_bits(ctx, &[300, 1, 9000], Some(0.25), true)?;
        same_bits(ctx, &[5, 2 * c + 1], Some(1.0), false)?;
        Ok(())
    });
}

/// Arrays off 16-byte alignment take the element loop, f16 copies the wide path's f16 stores:
/// both the per-parameter kernel's bits.
#[test]
fn unaligned_arrays_and_f16_copies_give_the_per_parameter_bits() {
    on_every_device("adamw multi unaligned, f16", |ctx| {
        let c = multi::CHUNK as usize;
        same_bits_at(ctx, &[7, c + 5, 300], Some(0.5), true, (1, DType::BF16))?;
        same_bits_at(ctx, &[1, c + 3, 37, 2 * c + 17], Some(0.25), true, (0, DType::F16))
    });
}

#[test]
fn workgroups_striding_over_the_chunks_give_the_same_bits() {
    on_every_device("adamw multi strided", |ctx| {
        // 2 + 1 + 4 chunks on 2 workgroups (a 1.1B model has more chunks than workgroups).
        let c = multi::CHUNK as usize;
        let sizes = [c + 3, 17, 3 * c + 1];
        let (a, b) = (states(ctx, 9, &sizes, true)?, states(ctx, 9, &sizes, true)?);
        run_on(ctx, &a, (Some(2), DType::BF16), Some(0.5), 2)?;
        run_on(ctx, &b, (None, DType::BF16), Some(0.5), 2)?;
        for (i, (x, y)) in a.iter().zip(&b).enumerate() {
            assert!(x.bits(ctx)? == y.bits(ctx)?, "parameter {i} differs with 2 workgroups");
        }
        Ok(())
    });
}

#[test]
fn a_skipped_step_changes_nothing_but_zeroes_fresh_moments() {
    on_every_device("adamw multi skip", |ctx| {
        let ss = states(ctx, 8, &[3, 5000], true)?;
        let before: Vec<Vec<u32>> = ss.iter().map(|s| ctx.read_vec::<u32>(s.p.view())).collect::<Result<_>>()?;
        run(ctx, &ss, true, Some(-1.0), 1)?;
        for (s, p0) in ss.iter().zip(&before) {
            let b = s.bits(ctx)?;
            assert_eq!(&b[0], p0, "parameter unchanged");
            assert!(b[1].iter().chain(&b[2]).all(|&x| x == 0), "fresh moments zero after a skipped step");
        }
        Ok(())
    });
}

#[test]
fn mismatched_buffers_are_errors_naming_the_kernel() {
    on_every_device("adamw multi errors", |ctx| {
        let (a, b) = (ctx.buffer(40, "a")?, ctx.buffer(36, "b")?);
        let table = ctx.buffer(64, "table")?;
        let p = MultiParam {
            param: a.view(),
            grad: a.view(),
            exp_avg: a.view(),
            exp_avg_sq: b.view(),
            copy: None,
            weight_decay: 0.0,
            moments: Moments::Stored,
        };
        let mut rec = ctx.recorder(false)?;
        let hp = AdamW::default();
        let e = multi::adamw_step_multi(&mut rec, &[p], None, None, table.view(), &hp, 1).unwrap_err();
        assert!(
            matches!(&e, VkError::Kernel { kernel, message } if kernel == "optim/adamw_multi:plain" && message.contains("exp_avg_sq")),
            "{e}"
        );
        let p = MultiParam { exp_avg_sq: a.view(), ..p };
        assert!(multi::adamw_step_multi(&mut rec, &[p], None, None, table.view(), &hp, 0).is_err());
        let big_table = ctx.buffer(128, "table")?;
        let e = multi::adamw_step_multi(&mut rec, &[p, p], None, None, big_table.view(), &hp, 1).unwrap_err();
        assert!(e.to_string().contains("listed twice"), "{e}");
        let q = MultiParam { param: b.view(), grad: b.view(), exp_avg: b.view(), exp_avg_sq: b.view(), ..p };
        assert!(
            multi::adamw_step_multi(&mut rec, &[p, q], None, None, table.view(), &hp, 1).is_err(),
            "table too small"
        );
        rec.submit()?;
        Ok(())
    });
}
