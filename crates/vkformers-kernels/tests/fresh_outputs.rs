//! Kernels that write a fresh buffer whole instead of accumulating into a zero-filled one
//! (AdamW's first step with `Moments::Fresh`, the embedding backward's `write_*` variants):
//! from buffers holding garbage (NaN) they give the same bits as the zero fill followed by the
//! accumulating kernel, on every device with validation on.

use vkformers_kernels::dtype::DType;
use vkformers_kernels::elementwise;
use vkformers_kernels::embedding::{self, Embedding};
use vkformers_kernels::optim::{self, AdamW, AdamWBuffers, Moments};
use vkformers_kernels::testutil::storage::{round, supported, upload};
use vkformers_kernels::testutil::Rng;
use vkformers_vk::testing::on_every_device;
use vkformers_vk::{Buffer, Context, Result};

/// A buffer of `n` NaNs: what a fresh kernel must never read.
fn garbage(ctx: &Context, n: usize) -> Result<Buffer> {
    ctx.buffer_from(&vec![f32::NAN; n], "garbage")
}

fn bits(ctx: &Context, b: &Buffer) -> Result<Vec<u32>> {
    ctx.read_vec::<u32>(b.view())
}

/// (param, exp_avg, exp_avg_sq, copy) bits after one step from moments that are `fresh` (NaN
/// buffers, `Moments::Fresh`) or zero-filled (`Moments::Stored`).
fn first_step(ctx: &Context, p0: &[f32], g: &[f32], scale: Option<f32>, fresh: bool) -> Result<[Vec<u32>; 4]> {
    let n = p0.len();
    let (p, gb) = (ctx.buffer_from(p0, "p")?, ctx.buffer_from(g, "g")?);
    let (m, v) = (garbage(ctx, n)?, garbage(ctx, n)?);
    let copy = ctx.buffer((n as u64 * 2).next_multiple_of(4), "copy")?;
    let coef = ctx.buffer_from(&[scale.unwrap_or(1.0)], "coef")?;
    let bufs = AdamWBuffers {
        param: p.view(),
        grad: gb.view(),
        exp_avg: m.view(),
        exp_avg_sq: v.view(),
        grad_scale: scale.map(|_| coef.view()),
    };
    let hp = AdamW::default();
    let mut rec = ctx.recorder(false)?;
    let moments = if fresh {
        Moments::Fresh
    } else {
        elementwise::fill(&mut rec, m.view(), 0.0)?;
        elementwise::fill(&mut rec, v.view(), 0.0)?;
        Moments::Stored
    };
    let copy_view = ctx.caps().fp16.then(|| (copy.view(), DType::BF16));
    optim::adamw_step_from(&mut rec, &bufs, copy_view, &hp, 1, moments)?;
    rec.submit()?;
    Ok([bits(ctx, &p)?, bits(ctx, &m)?, bits(ctx, &v)?, bits(ctx, &copy)?])
}

#[test]
fn adamw_first_step_from_fresh_moments_is_the_zero_filled_step() {
    on_every_device("adamw fresh moments", |ctx| {
        let mut rng = Rng::new(31);
        for (n, scale) in [(1, None), (1001, Some(0.37)), (70_001, None)] {
            let (p0, g) = (rng.vec(n, 1.0), rng.vec(n, 0.5));
            let fresh = first_step(ctx, &p0, &g, scale, true)?;
            let filled = first_step(ctx, &p0, &g, scale, false)?;
            for (what, (a, b)) in ["param", "exp_avg", "exp_avg_sq", "copy"].iter().zip(fresh.iter().zip(&filled)) {
                assert!(a == b, "n {n} scale {scale:?}: {what} differs from the zero-filled step");
            }
        }
        // A skipped step (negative coefficient: an fp16 overflow) leaves fresh moments zero.
        let fresh = first_step(ctx, &[1.0, 2.0, 3.0], &[0.1, 0.2, 0.3], Some(-1.0), true)?;
        assert_eq!(fresh[1], vec![0; 3], "exp_avg after a skipped fresh step");
        assert_eq!(fresh[2], vec![0; 3], "exp_avg_sq after a skipped fresh step");
        assert_eq!(fresh[0], [1.0f32, 2.0, 3.0].map(f32::to_bits).to_vec(), "param unchanged");
        Ok(())
    });
}

/// `dw` bits of the embedding backward: `fresh` from a NaN buffer, else fill + accumulate.
fn embedding_dw(ctx: &Context, p: &Embedding, ids: &[i32], dout: &[f32], fresh: bool) -> Result<Vec<u32>> {
    let idb = ctx.buffer_from(ids, "ids")?;
    let db = upload(ctx, p.dtype, dout, "dout")?;
    let dw = garbage(ctx, (p.vocab * p.dim) as usize)?;
    let scratch = ctx.buffer(embedding::backward_scratch_bytes(p.vocab, p.tokens), "scratch")?;
    let mut rec = ctx.recorder(false)?;
    if fresh {
        embedding::embedding_backward_fresh(&mut rec, p, idb.view(), db.view(), dw.view(), scratch.view())?;
    } else {
        elementwise::fill(&mut rec, dw.view(), 0.0)?;
        embedding::embedding_backward(&mut rec, p, idb.view(), db.view(), dw.view(), scratch.view())?;
    }
    rec.submit()?;
    bits(ctx, &dw)
}

#[test]
fn embedding_backward_into_a_fresh_gradient_is_fill_then_accumulate() {
    on_every_device("embedding backward fresh", |ctx| {
        let mut rng = Rng::new(32);
        for dt in [DType::F32, DType::F16, DType::BF16] {
            if !supported(ctx, dt, "embedding fresh") {
                continue;
            }
            // Repeated ids, ids absent from the batch, out-of-range ids, a padding row, a
            // table wider than one workgroup.
            for (vocab, dim, n, padding) in [(7, 3, 20, None), (50, 33, 301, Some(4)), (1000, 5, 9, Some(0))] {
                let ids: Vec<i32> = (0..n)
                    .map(|i| if i % 17 == 5 { vocab as i32 + 2 } else { (rng.below(vocab / 2 + 1)) as i32 })
                    .collect();
                let dout = round(dt, &rng.vec(n * dim, 1.0));
                let p = Embedding {
                    vocab: vocab as u32,
                    dim: dim as u32,
                    tokens: n as u32,
                    dtype: dt,
                    padding_idx: padding,
                };
                let fresh = embedding_dw(ctx, &p, &ids, &dout, true)?;
                let filled = embedding_dw(ctx, &p, &ids, &dout, false)?;
                assert!(fresh == filled, "{dt:?} V {vocab} D {dim} N {n}: dw differs from fill + accumulate");
                assert!(fresh.iter().any(|&b| b != 0), "the test must write some gradient");
            }
        }
        Ok(())
    });
}
