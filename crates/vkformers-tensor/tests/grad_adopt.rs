//! A parameter's first gradient of a backward is adopted (not copied) when nothing else holds
//! it; later gradients are added into it in place. These check that adoption never lets two
//! parameters, a caller's tensor or a storage-sharing view end up writing the same buffer.

use vkformers_tensor::ops::{broadcast, reduce, shape};
use vkformers_tensor::Graph;
use vkformers_vk::testing::on_every_device;

fn close(what: &str, got: &[f32], want: &[f32]) {
    assert_eq!(got.len(), want.len(), "{what}");
    for (i, (a, b)) in got.iter().zip(want).enumerate() {
        assert!((a - b).abs() <= 1e-6 * b.abs().max(1.0), "{what}[{i}]: {a} vs {b}");
    }
}

#[test]
fn adopted_gradients_accumulate_over_backwards() {
    on_every_device("adopt accumulate", |ctx| {
        let g = Graph::new(ctx);
        let xs: Vec<f32> = (0..15).map(|i| i as f32 * 0.5 - 3.0).collect();
        let w = g.parameter(&[0.25; 15], &[3, 5])?;
        let x = g.constant(&xs, &[3, 5])?;
        for pass in 1..=3 {
            // d sum(w * x) / dw = x: a fresh product, adopted on the first pass.
            g.set_profiling(true);
            let loss = reduce::sum(&g, &broadcast::mul(&g, &w, &x)?)?;
            g.backward(&loss)?;
            let profile = g.take_profile()?.expect("profiling on");
            assert!(!profile.kernels.contains_key("elementwise/copy"), "pass {pass}: the gradient was copied");
            let want: Vec<f32> = xs.iter().map(|v| v * pass as f32).collect();
            close(&format!("pass {pass}"), &g.read(&w.grad().expect("grad"))?, &want);
        }
        Ok(())
    });
}

#[test]
fn one_gradient_handed_to_two_parameters_is_not_shared() {
    on_every_device("adopt shared", |ctx| {
        let g = Graph::new(ctx);
        let a = g.parameter(&[1.0, 2.0, 3.0], &[3])?;
        let b = g.parameter(&[4.0, 5.0, 6.0], &[3])?;
        let c = g.constant(&[2.0, 3.0, 4.0], &[3])?;
        // d/da = d/db = c (add hands one upstream gradient to both inputs).
        let loss = reduce::sum(&g, &broadcast::mul(&g, &broadcast::add(&g, &a, &b)?, &c)?)?;
        g.backward(&loss)?;
        // A second pass into a alone: if a and b shared a buffer, b would change too.
        let loss = reduce::sum(&g, &broadcast::mul(&g, &a, &c)?)?;
        g.backward(&loss)?;
        close("a", &g.read(&a.grad().expect("a"))?, &[4.0, 6.0, 8.0]);
        close("b", &g.read(&b.grad().expect("b"))?, &[2.0, 3.0, 4.0]);
        Ok(())
    });
}

#[test]
fn a_callers_seed_and_views_are_left_alone() {
    on_every_device("adopt seed", |ctx| {
        let g = Graph::new(ctx);
        let w = g.parameter(&[1.0, 2.0, 3.0, 4.0], &[2, 2])?;
        let seed = g.constant(&[1.0, -1.0, 0.5, 2.0], &[2, 2])?;
        g.backward_from(&w, &seed)?;
        g.backward_from(&w, &seed)?;
        close("seed unchanged", &g.read(&seed)?, &[1.0, -1.0, 0.5, 2.0]);
        close("w", &g.read(&w.grad().expect("w"))?, &[2.0, -2.0, 1.0, 4.0]);
        // A gradient that reaches w through a reshape (a view of the upstream gradient).
        let v = g.parameter(&[0.0; 6], &[6])?;
        let y = g.constant(&[1.0, 2.0, 3.0, 4.0, 5.0, 6.0], &[2, 3])?;
        for _ in 0..2 {
            let vm = shape::reshape(&g, &v, &[2, 3])?;
            let loss = reduce::sum(&g, &broadcast::mul(&g, &vm, &y)?)?;
            g.backward(&loss)?;
        }
        close("v", &g.read(&v.grad().expect("v"))?, &[2.0, 4.0, 6.0, 8.0, 10.0, 12.0]);
        Ok(())
    });
}
