//! The generation loop on parity fixtures: EOS finishes one row of a batch without disturbing the
//! others; the caller's callback sees every token and can stop a row; a KV cache carried over to a
//! longer context (a chat turn) gives the tokens of a fresh run over that context, also after a
//! sliding-window layer rolled; seeded sampling repeats exactly and timings are filled.

mod common;

use std::path::PathBuf;

use vkformers_generate::decode::{greedy_batched, greedy_cached};
use vkformers_generate::generation::{generate, generate_cached, Context, Finish, GenerateOptions};
use vkformers_generate::SamplingParams;
use vkformers_models::decoder::KvCache;
use vkformers_models::model::Model;
use vkformers_tensor::Graph;
use vkformers_vk::testing::on_every_device;

fn fixture(name: &str) -> PathBuf {
    PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("../../tests/fixtures").join(name)
}

fn prompts(name: &str) -> Vec<Vec<u32>> {
    let v: serde_json::Value =
        serde_json::from_str(&std::fs::read_to_string(fixture(name).join("greedy.json")).unwrap()).unwrap();
    v["prompts"]
        .as_array()
        .unwrap()
        .iter()
        .map(|r| r.as_array().unwrap().iter().map(|t| t.as_u64().unwrap() as u32).collect())
        .collect()
}

#[test]
fn eos_finishes_one_row_and_the_callback_sees_every_token() {
    on_every_device("generation_eos", |ctx| {
        let g = Graph::new(ctx);
        let model = Model::load(&g, &fixture("llama")).unwrap();
        let prompts = prompts("llama");
        let free = greedy_batched(&g, &model, &prompts, 16).unwrap();
        // An EOS id that row 0 produces early and row 1 never produces.
        let eos = *free[0][2..].iter().find(|t| !free[1].contains(t)).expect("a token only row 0 produces");
        let cut = free[0].iter().position(|&t| t == eos).unwrap() + 1;
        let opts = GenerateOptions { eos: vec![eos], ..GenerateOptions::greedy(16) };
        let mut seen = vec![Vec::new(); 2];
        let gen = generate(&g, &model, &prompts, &opts, &mut |row, ids| {
            seen[row] = ids.to_vec();
            false
        })
        .unwrap();
        assert_eq!(gen.rows[0], free[0][..cut], "row 0 ends at its EOS");
        assert_eq!(gen.rows[1], free[1], "row 1 is not disturbed by row 0 finishing");
        assert_eq!(gen.finish, vec![Finish::Eos, Finish::Length]);
        assert_eq!(seen, gen.rows, "the callback saw every token");
        assert_eq!(gen.timings.prefill_tokens, prompts[0].len() + prompts[1].len());
        assert_eq!(gen.timings.decode_tokens, gen.rows[0].len() + gen.rows[1].len() - 2);
        assert!(gen.timings.prefill_secs > 0.0 && gen.timings.decode_secs > 0.0);

        // A callback that stops row 1 after 5 tokens.
        let gen =
            generate(&g, &model, &prompts, &GenerateOptions::greedy(16), &mut |row, ids| row == 1 && ids.len() == 5)
                .unwrap();
        assert_eq!(gen.rows[1], free[1][..5]);
        assert_eq!(gen.rows[0], free[0]);
        assert_eq!(gen.finish, vec![Finish::Length, Finish::Stopped]);
        Ok(())
    });
}

/// `generate` records step s + 1 on the device before reading step s's ids (plain greedy); its
/// tokens equal the synchronous loop's (`Stepping::Synchronous` on a fresh cache) over 70 steps, past the
/// full synchronisation every 64, with a row finishing early at an EOS while the other runs on.
#[test]
fn running_ahead_gives_the_synchronous_loops_tokens() {
    on_every_device("generation_lookahead", |ctx| {
        for name in ["llama", "gemma2", "qwen3_moe"] {
            let g = Graph::new(ctx);
            let model = Model::load(&g, &fixture(name)).unwrap();
            let prompts = prompts(name);
            let synchronous = |opts: &GenerateOptions| common::synchronous(&g, &model, &prompts, opts);
            let opts = GenerateOptions::greedy(70);
            let sync = synchronous(&opts);
            let ahead = generate(&g, &model, &prompts, &opts, &mut |_, _| false).unwrap();
            assert_eq!(ahead.rows, sync.rows, "{name}: 70 tokens");
            // Row 0 stops at a token row 1 never produces; row 1 runs on past it.
            let eos =
                *sync.rows[0][3..].iter().find(|t| !sync.rows[1].contains(t)).expect("a token only row 0 produces");
            let opts = GenerateOptions { eos: vec![eos], ..GenerateOptions::greedy(70) };
            let sync = synchronous(&opts);
            let ahead = generate(&g, &model, &prompts, &opts, &mut |_, _| false).unwrap();
            assert_eq!(ahead.rows, sync.rows, "{name}: row 0 ends at its EOS");
            assert_eq!(ahead.finish, vec![Finish::Eos, Finish::Length], "{name}");
        }
        Ok(())
    });
}

/// Generates `n` tokens after `first`, then continues the same cache after `first + reply +
/// extra` (as a chat turn does) and compares with a fresh cache over that whole context.
fn continued_equals_fresh(name: &str, first: &[u32], extra: &[u32], n: usize) {
    on_every_device("generation_continue", |ctx| {
        let g = Graph::new(ctx);
        let model = Model::load(&g, &fixture(name)).unwrap();
        let opts = GenerateOptions::greedy(n);
        let mut cache = KvCache::new(&g, &model.spec, 4).unwrap();
        let one = |ids: &[u32]| Context { history: vec![ids.to_vec()], masks: vec![vec![1; ids.len()]] };
        let reply =
            generate_cached(&g, &model, &mut cache, one(first), &opts, &mut |_, _| false).unwrap().rows.remove(0);
        assert_eq!(cache.len(), first.len() + n - 1, "{name}: the cache holds all but the last token");
        let context: Vec<u32> = first.iter().chain(&reply).chain(extra).copied().collect();
        let continued =
            generate_cached(&g, &model, &mut cache, one(&context), &opts, &mut |_, _| false).unwrap().rows.remove(0);
        let fresh = greedy_cached(&g, &model, &context, n).unwrap();
        assert_eq!(continued, fresh, "{name}: continued cache vs fresh prefill");
        Ok(())
    });
}

#[test]
fn a_continued_cache_equals_a_fresh_one() {
    let p = prompts("llama");
    continued_equals_fresh("llama", &p[0], &p[1], 6);
    // A window of 4: the first turn rolls the windowed layers before the multi-token second turn.
    let p = prompts("mistral");
    continued_equals_fresh("mistral", &p[1], &p[0], 12);
    // LongRoPE: the second turn crosses the original context of 32 and starts over.
    let p = prompts("phi3");
    continued_equals_fresh("phi3", &p[1], &p[0].repeat(4), 8);
}

#[test]
fn seeded_batched_sampling_repeats_exactly() {
    on_every_device("generation_sampling", |ctx| {
        let g = Graph::new(ctx);
        let model = Model::load(&g, &fixture("qwen2")).unwrap();
        let prompts = prompts("qwen2");
        let params = SamplingParams {
            temperature: 1.3,
            top_k: 20,
            top_p: 0.95,
            repetition_penalty: 1.1,
            ..SamplingParams::sampling()
        };
        let opts = |seed| GenerateOptions { params: params.clone(), seed, ..GenerateOptions::greedy(20) };
        let run = |seed| generate(&g, &model, &prompts, &opts(seed), &mut |_, _| false).unwrap().rows;
        let (a, b, c) = (run(3), run(3), run(4));
        assert_eq!(a, b);
        assert_ne!(a, c);
        assert_ne!(a, greedy_batched(&g, &model, &prompts, 20).unwrap());
        Ok(())
    });
}
