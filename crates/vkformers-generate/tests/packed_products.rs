//! Generation on an inference load, whose q/k/v and gate/up weights are packed and run as one
//! product each (`vkformers_models::packed`), gives the tokens transformers gives and the tokens
//! of the separate products: through `generate` (one prompt; a batch of 20 left-padded prompts
//! whose decode steps run past the GEMV's rows, on the GEMM) and through the engine, on llama
//! (GQA), qwen2 (q/k/v biases), gemma (GeGLU), phi3 (stored fused qkv_proj / gate_up_proj) and
//! olmo (clip_qkv), gpt_neox (partial rotary dim) and gptj (interleaved partial rotary), with f32
//! and bf16 weights. Those decode steps read q, k and v for the
//! rope + KV store in place from the packed product's rows (no split dispatch): the tokens and
//! the logits of each step equal those of the split path (`Packs::set_rope_in_place(false)`,
//! `VKFORMERS_PACKED_ROPE=0`) bit for bit, and those of the separate products.

mod common;

use common::{cached_decode_logits, fixtures_root, ids, json};
use vkformers_generate::engine::{Engine, Request, RequestOptions};
use vkformers_generate::generation::{generate, GenerateOptions};
use vkformers_models::model::Model;
use vkformers_tensor::{DType, Graph};
use vkformers_vk::testing::on_every_device;

use common::sink::Gather;

const FAMILIES: [&str; 7] = ["llama", "qwen2", "gemma", "phi3", "olmo", "gpt_neox", "gptj"];

/// 20 prompts of lengths 1 to 12 (more rows than the GEMV takes on lavapipe: 16).
fn many_prompts() -> Vec<Vec<u32>> {
    (0..20).map(|i| (0..1 + i % 12).map(|j| ((i * 7 + j * 13) % 60 + 3) as u32).collect()).collect()
}

/// Greedy tokens of `prompts` generated together.
fn greedy(g: &Graph<'_>, model: &Model, prompts: &[Vec<u32>], n: usize) -> Vec<Vec<u32>> {
    g.no_grad(|| generate(g, model, prompts, &GenerateOptions::greedy(n), &mut |_, _| false)).unwrap().rows
}

/// Greedy tokens of `prompts` through an engine running all of them at once.
fn engine_greedy(g: &Graph<'_>, model: &Model, prompts: &[Vec<u32>], n: usize) -> Vec<Vec<u32>> {
    let mut engine = Engine::new(g, model, prompts.len(), 64).unwrap();
    for (i, p) in prompts.iter().enumerate() {
        let opts = RequestOptions::from_generate(&GenerateOptions::greedy(n));
        engine.submit(Request { id: i as u64, prompt: p.clone(), opts }).unwrap();
    }
    let mut out = Gather::default();
    while !engine.is_idle() {
        engine.step(g, &mut out).unwrap();
    }
    (0..prompts.len()).map(|i| out.done.remove(&(i as u64)).expect("finished").tokens).collect()
}

/// Logits `[rows, V]` of a 5-token prefill of `rows` rows and of three decode steps after it
/// (`common::cached_decode_logits`), and the splits of a packed product (`split_cols` calls) in
/// the last step.
fn decode_logits(g: &Graph<'_>, model: &Model, rows: usize) -> (Vec<Vec<f32>>, u64) {
    let (out, profile) = cached_decode_logits(g, model, rows, vec![1; rows * 5]);
    let splits = profile.kernels.iter().filter(|(n, _)| n.starts_with("elementwise/split_cols")).map(|(_, k)| k.calls);
    (out, splits.sum())
}

/// `a` and `b` bit for bit (`what` names them).
fn same_bits(what: &str, a: &[Vec<f32>], b: &[Vec<f32>]) {
    for (step, (x, y)) in a.iter().zip(b).enumerate() {
        assert_eq!(x.len(), y.len(), "{what}: step {step} lengths");
        let diff = x.iter().zip(y).position(|(p, q)| p.to_bits() != q.to_bits());
        assert!(diff.is_none(), "{what}: step {step} logit {diff:?} differs");
    }
}

/// transformers' greedy tokens for the fixture's prompts, with the packed products.
fn check_reference(g: &Graph<'_>, model: &Model, name: &str) {
    let want = json(&fixtures_root().join(name).join("greedy.json"));
    for (prompt, expected) in ids_of(&want["prompts"]).iter().zip(ids_of(&want["new_tokens"])) {
        let got = greedy(g, model, std::slice::from_ref(prompt), expected.len());
        assert_eq!(got[0], expected, "{name}: greedy tokens after {prompt:?} with packed products");
    }
}

fn set_rope_in_place(model: &mut Model, on: bool) {
    let mut packs = model.weights.packs().clone();
    packs.set_rope_in_place(on);
    model.weights.set_packs(packs);
}

fn ids_of(v: &serde_json::Value) -> Vec<Vec<u32>> {
    v.as_array().unwrap().iter().map(ids).collect()
}

#[test]
fn packed_products_generate_the_tokens_of_the_separate_ones() {
    on_every_device("packed generate", |ctx| {
        for name in FAMILIES {
            for dtype in [DType::F32, DType::BF16] {
                let g = Graph::new(ctx);
                let mut model = Model::load_for_inference(&g, &fixtures_root().join(name), dtype).unwrap();
                assert!(!model.weights.packs().is_empty(), "{name}: an inference load packs");
                if dtype == DType::F32 {
                    check_reference(&g, &model, name);
                } else {
                    g.set_autocast(Some(dtype));
                }
                let prompts = many_prompts();
                let (batch_on, engine_on) = (greedy(&g, &model, &prompts, 5), engine_greedy(&g, &model, &prompts, 5));
                let (logits_on, splits_on) = decode_logits(&g, &model, prompts.len());
                // The split path: q, k, v copied out of the packed product before the rope.
                set_rope_in_place(&mut model, false);
                let (batch_split, engine_split) =
                    (greedy(&g, &model, &prompts, 5), engine_greedy(&g, &model, &prompts, 5));
                let (logits_split, splits) = decode_logits(&g, &model, prompts.len());
                let layers = model.spec.layers.len() as u64;
                assert_eq!((splits_on, splits), (0, layers), "{name} {dtype:?}: splits in a decode step");
                same_bits(&format!("{name} {dtype:?}: in place vs split"), &logits_on, &logits_split);
                assert_eq!(batch_on, batch_split, "{name} {dtype:?}: generate, rope in place vs split");
                assert_eq!(engine_on, engine_split, "{name} {dtype:?}: engine, rope in place vs split");
                set_rope_in_place(&mut model, true);
                model.weights.set_packed_products(false);
                if dtype == DType::F32 {
                    // The separate products sum as the packed one does in f32 on lavapipe.
                    same_bits(&format!("{name}: packed vs separate"), &logits_on, &decode_logits(&g, &model, 20).0);
                }
                let (batch_off, engine_off) = (greedy(&g, &model, &prompts, 5), engine_greedy(&g, &model, &prompts, 5));
                assert_eq!(batch_on, batch_off, "{name} {dtype:?}: generate, packed vs separate products");
                assert_eq!(engine_on, engine_off, "{name} {dtype:?}: engine, packed vs separate products");
            }
        }
        Ok(())
    });
}
