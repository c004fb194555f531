//! Greedy decoding against transformers on every parity fixture (32 new tokens after the two
//! prompts of different lengths in `greedy.json`, which transformers generated one prompt at a
//! time with its KV cache):
//! - uncached (full-prefix) decoding gives transformers' tokens, and cached decoding the same;
//! - the two prompts batched with left padding give the same tokens, and the tokens transformers'
//!   `generate` gives for the same left-padded batch (`tests/fixtures_generate/batched/`, written
//!   by `tools/parity/batched_greedy_reference.py`);
//! - sliding-window layers keep a rolling cache (fewer slots than positions) without changing a
//!   token; LongRoPE (phi3, original context 32) switches to its long factors past 32 positions.

mod common;

use std::path::{Path, PathBuf};

use common::{fixtures_root as root, json};

use vkformers_generate::argmax;
use vkformers_generate::decode::{greedy_batched, greedy_cached, greedy_uncached};
use vkformers_generate::generation::left_pad;
use vkformers_models::decoder::{forward_cached, Batch, KvCache};
use vkformers_models::model::Model;
use vkformers_models::parity::fixtures;
use vkformers_tensor::Graph;
use vkformers_vk::testing::on_every_device;

fn batched_root() -> PathBuf {
    PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("../../tests/fixtures_generate/batched")
}

/// A JSON array of rows of token ids.
fn ids(v: &serde_json::Value) -> Vec<Vec<u32>> {
    v.as_array().unwrap().iter().map(common::ids).collect()
}

/// The fixtures of models that generate (encoder fixtures have no `greedy.json`).
fn generating_fixtures() -> Vec<std::path::PathBuf> {
    fixtures(&root()).into_iter().filter(|d| d.join("greedy.json").exists()).collect()
}

fn name(dir: &Path) -> String {
    dir.file_name().unwrap().to_string_lossy().into_owned()
}

#[test]
fn cached_and_uncached_greedy_match_transformers_on_every_fixture() {
    let dirs = generating_fixtures();
    assert!(dirs.len() >= 20, "fixtures missing under {}", root().display());
    on_every_device("greedy", |ctx| {
        for dir in &dirs {
            let name = name(dir);
            let want = json(&dir.join("greedy.json"));
            let g = Graph::new(ctx);
            let model = Model::load(&g, dir).unwrap();
            for (prompt, expected) in ids(&want["prompts"]).iter().zip(ids(&want["new_tokens"])) {
                let n = expected.len();
                let got = greedy_uncached(&g, &model, prompt, n).unwrap_or_else(|e| panic!("{name}: {e}"));
                assert_eq!(got, expected, "{name}: greedy tokens after prompt {prompt:?}");
                let cached = greedy_cached(&g, &model, prompt, n).unwrap_or_else(|e| panic!("{name}: {e}"));
                assert_eq!(cached, got, "{name}: cached and uncached greedy tokens after prompt {prompt:?}");
            }
        }
        Ok(())
    });
}

#[test]
fn batched_left_padded_greedy_matches_transformers_on_every_fixture() {
    let dirs = generating_fixtures();
    assert!(dirs.len() >= 20, "fixtures missing under {}", root().display());
    on_every_device("greedy_batched", |ctx| {
        for dir in &dirs {
            let name = name(dir);
            let per_prompt = json(&dir.join("greedy.json"));
            let batched = json(&batched_root().join(format!("{name}.json")));
            let prompts = ids(&per_prompt["prompts"]);
            assert_eq!(ids(&batched["prompts"]), prompts, "{name}: batched reference of other prompts");
            let g = Graph::new(ctx);
            let model = Model::load(&g, dir).unwrap();
            let got = greedy_batched(&g, &model, &prompts, 32).unwrap_or_else(|e| panic!("{name}: {e}"));
            let want = ids(&batched["new_tokens"]);
            assert_eq!(got, want, "{name}: batched greedy vs transformers' batched generate");
            // One prompt at a time gives the same tokens, except where transformers' own batched
            // run differs: LongRoPE switches factors for the whole batch once its longest row
            // passes the original context, so phi3's shorter row switches earlier than alone.
            for (row, (alone, in_batch)) in ids(&per_prompt["new_tokens"]).iter().zip(&want).enumerate() {
                if alone == in_batch {
                    assert_eq!(&got[row], alone, "{name}: row {row} batched vs one prompt at a time");
                } else {
                    assert_eq!(name, "phi3", "{name}: transformers' batched and single runs differ in row {row}");
                }
            }
        }
        Ok(())
    });
}

/// Cached greedy steps driven by hand so the cache's slots can be inspected: `(tokens per row,
/// slots per layer at the end)`.
fn greedy_with_cache(g: &Graph<'_>, model: &Model, prompts: &[Vec<u32>], n: usize) -> (Vec<Vec<u32>>, Vec<usize>) {
    let (ids, mask, width) = left_pad(prompts, 0);
    let b = prompts.len();
    let cache = KvCache::batched(g, &model.spec, b, width + n).unwrap();
    let mut out = vec![Vec::new(); b];
    g.no_grad(|| {
        let (mut ids, mut mask, mut t) = (ids, mask, width);
        for _ in 0..n {
            let batch = Batch { ids: &ids, mask: &mask, batch: b, seq: t };
            let logits = g.read(&forward_cached(g, &model.spec, &model.weights, &batch, &cache).unwrap()).unwrap();
            let vocab = logits.len() / (b * t);
            ids = (0..b)
                .map(|r| {
                    let last = &logits[((r + 1) * t - 1) * vocab..(r + 1) * t * vocab];
                    let tok = argmax(last).unwrap();
                    out[r].push(tok);
                    tok as i32
                })
                .collect();
            (mask, t) = (vec![1; b], 1);
        }
    });
    (out, cache.layer_slots())
}

#[test]
fn sliding_window_layers_roll_without_changing_tokens() {
    let windowed = ["mistral", "gemma2", "gemma3_text", "starcoder2", "smollm3"];
    on_every_device("rolling_cache", |ctx| {
        for name in windowed {
            let dir = root().join(name);
            let want = json(&dir.join("greedy.json"));
            let g = Graph::new(ctx);
            let model = Model::load(&g, &dir).unwrap();
            let prompts = ids(&want["prompts"]);
            let total = prompts.iter().map(Vec::len).max().unwrap() + 32;
            for batch in [vec![prompts[1].clone()], prompts.clone()] {
                let (got, slots) = greedy_with_cache(&g, &model, &batch, 32);
                let expected: Vec<Vec<u32>> =
                    ids(&want["new_tokens"]).into_iter().skip(if batch.len() == 1 { 1 } else { 0 }).collect();
                assert_eq!(got, expected, "{name}: rolling-cache greedy tokens (batch of {})", batch.len());
                for (layer, (spec, s)) in model.spec.layers.iter().zip(&slots).enumerate() {
                    match spec.attn.sliding_window {
                        Some(w) => {
                            assert!(
                                (w as usize) < total && *s < total,
                                "{name} layer {layer}: {s} slots for window {w}"
                            )
                        }
                        None => assert!(*s >= total, "{name} layer {layer}: global layer holds {s} < {total}"),
                    }
                }
                assert!(
                    model.spec.layers.iter().any(|l| l.attn.sliding_window.is_some()),
                    "{name}: no sliding-window layer in the fixture"
                );
            }
        }
        Ok(())
    });
}

#[test]
fn longrope_switches_to_long_factors_past_the_original_context() {
    let dir = root().join("phi3");
    let config = json(&dir.join("config.json"));
    let original = config["original_max_position_embeddings"].as_u64().unwrap() as usize;
    let want = json(&dir.join("greedy.json"));
    on_every_device("longrope", |ctx| {
        let g = Graph::new(ctx);
        let model = Model::load(&g, &dir).unwrap();
        let rope = model.spec.layers[0].attn.rope.as_ref().unwrap();
        let (long, ctx_len) = rope.long.as_ref().expect("phi3 longrope: long factors");
        assert_eq!(*ctx_len, original);
        assert_ne!(long, &rope.inv_freq);
        for (prompt, expected) in ids(&want["prompts"]).iter().zip(ids(&want["new_tokens"])) {
            // Generation runs past the original context: every token after it depends on the switch.
            assert!(prompt.len() + expected.len() > original);
            let cached = greedy_cached(&g, &model, prompt, expected.len()).unwrap();
            assert_eq!(cached, expected, "phi3 cached greedy past the original context");
        }
        Ok(())
    });
}
