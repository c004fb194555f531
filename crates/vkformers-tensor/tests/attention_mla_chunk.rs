//! The attention op with a value head dim other than the q/k one (multi-head latent attention)
//! and with Llama 4's chunked mask: o and the tape's dq, dk, dv against the f64 reference on
//! odd shapes (GQA, chunks not a multiple of the kernels' tiles).

use vkformers_kernels::attention::reference as attn_ref;
use vkformers_kernels::testutil::{f64s, rel_l2, Rng};
use vkformers_tensor::ops::attention::{attention_chunked, AttnOptions};
use vkformers_tensor::ops::{broadcast, reduce};
use vkformers_tensor::Graph;
use vkformers_vk::testing::on_every_device;

/// `(b, t, hq, hkv, d, dv, chunk)`: runs L = Σ o ⊙ w and compares o, dq, dk, dv.
fn check(
    ctx: &vkformers_vk::Context,
    (b, t, hq, hkv, d, dv, chunk): (usize, usize, usize, usize, usize, usize, usize),
) {
    let mut rng = Rng::new(5 + d as u64 + chunk as u64);
    let (qs, ks, vs) = (rng.vec(b * t * hq * d, 1.0), rng.vec(b * t * hkv * d, 1.0), rng.vec(b * t * hkv * dv, 1.0));
    let ws = rng.vec(b * t * hq * dv, 1.0);
    let g = Graph::new(ctx);
    let q = g.parameter(&qs, &[b, t, hq, d]).unwrap();
    let k = g.parameter(&ks, &[b, t, hkv, d]).unwrap();
    let v = g.parameter(&vs, &[b, t, hkv, dv]).unwrap();
    let o = attention_chunked(&g, &q, &k, &v, &AttnOptions::default(), chunk as u32).unwrap();
    assert_eq!(o.shape(), &[b, t, hq, dv]);
    let loss = reduce::sum(&g, &broadcast::mul(&g, &o, &g.constant(&ws, &[b, t, hq, dv]).unwrap()).unwrap()).unwrap();
    g.backward(&loss).unwrap();
    let shape = attn_ref::Shape { batch: b, tq: t, tk: t, hq, hkv, d, dv };
    let opts = attn_ref::Options { causal: true, chunk, ..attn_ref::Options::new(d) };
    let [q64, k64, v64, w64] = [&qs, &ks, &vs, &ws].map(|x| f64s(x));
    let (o_ref, _) = attn_ref::forward(&q64, &k64, &v64, &shape, &opts);
    let (dq, dk, dvr) = attn_ref::backward(&q64, &k64, &v64, &w64, &shape, &opts);
    let case = format!("b{b} t{t} hq{hq} hkv{hkv} d{d} dv{dv} chunk{chunk}");
    for (name, got, want) in [
        ("o", f64s(&g.read(&o).unwrap()), o_ref),
        ("dq", f64s(&g.read(&q.grad().unwrap()).unwrap()), dq),
        ("dk", f64s(&g.read(&k.grad().unwrap()).unwrap()), dk),
        ("dv", f64s(&g.read(&v.grad().unwrap()).unwrap()), dvr),
    ] {
        let err = rel_l2(&got, &want);
        assert!(err <= 1e-5, "{case}: {name}: relative error {err:e}");
    }
}

#[test]
fn value_dim_and_chunks_match_the_reference() {
    on_every_device("attention op dv / chunk", |ctx| {
        check(ctx, (2, 11, 4, 2, 10, 14, 0)); // deepseek_v2 fixture-like: Dv > Dqk
        check(ctx, (1, 9, 3, 3, 10, 8, 0)); // Dv < Dqk
        check(ctx, (2, 13, 4, 1, 8, 8, 5)); // chunked, GQA
        check(ctx, (1, 17, 2, 2, 6, 5, 7)); // chunked with Dv != Dqk
                                            // MLA's latent prefill: one key head [c | k_rot] of L + Dr, the values c of L (L 12, Dr 4).
        check(ctx, (2, 11, 4, 1, 16, 12, 0));
        Ok(())
    });
}
