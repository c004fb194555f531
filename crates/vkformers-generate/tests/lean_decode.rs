//! The latency-lean decode attention (`vkformers_kernels::attention::decode_lean`, forced here
//! for the calls of one closure; `VKFORMERS_DECODE_LEAN=1` in a real run) inside decode steps of
//! bf16 models under autocast (bf16 pools, f32 activations): the logits of a prefill and three
//! decode steps and the greedy ids fed back equal the tiled kernel's up to bf16 rounding, with
//! the rotary embedding and KV store inside the attention (its `_rope` variant) and apart (its
//! plain variant), for one row and for 20 rows of different lengths. The same families as
//! `rope_in_attention` (GQA, biases, sliding window, softcap, interleaved partial rotary, q/k
//! norms, learned sinks, MoE). Each run checks from the profile which kernel ran, and that the
//! step's dispatches and barriers are the tiled kernel's.

mod common;

use common::{cached_decode_logits, fixtures_root};
use vkformers_kernels::attention::decode_lean::{self, Kernel};
use vkformers_kernels::testutil::{assert_close, f64s, TOL_BF16};
use vkformers_models::model::Model;
use vkformers_tensor::profile::Profile;
use vkformers_tensor::{DType, Graph};
use vkformers_vk::testing::on_every_device;

const FAMILIES: [&str; 8] = ["llama", "qwen2", "mistral", "gemma", "gemma2", "gptj", "qwen3", "gpt_oss"];

fn set_rope_in_attention(model: &mut Model, on: bool) {
    let mut packs = model.weights.packs().clone();
    packs.set_rope_in_attention(on);
    model.weights.set_packs(packs);
}

/// Calls of the kernels whose names start with `prefix`.
fn calls(p: &Profile, prefix: &str) -> u64 {
    p.kernels.iter().filter(|(n, _)| n.starts_with(prefix)).map(|(_, k)| k.calls).sum()
}

/// Logits of a prefill of `rows` left-padded rows and three decode steps (each row's greedy id
/// fed back) on `kernel`, and the last step's profile.
fn decode_logits(g: &Graph<'_>, model: &Model, rows: usize, kernel: Kernel) -> (Vec<Vec<f32>>, Profile) {
    let mask: Vec<i32> = (0..rows * 5).map(|i| i32::from(i % 5 >= 4 - (i / 5) % 5)).collect();
    decode_lean::with_kernel(kernel, || cached_decode_logits(g, model, rows, mask))
}

/// Each row's greedy id of each step's logits `[rows, V]`.
fn argmax(logits: &[f32], rows: usize) -> Vec<usize> {
    let v = logits.len() / rows;
    logits.chunks(v).map(|r| (0..v).fold(0, |best, j| if r[j] > r[best] { j } else { best })).collect()
}

fn check_family(g: &Graph<'_>, name: &str, rope_in: bool) {
    let mut model = Model::load_for_inference(g, &fixtures_root().join(name), DType::BF16).unwrap();
    set_rope_in_attention(&mut model, rope_in);
    g.set_autocast(Some(DType::BF16));
    let layers = model.spec.layers.len() as u64;
    for rows in [1, 20] {
        let what = format!("{name} rope in attention {rope_in}, {rows} rows");
        let (tiled, p_tiled) = decode_logits(g, &model, rows, Kernel::Tiled);
        let (lean, p_lean) = decode_logits(g, &model, rows, Kernel::Lean);
        assert_eq!(calls(&p_lean, "attention/decode_lean:"), layers, "{what}: {:?}", p_lean.kernels.keys());
        assert_eq!(calls(&p_lean, "attention/decode:"), 0, "{what}: {:?}", p_lean.kernels.keys());
        assert_eq!(calls(&p_tiled, "attention/decode:"), layers, "{what}: {:?}", p_tiled.kernels.keys());
        assert_eq!(calls(&p_tiled, "attention/decode_lean:"), 0, "{what}: {:?}", p_tiled.kernels.keys());
        // One dispatch for one: the step's commands and barriers do not change.
        assert_eq!((p_lean.dispatches, p_lean.barriers), (p_tiled.dispatches, p_tiled.barriers), "{what}");
        for (step, (a, b)) in lean.iter().zip(&tiled).enumerate() {
            assert_close(&format!("{what}: step {step} logits, lean vs tiled"), a, &f64s(b), TOL_BF16);
            assert_eq!(argmax(a, rows), argmax(b, rows), "{what}: step {step} greedy ids");
        }
    }
    g.set_autocast(None);
}

#[test]
fn lean_decode_attention_gives_the_tiled_kernels_logits_and_tokens_bf16() {
    on_every_device("lean decode attention bf16", |ctx| {
        for name in FAMILIES {
            for rope_in in [true, false] {
                check_family(&Graph::new(ctx), name, rope_in);
            }
        }
        Ok(())
    });
}
