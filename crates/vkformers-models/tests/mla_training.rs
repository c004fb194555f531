//! Training paths of multi-head latent attention beyond the f32 parity fixtures: gradient
//! checkpointing recomputes an MLA + MoE layer to the same gradients, and bf16 autocast stays
//! close to f32 (the column moves round nothing the projections and attention do not).

use std::collections::HashMap;
use std::path::PathBuf;

use vkformers_models::decoder::{causal_lm_loss, forward, Batch};
use vkformers_models::model::Model;
use vkformers_tensor::{DType, Graph};
use vkformers_vk::testing::on_every_device;
use vkformers_vk::Context;

fn fixture(name: &str) -> PathBuf {
    PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("../../tests/fixtures").join(name)
}

/// Loss and every gradient of one step on a padded batch of two rows of 8 tokens.
fn step(ctx: &Context, name: &str, ckpt: bool, autocast: Option<DType>) -> (f32, HashMap<String, Vec<f32>>) {
    let g = Graph::new(ctx);
    g.set_checkpointing(ckpt);
    g.set_autocast(autocast);
    let m = Model::load(&g, &fixture(name)).unwrap();
    let t = 8;
    let ids: Vec<i32> = (0..2 * t).map(|i| ((i * 37 + 11) % 120 + 3) as i32).collect();
    let mask: Vec<i32> = (0..2 * t).map(|i| i32::from(i < t || i % t < t - 3)).collect();
    let labels: Vec<i32> = ids.iter().zip(&mask).map(|(&i, &k)| if k == 1 { i } else { -100 }).collect();
    let logits = forward(&g, &m.spec, &m.weights, &Batch { ids: &ids, mask: &mask, batch: 2, seq: t }).unwrap();
    let loss = causal_lm_loss(&g, &logits, &labels, 2, t).unwrap();
    g.backward(&loss).unwrap();
    let grads = m.hf_grads(&g).unwrap().into_iter().map(|h| (h.name, h.data)).collect();
    (g.read(&loss).unwrap()[0], grads)
}

fn norm(v: &[f32]) -> f64 {
    v.iter().map(|x| f64::from(*x).powi(2)).sum::<f64>().sqrt()
}

#[test]
fn checkpointed_mla_layers_give_the_plain_gradients() {
    on_every_device("mla checkpointing", |ctx| {
        for name in ["deepseek_v3", "minicpm3", "axk2", "longcat_flash"] {
            let (plain_loss, plain) = step(ctx, name, false, None);
            let (loss, ckpt) = step(ctx, name, true, None);
            assert_eq!(loss, plain_loss, "{name}: loss");
            assert_eq!(ckpt.len(), plain.len(), "{name}: gradient count");
            for (n, want) in &plain {
                let got = &ckpt[n];
                let scale = want.iter().fold(0f32, |m, v| m.max(v.abs()));
                let diff = got.iter().zip(want).fold(0f32, |m, (x, y)| m.max((x - y).abs()));
                assert!(diff <= 1e-6 * scale.max(1e-30), "{name}: {n} differs by {diff:e} (scale {scale:e})");
            }
        }
        Ok(())
    });
}

#[test]
fn bf16_autocast_mla_stays_close_to_f32() {
    on_every_device("mla bf16", |ctx| {
        for name in ["deepseek_v2", "youtu", "axk2", "longcat_flash"] {
            let (l32, g32) = step(ctx, name, false, None);
            let (l16, g16) = step(ctx, name, false, Some(DType::BF16));
            assert!(((l16 - l32) / l32).abs() <= 0.01, "{name}: bf16 loss {l16} vs f32 {l32}");
            // The whole gradient's direction (tensors with a reference gradient).
            let (mut dot, mut a, mut b) = (0f64, 0f64, 0f64);
            for (n, want) in &g32 {
                let got = &g16[n];
                dot += got.iter().zip(want).map(|(x, y)| f64::from(*x) * f64::from(*y)).sum::<f64>();
                a += norm(got).powi(2);
                b += norm(want).powi(2);
            }
            let cos = dot / (a.sqrt() * b.sqrt());
            assert!(cos >= 0.97, "{name}: bf16 gradient cosine {cos}");
        }
        Ok(())
    });
}
