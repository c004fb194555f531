//! `scatter_rows` (the inverse of the embedding's row gather) and its tape gradient against the
//! f64 references: forward = the embedding backward's scatter-add, backward = the gather. The
//! loss is sum(y * l) for a fixed random l (so dL/dy = l).

use vkformers_kernels::embedding::reference;
use vkformers_kernels::testutil::{assert_close, f64s, Rng, TOL_F32};
use vkformers_tensor::ops::scatter::scatter_rows;
use vkformers_tensor::ops::{broadcast, reduce, shape};
use vkformers_tensor::Graph;
use vkformers_vk::testing::on_every_device;

const ROWS: usize = 9;
const DIM: usize = 7;
const N: usize = 12;

#[test]
fn scatter_rows_matches_reference() {
    on_every_device("tensor scatter_rows", |ctx| {
        let mut rng = Rng::new(17);
        // Repeats (summed), one id out of range on each side (dropped), rows nothing writes (zero).
        let mut idv: Vec<i32> = (0..N).map(|_| rng.below(ROWS) as i32).collect();
        idv[3] = -1;
        idv[7] = ROWS as i32;
        idv[8] = idv[1];
        let (xv, lv) = (rng.vec(N * DIM, 1.0), rng.vec(ROWS * DIM, 1.0));
        let g = Graph::new(ctx);
        let x = g.parameter(&xv, &[N, DIM])?;
        let ids = g.ints(&idv, &[N])?;
        let l = g.constant(&lv, &[ROWS, DIM])?;
        let y = scatter_rows(&g, &x, &ids, ROWS)?;
        assert_eq!(y.shape(), &[ROWS, DIM]);
        g.backward(&reduce::sum(&g, &broadcast::mul(&g, &y, &shape::reshape(&g, &l, &[ROWS, DIM])?)?)?)?;
        let want = reference::embedding_backward(&f64s(&xv), &idv, ROWS, DIM);
        assert_close("y", &g.read(&y)?, &want, TOL_F32);
        let want_dx = reference::embedding(&f64s(&lv), &idv, ROWS, DIM);
        assert_close("dx", &g.read(&x.grad().expect("dx"))?, &want_dx, TOL_F32);
        Ok(())
    });
}
