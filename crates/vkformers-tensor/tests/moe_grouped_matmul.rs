//! `moe::grouped_matmul` (expert blocks used untransposed, DBRX's `w2`) against a host f64
//! reference: the product and both gradients of a weighted sum, on odd shapes (5 tokens, top-2 of
//! 3 experts, in 7, out 6), through the device top-k and grouping.

use vkformers_kernels::moe::reference;
use vkformers_kernels::testutil::{assert_close, f64s, Rng, TOL_F32};
use vkformers_tensor::ops::{broadcast, moe, reduce};
use vkformers_tensor::Graph;
use vkformers_vk::testing::on_every_device;

#[test]
fn grouped_matmul_matches_reference_with_gradients() {
    let (tokens, experts, k, inp, out) = (5, 3, 2, 7, 6);
    on_every_device("tensor moe grouped_matmul", |ctx| {
        let mut rng = Rng::new(8);
        let scores = rng.vec(tokens * experts, 1.0);
        let (xv, wv) = (rng.vec(tokens * k * inp, 1.0), rng.vec(experts * inp * out, 1.0));
        let cv = rng.vec(tokens * k * out, 1.0);
        let g = Graph::new(ctx);
        let choice = moe::topk(&g, &g.constant(&scores, &[tokens, experts])?, k)?;
        let groups = moe::group(&g, &choice.ids, experts)?;
        let slot_expert = slot_experts(&scores, experts, k);
        let (x, w) = (g.parameter(&xv, &[tokens * k, inp])?, g.parameter(&wv, &[experts * inp, out])?);
        let y = moe::grouped_matmul(&g, &x, &w, &groups)?;
        g.backward(&reduce::sum(&g, &broadcast::mul(&g, &y, &g.constant(&cv, &[tokens * k, out])?)?)?)?;
        let w_at = |e: usize, i: usize, o: usize| (e * inp + i) * out + o;
        let [want, dx, dw] = reference_products(&slot_expert, (&xv, &wv, &cv), (inp, out), w_at);
        assert_close("y", &g.read(&y)?, &want, TOL_F32);
        assert_close("dx", &g.read(&x.grad().expect("dx"))?, &dx, TOL_F32);
        assert_close("dw", &g.read(&w.grad().expect("dw"))?, &dw, TOL_F32);
        assert!(moe::grouped_matmul(&g, &x, &g.constant(&wv, &[experts * out, inp])?, &groups).is_err());
        Ok(())
    });
}

/// `moe::grouped_linear` under bf16 autocast: x, W and the upstream gradient are read as bf16
/// (the tensor-core storage of the dense products), f32 accumulation. Inputs are bf16 values
/// already, so the f64 reference sees what the device reads and the f32 tolerance holds; the
/// gradients reach the f32 tensors given.
#[test]
fn grouped_linear_under_bf16_autocast_matches_reference() {
    use vkformers_kernels::testutil::storage::round;
    use vkformers_tensor::DType;
    let (tokens, experts, k, inp, out) = (9, 4, 2, 19, 11);
    on_every_device("tensor moe grouped_linear bf16", |ctx| {
        if vkformers_kernels::testutil::storage::unsupported(ctx, DType::BF16, "grouped_linear") {
            return Ok(());
        }
        let mut rng = Rng::new(21);
        let scores = rng.vec(tokens * experts, 1.0);
        let xv = round(DType::BF16, &rng.vec(tokens * k * inp, 1.0));
        let wv = round(DType::BF16, &rng.vec(experts * out * inp, 1.0));
        let cv = round(DType::BF16, &rng.vec(tokens * k * out, 1.0));
        let g = Graph::new(ctx);
        g.set_autocast(Some(DType::BF16));
        let choice = moe::topk(&g, &g.constant(&scores, &[tokens, experts])?, k)?;
        let groups = moe::group(&g, &choice.ids, experts)?;
        let slot_expert = slot_experts(&scores, experts, k);
        let (x, w) = (g.parameter(&xv, &[tokens * k, inp])?, g.parameter(&wv, &[experts * out, inp])?);
        let y = moe::grouped_linear(&g, &x, &w, &groups)?;
        g.backward(&reduce::sum(&g, &broadcast::mul(&g, &y, &g.constant(&cv, &[tokens * k, out])?)?)?)?;
        let w_at = |e: usize, i: usize, o: usize| (e * out + o) * inp + i;
        let [want, dx, dw] = reference_products(&slot_expert, (&xv, &wv, &cv), (inp, out), w_at);
        assert_close("y", &g.read(&y)?, &want, TOL_F32);
        assert_close("dx", &g.read(&x.grad().expect("dx"))?, &dx, TOL_F32);
        assert_close("dw", &g.read(&w.grad().expect("dw"))?, &dw, TOL_F32);
        Ok(())
    });
}

/// Each slot's expert, by the host reference of the router's choice and the grouping (tested
/// against the device's in the kernel tests).
fn slot_experts(scores: &[f32], experts: usize, k: usize) -> Vec<usize> {
    let (ids, ..) = reference::topk(&f64s(scores), experts, k);
    reference::group(&ids, experts, k).2.iter().map(|&e| e as usize).collect()
}

/// The f64 reference of `y[s] = x[s] · W_e` (e = slot s's expert) and of its gradients for the
/// upstream `c`: `[y, dx, dw]`; `w_at(e, i, o)` is where `W_e[i, o]` sits in `w`.
fn reference_products(
    slot_expert: &[usize],
    (xv, wv, cv): (&[f32], &[f32], &[f32]),
    (inp, out): (usize, usize),
    w_at: impl Fn(usize, usize, usize) -> usize,
) -> [Vec<f64>; 3] {
    let (mut want, mut dx, mut dw) = (vec![0.0; cv.len()], vec![0.0; xv.len()], vec![0.0; wv.len()]);
    for (s, &e) in slot_expert.iter().enumerate() {
        for o in 0..out {
            for i in 0..inp {
                let (xi, wi, yi) = (s * inp + i, w_at(e, i, o), s * out + o);
                want[yi] += f64::from(xv[xi]) * f64::from(wv[wi]);
                dx[xi] += f64::from(cv[yi]) * f64::from(wv[wi]);
                dw[wi] += f64::from(xv[xi]) * f64::from(cv[yi]);
            }
        }
    }
    [want, dx, dw]
}
