//! Tape gradient of `embedding` against the f64 reference. The loss is sum(out * w) for a
//! fixed random w (so dL/dout = w), formed from `broadcast::mul` and `reduce::sum`.

use vkformers_kernels::embedding::reference;
use vkformers_kernels::testutil::{assert_close, f64s, Rng, TOL_F32};
use vkformers_tensor::ops::embedding::embedding;
use vkformers_tensor::ops::{broadcast, reduce, shape};
use vkformers_tensor::{Graph, Result, Tensor};
use vkformers_vk::testing::on_every_device;

/// `loss [1] = sum(out * w)` from the library's own ops (so dL/dout = w); `w` holds as many
/// elements as `out`, in any shape.
fn dot_loss(g: &Graph<'_>, out: &Tensor, w: &Tensor) -> Result<Tensor> {
    reduce::sum(g, &broadcast::mul(g, out, &shape::reshape(g, w, out.shape())?)?)
}

const VOCAB: usize = 11;
const DIM: usize = 13;
const IDS_SHAPE: [usize; 2] = [3, 7];

/// Random ids in `[0, VOCAB)` with repeats, plus one out-of-range id (-1) and one `VOCAB`.
fn ids(rng: &mut Rng) -> Vec<i32> {
    let mut ids: Vec<i32> = (0..IDS_SHAPE[0] * IDS_SHAPE[1]).map(|_| rng.below(VOCAB) as i32).collect();
    ids[4] = -1;
    ids[9] = VOCAB as i32;
    ids[10] = ids[2];
    ids
}

/// A test's inputs drawn from `rng` (table, then loss weights, then ids): the table W
/// `[VOCAB, DIM]` (a parameter), the ids `IDS_SHAPE` and the loss weights l `[n·DIM]`, with
/// their host values.
struct Inputs {
    wv: Vec<f32>,
    lv: Vec<f32>,
    idv: Vec<i32>,
    w: Tensor,
    ids: Tensor,
    l: Tensor,
}

fn inputs(g: &Graph<'_>, rng: &mut Rng) -> Result<Inputs> {
    let n = IDS_SHAPE[0] * IDS_SHAPE[1];
    let (wv, lv, idv) = (rng.vec(VOCAB * DIM, 1.0), rng.vec(n * DIM, 1.0), ids(rng));
    let w = g.parameter(&wv, &[VOCAB, DIM])?;
    let ids = g.ints(&idv, &IDS_SHAPE)?;
    let l = g.constant(&lv, &[n * DIM])?;
    Ok(Inputs { wv, lv, idv, w, ids, l })
}

#[test]
fn embedding_matches_reference() {
    on_every_device("tensor embedding", |ctx| {
        let g = Graph::new(ctx);
        let Inputs { wv, lv, idv, w, ids, l } = inputs(&g, &mut Rng::new(5))?;
        let out = embedding(&g, &w, &ids)?;
        assert_eq!(out.shape(), &[IDS_SHAPE[0], IDS_SHAPE[1], DIM]);
        g.backward(&dot_loss(&g, &out, &l)?)?;
        let want = reference::embedding(&f64s(&wv), &idv, VOCAB, DIM);
        assert_close("out", &g.read(&out)?, &want, TOL_F32);
        let want_dw = reference::embedding_backward(&f64s(&lv), &idv, VOCAB, DIM);
        assert_close("dW", &g.read(&w.grad().expect("dW"))?, &want_dw, TOL_F32);
        Ok(())
    });
}

/// Two forward + backward passes give exactly twice the gradient of one.
#[test]
fn embedding_gradient_accumulates() {
    on_every_device("tensor embedding accumulate", |ctx| {
        let g = Graph::new(ctx);
        let Inputs { w, ids, l, .. } = inputs(&g, &mut Rng::new(6))?;
        let mut passes = Vec::new();
        for _ in 0..2 {
            let out = embedding(&g, &w, &ids)?;
            g.backward(&dot_loss(&g, &out, &l)?)?;
            passes.push(g.read(&w.grad().expect("dW"))?);
        }
        let doubled: Vec<f32> = passes[0].iter().map(|v| 2.0 * v).collect();
        assert_eq!(passes[1], doubled);
        Ok(())
    });
}
