//! Tape gradients of softmax against the f64 reference (a template for every op test): the
//! loss is sum(softmax(x) * w) for a fixed random w, so dL/dy = w.

use vkformers_kernels::softmax::reference;
use vkformers_kernels::testutil::{assert_close, f64s, Rng, TOL_F32};
use vkformers_tensor::ops::{broadcast, reduce, softmax};
use vkformers_tensor::Graph;
use vkformers_vk::testing::on_every_device;

#[test]
fn softmax_forward_and_tape_gradient_match_reference() {
    on_every_device("tensor softmax", |ctx| {
        let (rows, d) = (5, 37);
        let mut rng = Rng::new(3);
        let (xs, ws) = (rng.vec(rows * d, 3.0), rng.vec(rows * d, 1.0));
        let g = Graph::new(ctx);
        let x = g.parameter(&xs, &[rows, d])?;
        let w = g.constant(&ws, &[rows, d])?;
        let y = softmax::softmax(&g, &x)?;
        let loss = reduce::sum(&g, &broadcast::mul(&g, &y, &w)?)?;
        g.backward(&loss)?;
        let want_y = reference::forward(&f64s(&xs), d);
        assert_close("y", &g.read(&y)?, &want_y, TOL_F32);
        let want_dx = reference::backward(&want_y, &f64s(&ws), d);
        assert_close("dx", &g.read(&x.grad().expect("grad"))?, &want_dx, TOL_F32);
        Ok(())
    });
}
