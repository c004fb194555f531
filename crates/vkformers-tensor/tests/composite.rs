//! Composite checks: a Llama-style MLP block and an attention block built from the ops; the
//! tape's gradient of every parameter must match central finite differences of the same
//! block composed from the f64 references (per tensor ‖g − g_fd‖ / ‖g_fd‖ ≤ 1e-4).

use vkformers_kernels::attention::reference as attn_ref;
use vkformers_kernels::dtype::DType;
use vkformers_kernels::glu::{reference as glu_ref, Glu};
use vkformers_kernels::matmul::reference::matmul;
use vkformers_kernels::norm::reference::rms_norm;
use vkformers_kernels::rope::reference::{default_inv_freq, rope as rope_ref};
use vkformers_kernels::rope::{Rope, RopeLayout};
use vkformers_kernels::testutil::{f64s, finite_diff, rel_l2, Rng};
use vkformers_tensor::ops::attention::{attention, AttnOptions};
use vkformers_tensor::ops::{broadcast, glu, matmul as mm, norm, reduce, rope, shape};
use vkformers_tensor::{Graph, Tensor};
use vkformers_vk::testing::on_every_device;

/// `x [rows, k] · wᵀ` for `w [n, k]`.
fn linear_ref(x: &[f64], w: &[f64], rows: usize, k: usize, n: usize) -> Vec<f64> {
    let mut wt = vec![0.0; k * n];
    for i in 0..n {
        for j in 0..k {
            wt[j * n + i] = w[i * k + j];
        }
    }
    matmul(x, &wt, rows, k, n)
}

fn dot(a: &[f64], b: &[f64]) -> f64 {
    a.iter().zip(b).map(|(x, y)| x * y).sum()
}

/// Splits a flat parameter vector into tensors of the given sizes.
fn split<'a>(flat: &'a [f64], sizes: &[usize]) -> Vec<&'a [f64]> {
    let mut out = Vec::new();
    let mut at = 0;
    for s in sizes {
        out.push(&flat[at..at + s]);
        at += s;
    }
    out
}

/// Compares the tape gradients of `params` with finite differences of `f` over their
/// concatenation.
fn check_grads(g: &Graph<'_>, what: &str, params: &[(&str, &Tensor, &[f32])], f: impl Fn(&[f64]) -> f64) {
    let flat: Vec<f64> = params.iter().flat_map(|(_, _, v)| f64s(v)).collect();
    let fd = finite_diff(&f, &flat, 1e-5);
    let mut at = 0;
    for (name, t, v) in params {
        let got = f64s(&g.read(&t.grad().expect("gradient")).expect("read"));
        let want = &fd[at..at + v.len()];
        let err = rel_l2(&got, want);
        assert!(err <= 1e-4, "{what}: d{name}: relative error {err:e}");
        at += v.len();
    }
}

#[test]
fn mlp_block_tape_gradients_match_finite_differences() {
    on_every_device("composite mlp", |ctx| {
        let (n, h, i) = (3usize, 6usize, 10usize);
        let eps = 1e-6;
        let mut rng = Rng::new(21);
        let (xs, wn, wg, wu, wd, ws) = (
            rng.vec(n * h, 1.0),
            rng.vec(h, 1.0),
            rng.vec(i * h, 0.5),
            rng.vec(i * h, 0.5),
            rng.vec(h * i, 0.5),
            rng.vec(n * h, 1.0),
        );
        let g = Graph::new(ctx);
        let x = g.parameter(&xs, &[n, h])?;
        let norm_w = g.parameter(&wn, &[h])?;
        let w_gate = g.parameter(&wg, &[i, h])?;
        let w_up = g.parameter(&wu, &[i, h])?;
        let w_down = g.parameter(&wd, &[h, i])?;
        // out = x + W_down · swiglu(W_gate · rms(x), W_up · rms(x)); loss = sum(out ⊙ w)
        let hn = norm::rms_norm(&g, &x, Some(&norm_w), eps as f32, false)?;
        let a = glu::glu(&g, &mm::linear(&g, &hn, &w_gate, None)?, &mm::linear(&g, &hn, &w_up, None)?, Glu::SwiGlu)?;
        let out = broadcast::add(&g, &x, &mm::linear(&g, &a, &w_down, None)?)?;
        let loss = reduce::sum(&g, &broadcast::mul(&g, &out, &g.constant(&ws, &[n, h])?)?)?;
        g.backward(&loss)?;
        let sizes = [n * h, h, i * h, i * h, h * i];
        let w64 = f64s(&ws);
        let f = |p: &[f64]| {
            let p = split(p, &sizes);
            let (hn, _) = rms_norm(p[0], Some(p[1]), h, eps, false);
            let a = glu_ref::forward(Glu::SwiGlu, &linear_ref(&hn, p[2], n, h, i), &linear_ref(&hn, p[3], n, h, i));
            let down = linear_ref(&a, p[4], n, i, h);
            let out: Vec<f64> = down.iter().zip(p[0]).map(|(d, x)| d + x).collect();
            dot(&out, &w64)
        };
        let params = [
            ("x", &x, &xs[..]),
            ("norm", &norm_w, &wn[..]),
            ("gate", &w_gate, &wg[..]),
            ("up", &w_up, &wu[..]),
            ("down", &w_down, &wd[..]),
        ];
        check_grads(&g, "mlp", &params, f);
        Ok(())
    });
}

#[test]
fn attention_block_tape_gradients_match_finite_differences() {
    on_every_device("composite attention", |ctx| {
        let (b, t, c, hq, hkv, d) = (2usize, 5usize, 8usize, 4usize, 2usize, 4usize);
        let mut rng = Rng::new(33);
        let xs = rng.vec(b * t * c, 1.0);
        let (wq, wk, wv, wo) =
            (rng.vec(hq * d * c, 0.5), rng.vec(hkv * d * c, 0.5), rng.vec(hkv * d * c, 0.5), rng.vec(c * hq * d, 0.5));
        let ws = rng.vec(b * t * c, 1.0);
        let pos: Vec<i32> = (0..b * t).map(|i| (i % t) as i32).collect();
        let inv_freq = default_inv_freq(d as u32, 10000.0);
        let g = Graph::new(ctx);
        let x = g.parameter(&xs, &[b * t, c])?;
        let (pq, pk, pv, po) = (
            g.parameter(&wq, &[hq * d, c])?,
            g.parameter(&wk, &[hkv * d, c])?,
            g.parameter(&wv, &[hkv * d, c])?,
            g.parameter(&wo, &[c, hq * d])?,
        );
        let pos_t = g.ints(&pos, &[b, t])?;
        let freq_t = g.constant(&inv_freq, &[d / 2])?;
        let heads = |y: &Tensor, h: usize| shape::reshape(&g, y, &[b, t, h, d]);
        let q = rope::rope(
            &g,
            &heads(&mm::linear(&g, &x, &pq, None)?, hq)?,
            &pos_t,
            &freq_t,
            RopeLayout::HalfSplit,
            d,
            1.0,
        )?;
        let k = rope::rope(
            &g,
            &heads(&mm::linear(&g, &x, &pk, None)?, hkv)?,
            &pos_t,
            &freq_t,
            RopeLayout::HalfSplit,
            d,
            1.0,
        )?;
        let v = heads(&mm::linear(&g, &x, &pv, None)?, hkv)?;
        let o = attention(&g, &q, &k, &v, &AttnOptions::default())?;
        let y = mm::linear(&g, &shape::reshape(&g, &o, &[b * t, hq * d])?, &po, None)?;
        let loss = reduce::sum(&g, &broadcast::mul(&g, &y, &g.constant(&ws, &[b * t, c])?)?)?;
        g.backward(&loss)?;
        let sizes = [b * t * c, hq * d * c, hkv * d * c, hkv * d * c, c * hq * d];
        let w64 = f64s(&ws);
        let rope_of = |h: usize| Rope {
            batch: b as u32,
            seq: t as u32,
            heads: h as u32,
            head_dim: d as u32,
            rotary_dim: d as u32,
            layout: RopeLayout::HalfSplit,
            mscale: 1.0,
            dtype: DType::F32,
        };
        let f = |p: &[f64]| {
            let p = split(p, &sizes);
            let q = rope_ref(&rope_of(hq), &linear_ref(p[0], p[1], b * t, c, hq * d), &pos, &inv_freq);
            let k = rope_ref(&rope_of(hkv), &linear_ref(p[0], p[2], b * t, c, hkv * d), &pos, &inv_freq);
            let v = linear_ref(p[0], p[3], b * t, c, hkv * d);
            let shape = attn_ref::Shape { batch: b, tq: t, tk: t, hq, hkv, d, dv: d };
            let mut opts = attn_ref::Options::new(d);
            opts.causal = true;
            let (o, _) = attn_ref::forward(&q, &k, &v, &shape, &opts);
            dot(&linear_ref(&o, p[4], b * t, hq * d, c), &w64)
        };
        let params = [
            ("x", &x, &xs[..]),
            ("wq", &pq, &wq[..]),
            ("wk", &pk, &wk[..]),
            ("wv", &pv, &wv[..]),
            ("wo", &po, &wo[..]),
        ];
        check_grads(&g, "attention", &params, f);
        Ok(())
    });
}

#[test]
fn a_training_step_is_one_submission() {
    on_every_device("one submission", |ctx| {
        let mut rng = Rng::new(2);
        let g = Graph::new(ctx);
        let w = g.parameter(&rng.vec(12 * 7, 0.5), &[12, 7])?;
        let x = g.constant(&rng.vec(5 * 7, 1.0), &[5, 7])?;
        let labels = g.ints(&[1, 4, -100, 11, 0], &[5])?;
        let params = [vkformers_tensor::optim::Param { tensor: w.clone(), decay: true }];
        let mut opt = vkformers_tensor::optim::AdamW::new(Default::default(), 1.0);
        g.sync()?;
        let before = g.submissions();
        let logits = mm::linear(&g, &x, &w, None)?;
        let loss = vkformers_tensor::ops::loss::cross_entropy(&g, &logits, &labels)?;
        g.backward(&loss)?;
        opt.step(&g, &params)?;
        g.sync()?;
        assert_eq!(g.submissions() - before, 1, "forward + backward + AdamW in one batch");
        Ok(())
    });
}

/// A recording longer than one batch is split into batches submitted while the host records
/// on: each later batch must see the earlier ones' writes, and buffers dropped while a batch is
/// in flight may be reused by the next only after it. A chain of dependent ops whose
/// intermediates are dropped at once (so the allocator recycles them across batches) must give
/// the exact sum, with several submissions made before the final wait.
#[test]
fn long_recordings_run_as_batches_in_flight_with_exact_results() {
    on_every_device("batches in flight", |ctx| {
        let g = Graph::new(ctx);
        let n = 1000usize;
        let one = g.constant(&vec![1.0; n], &[n])?;
        let mut x = g.constant(&(0..n).map(|i| i as f32).collect::<Vec<_>>(), &[n])?;
        g.sync()?;
        let before = g.submissions();
        let steps = 700usize;
        g.no_grad(|| -> vkformers_vk::Result<()> {
            for s in 0..steps {
                // Alternate add and scale by 1 so two kernels interleave.
                x = if s % 2 == 0 { broadcast::add(&g, &x, &one)? } else { broadcast::scale(&g, &x, 1.0)? };
            }
            Ok(())
        })?;
        let got = g.read(&x)?;
        let adds = steps.div_ceil(2) as f32;
        for (i, v) in got.iter().enumerate() {
            assert_eq!(*v, i as f32 + adds, "element {i}");
        }
        assert!(g.submissions() - before >= 2, "700 dispatches ran as one batch");
        Ok(())
    });
}
