//! Embedding: the f64 reference backward against finite differences, then the GPU gather and
//! the deterministic scatter-add backward against the reference, on every device with
//! validation on. Ids repeat (within and across 256-token chunks) and some are out of range.
//! The table, output and dout are stored in f32, f16 or bf16 (rounded on the host, the reference
//! computed on the rounded values); dW is f32.

use vkformers_kernels::dtype::DType;
use vkformers_kernels::embedding::{self, reference, Embedding};
use vkformers_kernels::testutil::storage::{alloc, read, round, supported, upload};
use vkformers_kernels::testutil::{assert_close, assert_grad_matches_fd, f64s, Rng, Tol, TOL_F32};
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
/// W, out and dout are stored in `dt`. Returns the raw bits of `dw` for determinism checks.
fn check(ctx: &Context, rng: &mut Rng, dt: DType, vocab: usize, dim: usize, n: usize) -> Result<Vec<u32>> {
    check_padded(ctx, rng, dt, (vocab, dim, n), None)
}

/// As `check`, with the backward leaving row `padding` without gradient.
fn check_padded(
    ctx: &Context,
    rng: &mut Rng,
    dt: DType,
    (vocab, dim, n): (usize, usize, usize),
    padding: Option<usize>,
) -> Result<Vec<u32>> {
    let padding_idx = padding.map(|r| r as u32);
    let p = Embedding { vocab: vocab as u32, dim: dim as u32, tokens: n as u32, dtype: dt, padding_idx };
    let ws = round(dt, &rng.vec(vocab * dim, 1.0));
    let id = ids(rng, n, vocab);
    let gs = round(dt, &rng.vec(n * dim, 1.0));
    let dw0 = rng.vec(vocab * dim, 1.0);
    let w = upload(ctx, dt, &ws, "w")?;
    let idb = ctx.buffer_from(&id, "ids")?;
    let dout = upload(ctx, dt, &gs, "dout")?;
    let dw = ctx.buffer_from(&dw0, "dw")?;
    let out = alloc(ctx, dt, n * dim, "out")?;
    // The widening gather of a 16-bit table into f32 rows (inference), f32: the plain one.
    let wide = ctx.buffer_from(&vec![f32::NAN; n * dim], "wide out")?;
    let scratch = ctx.buffer(embedding::backward_scratch_bytes(p.vocab, p.tokens), "scratch")?;
    let mut rec = ctx.recorder(false)?;
    embedding::embedding_forward(&mut rec, &p, w.view(), idb.view(), out.view())?;
    embedding::embedding_forward_wide(&mut rec, &p, w.view(), idb.view(), wide.view())?;
    embedding::embedding_backward(&mut rec, &p, idb.view(), dout.view(), dw.view(), scratch.view())?;
    rec.submit()?;
    let what = format!("embedding {dt:?} V {vocab} D {dim} N {n}");
    let out_ref = reference::embedding(&f64s(&ws), &id, vocab, dim);
    // A gather copies stored values: exact in every storage type.
    let exact = Tol { abs: 0.0, rel: 0.0 };
    assert_close(&format!("{what}: out"), &read(ctx, dt, &out)?, &out_ref, exact);
    assert_close(&format!("{what}: out widened to f32"), &ctx.read_vec::<f32>(wide.view())?, &out_ref, exact);
    let grad = reference::embedding_backward_padded(&f64s(&gs), &id, vocab, dim, padding);
    let want: Vec<f64> = grad.iter().zip(&dw0).map(|(g, &a)| g + f64::from(a)).collect();
    assert_close(&format!("{what}: dw"), &ctx.read_vec::<f32>(dw.view())?, &want, TOL_F32);
    ctx.read_vec(dw.view())
}

fn odd_shapes_in(dt: DType, seed: u64) {
    on_every_device(&format!("embedding {dt:?}"), |ctx| {
        if !supported(ctx, dt, "embedding") {
            return Ok(());
        }
        let mut rng = Rng::new(seed);
        // (vocab, dim, tokens): size-1 edges, heavy repeats, several 256-token chunks, a vocab
        // above 65_535 (the scan's slices), dims around the workgroup size.
        for (v, d, n) in [(1, 1, 1), (5, 3, 17), (3, 129, 600), (37, 65, 300), (1000, 7, 1001), (70_001, 2, 300)] {
            check(ctx, &mut rng, dt, v, d, n)?;
        }
        Ok(())
    });
}

#[test]
fn gpu_matches_reference_on_odd_shapes() {
    odd_shapes_in(DType::F32, 21);
}

#[test]
fn gpu_f16_matches_reference_on_odd_shapes() {
    odd_shapes_in(DType::F16, 31);
}

#[test]
fn gpu_bf16_matches_reference_on_odd_shapes() {
    odd_shapes_in(DType::BF16, 41);
}

/// `padding_idx` (torch's `nn.Embedding(padding_idx=..)`): its row gets no gradient however often
/// it occurs (`dw` keeps its starting value there), every other row as without it.
#[test]
fn padding_idx_row_gets_no_gradient() {
    on_every_device("embedding padding_idx", |ctx| {
        let mut rng = Rng::new(23);
        for (v, d, n, pad) in [(5, 3, 17, 0), (37, 65, 300, 36), (3, 129, 600, 1)] {
            check_padded(ctx, &mut rng, DType::F32, (v, d, n), Some(pad))?;
        }
        Ok(())
    });
    let (dout, ids) = ([1.0, 2.0, 3.0, 4.0, 5.0, 6.0], [2, 0, 2]);
    let dw = reference::embedding_backward_padded(&dout, &ids, 3, 2, Some(2));
    assert_eq!(dw, vec![3.0, 4.0, 0.0, 0.0, 0.0, 0.0], "row 2 is padding: no gradient");
}

#[test]
fn backward_is_deterministic() {
    on_every_device("embedding determinism", |ctx| {
        let a = check(ctx, &mut Rng::new(22), DType::F32, 7, 33, 2000)?;
        let b = check(ctx, &mut Rng::new(22), DType::F32, 7, 33, 2000)?;
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
        let p = Embedding { vocab: 3, dim: 4, tokens: 3, dtype: DType::F32, padding_idx: None };
        let e = embedding::embedding_forward(&mut rec, &p, w.view(), id.view(), out.view()).unwrap_err();
        assert!(matches!(&e, VkError::Kernel { kernel, .. } if kernel == "embedding/gather"), "{e}");
        let p = Embedding { vocab: 3, dim: 4, tokens: 2, dtype: DType::F32, padding_idx: None };
        let e = embedding::embedding_backward(&mut rec, &p, id.view(), out.view(), w.view(), id.view()).unwrap_err();
        assert!(e.to_string().contains("scratch"), "{e}");
        // 8 f32 are 16 bf16: a bf16 gather of [2, 4] rejects them as its output.
        let p = Embedding { dtype: DType::BF16, ..p };
        let e = embedding::embedding_forward(&mut rec, &p, w.slice(0, 24), id.view(), out.view()).unwrap_err();
        assert!(
            matches!(&e, VkError::Kernel { kernel, message } if kernel == "embedding/gather:bf16" && message.contains("out")),
            "{e}"
        );
        rec.submit()?;
        Ok(())
    });
}
