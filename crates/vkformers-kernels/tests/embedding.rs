//! Embedding: the f64 reference backward against finite differences, then the GPU gather and
//! the deterministic scatter-add backward against the reference, on every device with
//! validation on. Ids repeat (within and across 256-token chunks) and some are out of range.

use vkformers_kernels::embedding::{self, reference, Embedding};
use vkformers_kernels::testutil::{assert_close, assert_grad_matches_fd, f64s, Rng, TOL_F32};
use vkformers_vk::testing::on_every_device;
use vkformers_vk::{Context, Result, VkError};

/// `n` ids, mostly in `[0, vocab)`, about one in 16 out of range (negative or `>= vocab`).
fn ids(rng: &mut Rng, n: usize, vocab: usize) -> Vec<i32> {
    (0..n)
        .map(|_| match rng.below(32) {
            0 => -1 - rng.below(5) as i32,
            1 => (vocab + rng.below(5)) as i32,
            _ => rng.below(vocab) as i32,
        })
        .collect()
}

#[test]
fn reference_backward_matches_finite_differences() {
    let mut rng = Rng::new(20);
    let (vocab, dim) = (4, 3);
    let id = [2, 0, 2, -1, 4, 2, 1];
    let w = f64s(&rng.vec(vocab * dim, 1.0));
    let g = f64s(&rng.vec(id.len() * dim, 1.0));
    let dw = reference::embedding_backward(&g, &id, vocab, dim);
    let f = |ws: &[f64]| reference::embedding(ws, &id, vocab, dim).iter().zip(&g).map(|(a, b)| a * b).sum();
    assert_grad_matches_fd("embedding dw", f, &w, &dw);
}

/// Gather and scatter-add on the GPU; `dw` starts random, so accumulation is checked too.
/// Returns the raw bits of `dw` for determinism checks.
fn check(ctx: &Context, rng: &mut Rng, vocab: usize, dim: usize, n: usize) -> Result<Vec<u32>> {
    let p = Embedding { vocab: vocab as u32, dim: dim as u32, tokens: n as u32 };
    let ws = rng.vec(vocab * dim, 1.0);
    let id = ids(rng, n, vocab);
    let gs = rng.vec(n * dim, 1.0);
    let dw0 = rng.vec(vocab * dim, 1.0);
    let w = ctx.buffer_from(&ws, "w")?;
    let idb = ctx.buffer_from(&id, "ids")?;
    let dout = ctx.buffer_from(&gs, "dout")?;
    let dw = ctx.buffer_from(&dw0, "dw")?;
    let out = ctx.buffer((n * dim * 4) as u64, "out")?;
    let scratch = ctx.buffer(embedding::backward_scratch_bytes(p.vocab, p.tokens), "scratch")?;
    let mut rec = ctx.recorder(false)?;
    embedding::embedding_forward(&mut rec, &p, w.view(), idb.view(), out.view())?;
    embedding::embedding_backward(&mut rec, &p, idb.view(), dout.view(), dw.view(), scratch.view())?;
    rec.submit()?;
    let what = format!("embedding V {vocab} D {dim} N {n}");
    let out_ref = reference::embedding(&f64s(&ws), &id, vocab, dim);
    assert_close(&format!("{what}: out"), &ctx.read_vec::<f32>(out.view())?, &out_ref, TOL_F32);
    let grad = reference::embedding_backward(&f64s(&gs), &id, vocab, dim);
    let want: Vec<f64> = grad.iter().zip(&dw0).map(|(g, &a)| g + f64::from(a)).collect();
    assert_close(&format!("{what}: dw"), &ctx.read_vec::<f32>(dw.view())?, &want, TOL_F32);
    ctx.read_vec(dw.view())
}

#[test]
fn gpu_matches_reference_on_odd_shapes() {
    on_every_device("embedding", |ctx| {
        let mut rng = Rng::new(21);
        // (vocab, dim, tokens): size-1 edges, heavy repeats, several 256-token chunks, a vocab
        // above 65_535 (the scan's slices), dims around the workgroup size.
        for (v, d, n) in [(1, 1, 1), (5, 3, 17), (3, 129, 600), (37, 65, 300), (1000, 7, 1001), (70_001, 2, 300)] {
            check(ctx, &mut rng, v, d, n)?;
        }
        Ok(())
    });
}

#[test]
fn backward_is_deterministic() {
    on_every_device("embedding determinism", |ctx| {
        let a = check(ctx, &mut Rng::new(22), 7, 33, 2000)?;
        let b = check(ctx, &mut Rng::new(22), 7, 33, 2000)?;
        assert_eq!(a, b, "bitwise different gradients across runs");
        Ok(())
    });
}

#[test]
fn wrong_shapes_are_errors_naming_the_kernel() {
    on_every_device("embedding errors", |ctx| {
        let w = ctx.buffer(4 * 12, "w")?;
        let id = ctx.buffer(4 * 2, "ids")?;
        let out = ctx.buffer(4 * 8, "out")?;
        let mut rec = ctx.recorder(false)?;
        let p = Embedding { vocab: 3, dim: 4, tokens: 3 };
        let e = embedding::embedding_forward(&mut rec, &p, w.view(), id.view(), out.view()).unwrap_err();
        assert!(matches!(&e, VkError::Kernel { kernel, .. } if kernel == "embedding/gather"), "{e}");
        let p = Embedding { vocab: 3, dim: 4, tokens: 2 };
        let e = embedding::embedding_backward(&mut rec, &p, id.view(), out.view(), w.view(), id.view()).unwrap_err();
        assert!(e.to_string().contains("scratch"), "{e}");
        rec.submit()?;
        Ok(())
    });
}
