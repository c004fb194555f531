//! The clamped SwiGLU op (gpt-oss's) in the graph: output and the gradient of a weighted sum
//! against the f64 reference, both layouts, on a [2, 3, 2·5] input crossing both limits.

use vkformers_kernels::moe::clamped_swiglu::{reference, reference_backward, ClampedSwiGlu};
use vkformers_kernels::testutil::{assert_close, f64s, Rng, TOL_F32};
use vkformers_tensor::ops::{broadcast, clamped_swiglu::clamped_swiglu, reduce};
use vkformers_tensor::Graph;
use vkformers_vk::testing::on_every_device;

#[test]
fn clamped_swiglu_op_matches_reference_with_gradients() {
    on_every_device("tensor clamped swiglu", |ctx| {
        let mut rng = Rng::new(41);
        for interleaved in [true, false] {
            let act = ClampedSwiGlu { alpha: 1.702, limit: 1.1, interleaved };
            let (xv, wv) = (rng.vec(2 * 3 * 10, 3.0), rng.vec(2 * 3 * 5, 1.0));
            let g = Graph::new(ctx);
            let x = g.parameter(&xv, &[2, 3, 10])?;
            let out = clamped_swiglu(&g, &x, act)?;
            assert_eq!(out.shape(), &[2, 3, 5]);
            let loss = reduce::sum(&g, &broadcast::mul(&g, &out, &g.constant(&wv, &[2, 3, 5])?)?)?;
            g.backward(&loss)?;
            let what = format!("{act:?}");
            assert_close(&format!("{what}: out"), &g.read(&out)?, &reference(act, &f64s(&xv), 5), TOL_F32);
            let want = reference_backward(act, &f64s(&xv), &f64s(&wv), 5);
            let grad = g.read(&x.grad().expect("a gradient"))?;
            assert_close(&format!("{what}: dgate_up"), &grad, &want, TOL_F32);
        }
        let g = Graph::new(ctx);
        let act = ClampedSwiGlu { alpha: 1.0, limit: 1.0, interleaved: true };
        assert!(clamped_swiglu(&g, &g.full(&[2, 3], 1.0)?, act).is_err(), "odd fused last dim");
        Ok(())
    });
}
