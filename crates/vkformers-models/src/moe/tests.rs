//! gpt-oss's biased, clamped experts (`BiasedExperts`) in the MoE block against a dense host
//! reference (every chosen expert computed per token in f64): the output, and the down bias's
//! gradient (`∂/∂d_e Σ y·c = Σ over the tokens that chose e of their weight · c`), on odd sizes
//! (7 tokens, 3 experts, top-2, hidden 6, intermediate 5) with activations past both limits.

use vkformers_kernels::glu::Glu;
use vkformers_kernels::moe::clamped_swiglu::{reference, ClampedSwiGlu};
use vkformers_kernels::testutil::{assert_close, f64s, Rng, TOL_F32};
use vkformers_tensor::ops::{broadcast, reduce};
use vkformers_tensor::Graph;
use vkformers_vk::testing::on_every_device;

use super::{block, BiasedExperts, MoeSpec, Router};
use crate::decoder::Weights;

const N: usize = 7;
const E: usize = 3;
const K: usize = 2;
const H: usize = 6;
const I: usize = 5;
const ACT: ClampedSwiGlu = ClampedSwiGlu { alpha: 1.702, limit: 0.8, interleaved: true };

fn spec() -> MoeSpec {
    let (names, biased) = BiasedExperts::gpt_oss("model.layers.{i}.mlp", ACT);
    MoeSpec {
        down_transposed: true,
        biased: Some(biased),
        packed: true,
        ..MoeSpec::plain(E, K, I, Glu::SwiGlu, Router::TopKSoftmax, names)
    }
}

/// Host values of every tensor the block reads (name, shape, data), uniform in ±1.
fn tensors(m: &MoeSpec, rng: &mut Rng) -> Vec<(String, Vec<usize>, Vec<f32>)> {
    m.params(0, H)
        .into_iter()
        .map(|(n, s)| {
            let d = rng.vec(s.iter().product(), 1.0);
            (n, s, d)
        })
        .collect()
}

/// The dense reference: per token, top-K of the logits (+ router bias), softmax of those, and
/// for each chosen e `(clamped_swiglu(x·GU_e + b_e) · D_e + d_e)` weighted. Returns `(y, chosen)`
/// with `chosen[n] = [(e, weight)]`.
fn reference_block(x: &[f64], t: &[(String, Vec<usize>, Vec<f32>)]) -> (Vec<f64>, Vec<Vec<(usize, f64)>>) {
    let get = |suffix: &str| f64s(&t.iter().find(|(n, ..)| n.ends_with(suffix)).expect(suffix).2);
    let (r, rb, gu, gub, d, db) = (
        get("router.weight"),
        get("router.bias"),
        get("gate_up_proj"),
        get("gate_up_proj_bias"),
        get("down_proj"),
        get("down_proj_bias"),
    );
    let (mut y, mut chosen) = (vec![0.0; N * H], Vec::new());
    for n in 0..N {
        let xn = &x[n * H..(n + 1) * H];
        let logits: Vec<f64> = (0..E).map(|e| rb[e] + (0..H).map(|c| xn[c] * r[e * H + c]).sum::<f64>()).collect();
        let mut order: Vec<usize> = (0..E).collect();
        order.sort_by(|&a, &b| logits[b].partial_cmp(&logits[a]).unwrap());
        let top = &order[..K];
        let z: f64 = top.iter().map(|&e| logits[e].exp()).sum();
        let mut row = Vec::new();
        for &e in top {
            let wgt = logits[e].exp() / z;
            let pre: Vec<f64> = (0..2 * I)
                .map(|o| gub[e * 2 * I + o] + (0..H).map(|c| xn[c] * gu[(e * H + c) * 2 * I + o]).sum::<f64>())
                .collect();
            let a = reference(ACT, &pre, I);
            for c in 0..H {
                let out = db[e * H + c] + (0..I).map(|j| a[j] * d[(e * I + j) * H + c]).sum::<f64>();
                y[n * H + c] += wgt * out;
            }
            row.push((e, wgt));
        }
        chosen.push(row);
    }
    (y, chosen)
}

#[test]
fn biased_clamped_experts_match_the_dense_reference() {
    on_every_device("moe biased experts", |ctx| {
        let mut rng = Rng::new(99);
        let m = spec();
        let t = tensors(&m, &mut rng);
        let (xv, cv) = (rng.vec(N * H, 2.0), rng.vec(N * H, 1.0));
        let g = Graph::new(ctx);
        let mut w = Weights::default();
        for (n, s, d) in &t {
            w.insert(n.clone(), g.parameter(d, s)?);
        }
        let x = g.constant(&xv, &[N, H])?;
        let y = block(&g, &w, &m, 0, &x, None)
            .map_err(|e| vkformers_vk::VkError::Kernel { kernel: "moe block".into(), message: e.to_string() })?;
        g.backward(&reduce::sum(&g, &broadcast::mul(&g, &y, &g.constant(&cv, &[N, H])?)?)?)?;
        let (want, chosen) = reference_block(&f64s(&xv), &t);
        assert_close("y", &g.read(&y)?, &want, TOL_F32);
        let mut ddb = vec![0.0; E * H];
        for (n, row) in chosen.iter().enumerate() {
            for &(e, wgt) in row {
                (0..H).for_each(|c| ddb[e * H + c] += wgt * f64::from(cv[n * H + c]));
            }
        }
        let db = w.get("model.layers.0.mlp.experts.down_proj_bias").expect("down bias");
        assert_close("d down_bias", &g.read(&db.grad().expect("a gradient"))?, &ddb, TOL_F32);
        Ok(())
    });
}
