//! Gradient checkpointing on the llama fixture: every parameter's gradient equals the plain
//! tape's (f32 and bf16 autocast; LoRA with dropout, whose masks the recompute must redraw),
//! the layers leave fewer nodes on the tape, and the device-memory peak of a step is lower.

use std::collections::HashMap;
use std::path::PathBuf;

use vkformers_models::decoder::{causal_lm_loss, forward, Batch};
use vkformers_models::lora::{self, Adapter};
use vkformers_models::model::Model;
use vkformers_models::weights::HostTensor;
use vkformers_tensor::{DType, Graph};
use vkformers_vk::testing::on_every_device;
use vkformers_vk::Context;

fn fixture(kind: &str, name: &str) -> PathBuf {
    PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("../../tests").join(kind).join(name)
}

/// Two rows of `t` tokens, the second padded after `t - 2` (ids below the fixture's vocab of 128).
fn batch_data(t: usize) -> (Vec<i32>, Vec<i32>) {
    let ids: Vec<i32> = (0..2 * t).map(|i| ((i * 37 + 11) % 127 + 1) as i32).collect();
    let mask: Vec<i32> = (0..2 * t).map(|i| i32::from(i < t || i % t < t - 2)).collect();
    (ids, mask)
}

/// What one forward + backward gave.
struct Step {
    grads: HashMap<String, Vec<f32>>,
    loss: f32,
    /// Tape nodes once the loss is built.
    tape_len: usize,
}

/// Forward, loss and backward of `batch_data(t)` (labels = ids, padding ignored); `grads` reads
/// the gradients wanted.
fn step(g: &Graph<'_>, m: &Model, t: usize, grads: impl Fn(&Graph<'_>) -> Vec<HostTensor>) -> Step {
    let (ids, mask) = batch_data(t);
    let labels: Vec<i32> = ids.iter().zip(&mask).map(|(&i, &k)| if k == 1 { i } else { -100 }).collect();
    let logits = forward(g, &m.spec, &m.weights, &Batch { ids: &ids, mask: &mask, batch: 2, seq: t }).unwrap();
    let loss = causal_lm_loss(g, &logits, &labels, 2, t).unwrap();
    let tape_len = g.tape_len();
    g.backward(&loss).unwrap();
    let grads = grads(g).into_iter().map(|h| (h.name, h.data)).collect();
    Step { grads, loss: g.read(&loss).unwrap()[0], tape_len }
}

/// The full model's step, with or without checkpointing, in `autocast`'s precision.
fn full_step(ctx: &Context, ckpt: bool, autocast: Option<DType>, t: usize) -> Step {
    let g = Graph::new(ctx);
    g.set_autocast(autocast);
    g.set_checkpointing(ckpt);
    let m = Model::load(&g, &fixture("fixtures", "llama")).unwrap();
    step(&g, &m, t, |g| m.hf_grads(g).unwrap())
}

/// Every gradient of `got` equals `want`'s within 1e-6 of the tensor's largest magnitude.
fn assert_same(what: &str, got: &Step, want: &Step) {
    assert_eq!(got.loss, want.loss, "{what}: loss");
    assert_eq!(got.grads.len(), want.grads.len(), "{what}: gradient count");
    for (name, b) in &want.grads {
        let a = got.grads.get(name).unwrap_or_else(|| panic!("{what}: no gradient for {name}"));
        let scale = b.iter().fold(0f32, |m, v| m.max(v.abs()));
        let diff = a.iter().zip(b).fold(0f32, |m, (x, y)| m.max((x - y).abs()));
        assert!(scale > 0.0, "{what}: {name} has a zero gradient");
        assert!(diff <= 1e-6 * scale, "{what}: {name} differs by {diff:e} (scale {scale:e})");
    }
    assert!(got.tape_len < want.tape_len, "{what}: tape {} vs {} nodes", got.tape_len, want.tape_len);
}

#[test]
fn llama_gradients_with_checkpointing_equal_the_plain_ones() {
    on_every_device("checkpointing llama", |ctx| {
        for autocast in [None, Some(DType::BF16)] {
            let what = format!("llama {autocast:?}");
            let plain = full_step(ctx, false, autocast, 7);
            let ckpt = full_step(ctx, true, autocast, 7);
            assert_eq!(plain.grads.len(), 2 + 9 * 2 + 1, "{what}: every parameter of the fixture");
            assert_same(&what, &ckpt, &plain);
        }
        Ok(())
    });
}

#[test]
fn lora_dropout_masks_are_redrawn_by_the_recompute() {
    on_every_device("checkpointing lora", |ctx| {
        let mut adapter = Adapter::load(&fixture("fixtures_lora", "llama")).unwrap();
        adapter.config.lora_dropout = 0.5;
        let run = |ckpt: bool, dropout_step: u64| {
            let g = Graph::new(ctx);
            g.set_checkpointing(ckpt);
            let mut m = lora::load_frozen(&g, &fixture("fixtures", "llama"), &[]).unwrap();
            let params = lora::attach(&g, &mut m, &adapter, 3).unwrap();
            m.weights.lora().set_step(dropout_step);
            step(&g, &m, 6, |g| params.hf_grads(g).unwrap())
        };
        let plain = run(false, 5);
        assert_same("lora", &run(true, 5), &plain);
        let other = run(false, 6);
        assert_ne!(other.grads, plain.grads, "another step's masks give other gradients");
        // Masks keyed by the batch's samples: the recompute redraws those too.
        let keyed = |ckpt: bool| {
            let g = Graph::new(ctx);
            g.set_checkpointing(ckpt);
            let mut m = lora::load_frozen(&g, &fixture("fixtures", "llama"), &[]).unwrap();
            let params = lora::attach(&g, &mut m, &adapter, 3).unwrap();
            let samples = std::rc::Rc::new((0..2).map(|b| 40 + b).collect::<Vec<u64>>());
            m.weights.lora().set_samples(Some(lora::SampleKeys { samples, seq: 6, decoder_seq: 0 }));
            step(&g, &m, 6, |g| params.hf_grads(g).unwrap())
        };
        let keyed_plain = keyed(false);
        assert_same("lora keyed", &keyed(true), &keyed_plain);
        assert_ne!(keyed_plain.grads, plain.grads, "the sample keys select the masks");
        Ok(())
    });
}

#[test]
fn checkpointing_lowers_the_device_memory_peak() {
    on_every_device("checkpointing memory", |ctx| {
        let peak = |ckpt: bool| {
            let g = Graph::new(ctx);
            g.set_checkpointing(ckpt);
            let m = Model::load(&g, &fixture("fixtures", "llama")).unwrap();
            g.sync().unwrap();
            let before = ctx.device_memory().current;
            ctx.reset_peak_memory();
            step(&g, &m, 40, |_| Vec::new());
            ctx.device_memory().peak - before
        };
        let (plain, ckpt) = (peak(false), peak(true));
        eprintln!("activation peak over the weights: plain {plain} bytes, checkpointed {ckpt} bytes");
        assert!(ckpt < plain, "checkpointed peak {ckpt} bytes is not below the plain {plain}");
        Ok(())
    });
}
