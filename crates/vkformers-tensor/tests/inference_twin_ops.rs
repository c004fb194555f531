//! 16-bit twins in inference: inside `Graph::inference` under autocast, on rows a GEMM
//! multiplies, RMSNorm (with or without the residual add before it) and the GLU write the 16-bit
//! copy of their f32 output themselves, as in training, so the products that read them (a
//! decoder layer's packed q/k/v, gate/up and down) run no cast. The copy is the cast's rounding
//! exactly: the same bits as plain `no_grad`, which keeps no copies and casts before each
//! product. On the GEMV's few rows (decoding) nothing is written twice: the GEMV reads f32.

mod common;

use vkformers_kernels::glu::Glu;
use vkformers_tensor::ops::cast::autocast_copy;
use vkformers_tensor::ops::matmul::linear;
use vkformers_tensor::ops::{broadcast, glu, norm};
use vkformers_tensor::{DType, Graph, Result, Tensor};
use vkformers_vk::testing::on_every_device;

use common::casts_of;

/// A decoder layer's MLP half on `rows` rows, as decoding runs it past the attention: `h = x +
/// a`, `y = RMSNorm(h) · g`, `[gate | up] = y · W_guᵀ` (one packed product), `m = down(glu)`,
/// then the next layer's input norm of `h + m` read by its q/k/v product. Returns the output's
/// bits and the cast dispatches, run inside `Graph::inference` (`keep`) or plain `no_grad`.
fn mlp_block(g: &Graph<'_>, dt: DType, rows: usize, keep: bool) -> Result<(Vec<u32>, u64)> {
    let (d, i) = (24, 20);
    let mut rng = vkformers_kernels::testutil::Rng::new(31);
    g.set_autocast(Some(dt));
    let x0 = g.constant(&rng.vec(rows * d, 1.0), &[rows, d])?;
    let a0 = g.constant(&rng.vec(rows * d, 1.0), &[rows, d])?;
    let gain = g.parameter(&rng.vec(d, 1.0), &[d])?;
    let w_gu = g.parameter(&rng.vec(2 * i * d, 0.5), &[2 * i, d])?;
    let w_down = g.parameter(&rng.vec(d * i, 0.5), &[d, i])?;
    let w_qkv = g.parameter(&rng.vec(3 * d * d, 0.5), &[3 * d, d])?;
    for w in [&w_gu, &w_down, &w_qkv] {
        autocast_copy(g, w, dt)?; // the weights' copies, outside the counts
    }
    let block = || -> Result<Vec<f32>> {
        // Activations (a constant's copy would be kept as a weight's is).
        let (x, a) = (broadcast::scale(g, &x0, 1.0)?, broadcast::scale(g, &a0, 1.0)?);
        let (h, y) = norm::add_rms_norm(g, (&x, &a), Some(&gain), 1e-5, false)?;
        let gate_up = linear(g, &y, &w_gu, None)?;
        let m = linear(g, &glu::glu_fused(g, &gate_up, Glu::SwiGlu)?, &w_down, None)?;
        let (_, next) = norm::add_rms_norm(g, (&h, &m), Some(&gain), 1e-5, false)?;
        let first = norm::rms_norm(g, &x, Some(&gain), 1e-5, false)?;
        let q = broadcast::add(g, &linear(g, &next, &w_qkv, None)?, &linear(g, &first, &w_qkv, None)?)?;
        g.read(&q)
    };
    let (casts, y) = casts_of(g, || if keep { g.inference(block) } else { g.no_grad(block) })?;
    Ok((y.iter().map(|v| v.to_bits()).collect(), casts))
}

#[test]
fn inference_products_read_norm_and_glu_twins_without_a_cast() {
    on_every_device("inference twins", |ctx| {
        for dt in [DType::BF16, DType::F16] {
            // 19 rows: GEMMs, not the few-row f32 GEMV.
            let (kept, plain) =
                (mlp_block(&Graph::new(ctx), dt, 19, true)?, mlp_block(&Graph::new(ctx), dt, 19, false)?);
            assert_eq!(kept.0, plain.0, "{dt:?}: the same bits with and without the twins");
            // no_grad casts y, the GLU's output, next and first before their products (4); the
            // twins leave none.
            assert_eq!((kept.1, plain.1), (0, 4), "{dt:?}: cast dispatches with and without the twins");
        }
        Ok(())
    });
}

#[test]
fn decoding_rows_write_no_twin() {
    on_every_device("inference twins, GEMV rows", |ctx| {
        let g = Graph::new(ctx);
        g.set_autocast(Some(DType::BF16));
        let x: Tensor = g.constant(&vkformers_kernels::testutil::Rng::new(2).vec(2 * 24, 1.0), &[2, 24])?;
        let x = broadcast::scale(&g, &x, 1.0)?;
        let kept = g.inference(|| -> Result<usize> {
            let _y = norm::rms_norm(&g, &x, None, 1e-5, false)?;
            Ok(g.kept_casts())
        })?;
        // Two rows run on the GEMV (f32 rows) wherever it applies; elsewhere on the GEMM.
        let gemv = vkformers_kernels::matmul::gemv::gemv_applies(2, ctx.caps());
        assert_eq!(kept, usize::from(!gemv), "a twin only where a GEMM reads the rows");
        Ok(())
    });
}
