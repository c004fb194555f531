//! Tape gradients of attention, cross-entropy and dropout against the f64 references.

use vkformers_kernels::attention::reference as attn_ref;
use vkformers_kernels::loss::reference as loss_ref;
use vkformers_kernels::testutil::{assert_close, f64s, Rng, TOL_F32};
use vkformers_tensor::ops::attention::{attention, AttnOptions};
use vkformers_tensor::ops::{dropout, loss};
use vkformers_tensor::{Graph, Result, Tensor};
use vkformers_vk::testing::on_every_device;

/// Attention inputs q `[b, t, hq, d]`, k and v `[b, t, hkv, d]` and the upstream gradient dO
/// (shaped as q), drawn from `rng` in that order, uniform in ±1.
struct Inputs {
    shape: attn_ref::Shape,
    qkv: [Vec<f32>; 3],
    dos: Vec<f32>,
}

impl Inputs {
    fn draw(rng: &mut Rng, (b, t, hq, hkv, d): (usize, usize, usize, usize, usize)) -> Self {
        let (qs, ks, vs) = (rng.vec(b * t * hq * d, 1.0), rng.vec(b * t * hkv * d, 1.0), rng.vec(b * t * hkv * d, 1.0));
        let dos = rng.vec(b * t * hq * d, 1.0);
        Inputs { shape: attn_ref::Shape { batch: b, tq: t, tk: t, hq, hkv, d, dv: d }, qkv: [qs, ks, vs], dos }
    }

    /// q, k and v as parameters of `g`.
    fn params(&self, g: &Graph<'_>) -> Result<[Tensor; 3]> {
        let s = &self.shape;
        let [q, k, v] = &self.qkv;
        Ok([
            g.parameter(q, &[s.batch, s.tq, s.hq, s.d])?,
            g.parameter(k, &[s.batch, s.tk, s.hkv, s.d])?,
            g.parameter(v, &[s.batch, s.tk, s.hkv, s.d])?,
        ])
    }

    /// o and the gradients of q, k and v (after `backward_from(o, dO)`) against the f64
    /// reference under `ro`.
    fn check(&self, g: &Graph<'_>, o: &Tensor, qkv: &[Tensor; 3], ro: &attn_ref::Options<'_>) -> Result<()> {
        let [q64, k64, v64, do64] = [&self.qkv[0], &self.qkv[1], &self.qkv[2], &self.dos].map(|x| f64s(x));
        let (want_o, _) = attn_ref::forward(&q64, &k64, &v64, &self.shape, ro);
        let (dq, dk, dv) = attn_ref::backward(&q64, &k64, &v64, &do64, &self.shape, ro);
        assert_close("o", &g.read(o)?, &want_o, TOL_F32);
        for ((name, x), want) in ["dq", "dk", "dv"].iter().zip(qkv).zip([dq, dk, dv]) {
            assert_close(name, &g.read(&x.grad().expect(name))?, &want, TOL_F32);
        }
        Ok(())
    }
}

#[test]
fn attention_gradients_flow_through_the_tape() {
    on_every_device("tensor attention", |ctx| {
        let (b, t, d) = (2usize, 11usize, 8usize);
        let x = Inputs::draw(&mut Rng::new(11), (b, t, 4, 2, d));
        // Row 1 is right-padded: its last 3 keys are masked.
        let kmask: Vec<i32> = (0..b * t).map(|i| i32::from(!(i / t == 1 && i % t >= t - 3))).collect();
        let g = Graph::new(ctx);
        let qkv = x.params(&g)?;
        let opts = AttnOptions { kmask: Some(g.ints(&kmask, &[b, t])?), ..AttnOptions::default() };
        let o = attention(&g, &qkv[0], &qkv[1], &qkv[2], &opts)?;
        g.backward_from(&o, &g.constant(&x.dos, o.shape())?)?;
        let mut ro = attn_ref::Options::new(d);
        ro.causal = true;
        ro.kmask = Some(&kmask);
        x.check(&g, &o, &qkv, &ro)
    });
}

#[test]
fn attention_sinks_get_their_gradient_through_the_tape() {
    on_every_device("tensor attention sinks", |ctx| {
        let (hq, d) = (3usize, 5usize);
        let x = Inputs::draw(&mut Rng::new(12), (2, 9, hq, 1, d));
        let sinks = [-1.5f32, 0.5, 2.0];
        let g = Graph::new(ctx);
        let qkv = x.params(&g)?;
        let sk = g.parameter(&sinks, &[hq])?;
        let opts = AttnOptions { window: 4, sinks: Some(sk.clone()), ..AttnOptions::default() };
        let o = attention(&g, &qkv[0], &qkv[1], &qkv[2], &opts)?;
        g.backward_from(&o, &g.constant(&x.dos, o.shape())?)?;
        let sinks64 = f64s(&sinks);
        let mut ro = attn_ref::Options::new(d);
        ro.causal = true;
        ro.window = 4;
        ro.sinks = Some(&sinks64);
        x.check(&g, &o, &qkv, &ro)?;
        let [q64, k64, v64, do64] = [&x.qkv[0], &x.qkv[1], &x.qkv[2], &x.dos].map(|v| f64s(v));
        let ds = attn_ref::sinks_backward(&q64, &k64, &v64, &do64, &x.shape, &ro);
        assert_close("dsinks", &g.read(&sk.grad().expect("dsinks"))?, &ds, TOL_F32);
        Ok(())
    });
}

#[test]
fn cross_entropy_loss_and_gradient_match_reference_and_accumulate() {
    on_every_device("tensor cross-entropy", |ctx| {
        let (n, vocab) = (9usize, 33usize);
        let mut rng = Rng::new(5);
        let xs = rng.vec(n * vocab, 4.0);
        let labels: Vec<i32> = (0..n).map(|i| if i % 4 == 3 { -100 } else { rng.below(vocab) as i32 }).collect();
        let g = Graph::new(ctx);
        let logits = g.parameter(&xs, &[n, vocab])?;
        let lab = g.ints(&labels, &[n])?;
        for _ in 0..2 {
            let l = loss::cross_entropy(&g, &logits, &lab)?;
            g.backward(&l)?;
            let (_, want) = loss_ref::forward(&f64s(&xs), &labels, vocab);
            assert_close("loss", &g.read(&l)?, &[want], TOL_F32);
        }
        // Two backward passes accumulate: exactly twice the reference gradient.
        let want_grad: Vec<f64> = loss_ref::backward(&f64s(&xs), &labels, vocab, 1.0).iter().map(|v| 2.0 * v).collect();
        assert_close("dlogits x2", &g.read(&logits.grad().expect("grad"))?, &want_grad, TOL_F32);
        Ok(())
    });
}

#[test]
fn dropout_backward_replays_the_forward_mask() {
    on_every_device("tensor dropout", |ctx| {
        let n = 1000usize;
        let xs: Vec<f32> = (0..n).map(|i| 1.0 + i as f32 * 1e-3).collect();
        let g = Graph::new(ctx);
        let x = g.parameter(&xs, &[n])?;
        let y = dropout::dropout(&g, &x, 0.25, 42, 7)?;
        g.backward_from(&y, &g.full(&[n], 1.0)?)?;
        let (ys, dx) = (g.read(&y)?, g.read(&x.grad().expect("grad"))?);
        let kept = ys.iter().filter(|v| **v != 0.0).count();
        assert!((650..850).contains(&kept), "kept {kept} of {n} at p = 0.25");
        for i in 0..n {
            let keep = ys[i] != 0.0;
            let scale = if keep { 1.0 / 0.75f32 } else { 0.0 };
            assert_eq!(dx[i], scale, "dx at {i}");
            assert_eq!(ys[i], xs[i] * scale, "y at {i}");
        }
        Ok(())
    });
}

#[test]
fn backward_releases_saved_activations_and_the_tape() {
    on_every_device("tensor release", |ctx| {
        let g = Graph::new(ctx);
        let x = g.parameter(&[0.5, -1.0, 2.0, 0.25], &[1, 4])?;
        let y = vkformers_tensor::ops::softmax::softmax(&g, &x)?;
        let weak = y.downgrade();
        let seed = g.constant(&[1.0, 0.0, 0.0, 0.0], &[1, 4])?;
        assert_eq!(g.tape_len(), 1);
        g.backward_from(&y, &seed)?;
        drop(y);
        assert_eq!(g.tape_len(), 0, "backward consumes the tape");
        assert!(!weak.is_alive(), "the saved output is released once backward has used it");
        g.no_grad(|| -> vkformers_tensor::Result<()> {
            vkformers_tensor::ops::softmax::softmax(&g, &x)?;
            Ok(())
        })?;
        assert_eq!(g.tape_len(), 0, "no_grad records no tape");
        Ok(())
    });
}
