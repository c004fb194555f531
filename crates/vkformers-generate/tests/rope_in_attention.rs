//! A decode step with the rotary embedding and KV store inside the decode attention (the default;
//! `Packs::set_rope_in_attention`, `VKFORMERS_ROPE_IN_ATTN`) gives the logits and the greedy tokens
//! of the rope + store dispatch before the attention, bit for bit: one prompt and a batch of
//! prompts of different lengths (left-padded: rows of different cache lengths in one step), the
//! cached forward's logits of a prefill and three decode steps, and `generate`'s tokens; f32
//! weights (the fixture's greedy tokens from transformers too) and bf16 weights under autocast
//! (bf16 pools, f32 activations; more rows than the GEMV takes, so the packed q/k/v product
//! read in place). Families: llama (GQA), qwen2 (q/k/v biases), mistral (sliding window), gemma
//! (head dim as configured, GeGLU), gemma2 (softcap, sliding and global layers), gptj
//! (interleaved partial rotary dim), qwen3 (q/k norms before the rope), gpt_oss (learned sinks,
//! sliding window, MoE). Each checks that the fused kernel ran (no `decode_rope_store` in a
//! decode step, one `_rope` attention a layer) and that with the switch off it did not.

mod common;

use common::{cached_decode_logits, fixtures_root, ids, json};
use vkformers_generate::generation::{generate, GenerateOptions};
use vkformers_models::model::Model;
use vkformers_tensor::profile::Profile;
use vkformers_tensor::{DType, Graph};
use vkformers_vk::testing::on_every_device;

const FAMILIES: [&str; 8] = ["llama", "qwen2", "mistral", "gemma", "gemma2", "gptj", "qwen3", "gpt_oss"];

/// `rows` prompts of lengths 1 to 7.
fn prompts(rows: usize) -> Vec<Vec<u32>> {
    (0..rows).map(|i| (0..1 + i % 7).map(|j| ((i * 7 + j * 13) % 60 + 3) as u32).collect()).collect()
}

fn set_rope_in_attention(model: &mut Model, on: bool) {
    let mut packs = model.weights.packs().clone();
    packs.set_rope_in_attention(on);
    model.weights.set_packs(packs);
}

/// Calls of the kernels whose names start with `prefix` and contain `part`.
fn calls(p: &Profile, prefix: &str, part: &str) -> u64 {
    p.kernels.iter().filter(|(n, _)| n.starts_with(prefix) && n.contains(part)).map(|(_, k)| k.calls).sum()
}

/// Calls of the decode attention's `_rope` variants: the tiled kernel's, or the lean one's
/// (`VKFORMERS_DECODE_LEAN=1` over 16-bit pools).
fn rope_attention_calls(p: &Profile) -> u64 {
    calls(p, "attention/decode:", "_rope") + calls(p, "attention/decode_lean:", "_rope")
}

/// Logits `[rows, V]` of a prefill of `rows` left-padded rows (row r has 1 + r % 5 real tokens of
/// 5 columns) and of three decode steps after it, feeding each row's greedy id back, and the
/// profile of the last step.
fn decode_logits(g: &Graph<'_>, model: &Model, rows: usize) -> (Vec<Vec<f32>>, Profile) {
    let mask: Vec<i32> = (0..rows * 5).map(|i| i32::from(i % 5 >= 4 - (i / 5) % 5)).collect();
    cached_decode_logits(g, model, rows, mask)
}

/// `a` and `b` bit for bit (`what` names them).
fn same_bits(what: &str, a: &[Vec<f32>], b: &[Vec<f32>]) {
    for (step, (x, y)) in a.iter().zip(b).enumerate() {
        assert_eq!(x.len(), y.len(), "{what}: step {step} lengths");
        let diff = x.iter().zip(y).position(|(p, q)| p.to_bits() != q.to_bits());
        assert!(diff.is_none(), "{what}: step {step} logit {diff:?} differs");
    }
}

fn greedy(g: &Graph<'_>, model: &Model, prompts: &[Vec<u32>], n: usize) -> Vec<Vec<u32>> {
    g.no_grad(|| generate(g, model, prompts, &GenerateOptions::greedy(n), &mut |_, _| false)).unwrap().rows
}

/// Everything one switch position gives: logits of 1 and `rows` rows (with the last steps'
/// profiles), greedy tokens of the first prompt alone and of all of them together.
struct Run {
    logits: [(Vec<Vec<f32>>, Profile); 2],
    tokens: [Vec<Vec<u32>>; 2],
}

fn run(g: &Graph<'_>, model: &Model, rows: usize) -> Run {
    let p = prompts(rows);
    Run {
        logits: [decode_logits(g, model, 1), decode_logits(g, model, rows)],
        tokens: [greedy(g, model, &p[..1], 5), greedy(g, model, &p, 5)],
    }
}

fn check_family(g: &Graph<'_>, name: &str, dtype: DType) {
    let dir = fixtures_root().join(name);
    let mut model = Model::load_for_inference(g, &dir, dtype).unwrap();
    if dtype == DType::F32 {
        let want = json(&dir.join("greedy.json"));
        let (p, t) = (&want["prompts"][0], &want["new_tokens"][0]);
        let expected = ids(t);
        assert_eq!(greedy(g, &model, &[ids(p)], expected.len())[0], expected, "{name}: transformers' tokens");
    } else {
        g.set_autocast(Some(dtype));
    }
    // 20 rows: more than the GEMV takes on lavapipe (16), the packed product's path.
    let rows = 20;
    let on = run(g, &model, rows);
    set_rope_in_attention(&mut model, false);
    let off = run(g, &model, rows);
    g.set_autocast(None);
    let layers = model.spec.layers.len() as u64;
    for (n, what) in [(0, "1 row"), (1, "20 rows")] {
        let what = format!("{name} {dtype:?} {what}");
        let (p_on, p_off) = (&on.logits[n].1, &off.logits[n].1);
        assert_eq!(calls(p_on, "attention/decode_rope_store", ""), 0, "{what}: {:?}", p_on.kernels.keys());
        assert_eq!(rope_attention_calls(p_on), layers, "{what}: {:?}", p_on.kernels.keys());
        assert_eq!(calls(p_off, "attention/decode_rope_store", ""), layers, "{what}: {:?}", p_off.kernels.keys());
        assert_eq!(rope_attention_calls(p_off), 0, "{what}: {:?}", p_off.kernels.keys());
        same_bits(&format!("{what}: logits, rope in attention vs not"), &on.logits[n].0, &off.logits[n].0);
        assert_eq!(on.tokens[n], off.tokens[n], "{what}: greedy tokens, rope in attention vs not");
    }
}

#[test]
fn rope_in_attention_gives_the_logits_and_tokens_of_the_rope_store_dispatch_f32() {
    on_every_device("rope in attention f32", |ctx| {
        for name in FAMILIES {
            check_family(&Graph::new(ctx), name, DType::F32);
        }
        Ok(())
    });
}

#[test]
fn rope_in_attention_gives_the_logits_and_tokens_of_the_rope_store_dispatch_bf16() {
    on_every_device("rope in attention bf16", |ctx| {
        for name in FAMILIES {
            check_family(&Graph::new(ctx), name, DType::BF16);
        }
        Ok(())
    });
}
