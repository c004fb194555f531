//! Continuous batching over the paged KV cache: more prompts (of different lengths) than slots,
//! rows finishing at different steps (the caller's stop after a per-prompt count, an EOS, the
//! length limit), each waiting prompt taking the first free slot. Every prompt gets exactly the
//! tokens it gets alone (greedy; cached alone = transformers by `tests/greedy.rs`), on a plain
//! GQA model, sliding-window models (window 4: their blocks recycle), softcapped gemma2, and
//! LongRoPE phi3 (rows cross the original context at different steps). Timings add up.

use std::path::PathBuf;

use vkformers_generate::continuous::generate_continuous;
use vkformers_generate::decode::greedy_cached;
use vkformers_generate::generation::{Finish, GenerateOptions};
use vkformers_models::model::Model;
use vkformers_tensor::Graph;
use vkformers_vk::testing::on_every_device;

fn fixture(name: &str) -> PathBuf {
    PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("../../tests/fixtures").join(name)
}

/// Eight prompts of lengths 1..=26 built from the fixture's two prompts.
fn prompts(name: &str) -> Vec<Vec<u32>> {
    let v: serde_json::Value =
        serde_json::from_str(&std::fs::read_to_string(fixture(name).join("greedy.json")).unwrap()).unwrap();
    let base: Vec<Vec<u32>> = v["prompts"]
        .as_array()
        .unwrap()
        .iter()
        .map(|r| r.as_array().unwrap().iter().map(|t| t.as_u64().unwrap() as u32).collect())
        .collect();
    let both: Vec<u32> = base.concat();
    vec![
        // Past phi3's original context (32) during generation, while the others run.
        both.iter().cycle().copied().take(26).collect(),
        base[0].clone(),
        both[..1].to_vec(),
        base[1].clone(),
        both.iter().rev().copied().take(17).collect(),
        both[2..7].to_vec(),
        both.clone(),
        vec![both[3]; 3],
    ]
}

/// Tokens each prompt may produce before the caller stops it: staggered, so slots free at
/// different steps; prompts 0 and 3 run to `max_new_tokens`.
fn limit(prompt: usize) -> usize {
    [20, 9, 3, 20, 6, 11, 2, 8][prompt]
}

#[test]
fn continuous_batching_gives_every_prompt_its_tokens_alone() {
    let models = ["qwen2", "llama", "mistral", "gemma2", "starcoder2", "phi3"];
    on_every_device("continuous batching", |ctx| {
        for name in models {
            let g = Graph::new(ctx);
            let model = Model::load(&g, &fixture(name)).unwrap();
            let prompts = prompts(name);
            let max_new = 12;
            let alone: Vec<Vec<u32>> = prompts
                .iter()
                .enumerate()
                .map(|(i, p)| {
                    let mut t = greedy_cached(&g, &model, p, max_new).unwrap();
                    t.truncate(limit(i));
                    t
                })
                .collect();
            for max_batch in [1, 3] {
                let opts = GenerateOptions::greedy(max_new);
                let mut seen = vec![0; prompts.len()];
                let gen = generate_continuous(&g, &model, &prompts, &opts, max_batch, &mut |p, ids| {
                    seen[p] += 1;
                    assert_eq!(ids.len(), seen[p], "{name}: prompt {p}: tokens reported one at a time");
                    ids.len() == limit(p)
                })
                .unwrap();
                assert_eq!(gen.rows, alone, "{name}: max_batch {max_batch}: tokens vs each prompt alone");
                for (p, f) in gen.finish.iter().enumerate() {
                    let want = if limit(p) > max_new { Finish::Length } else { Finish::Stopped };
                    assert_eq!(*f, want, "{name}: prompt {p} finish");
                }
                let t = &gen.timings;
                assert_eq!(t.prefill_tokens, prompts.iter().map(Vec::len).sum::<usize>(), "{name}");
                assert_eq!(t.decode_tokens, alone.iter().map(|r| r.len() - 1).sum::<usize>(), "{name}");
                assert!(t.prefill_secs > 0.0 && t.decode_secs > 0.0 && t.decode_tokens_per_sec() > 0.0);
                for (p, r) in gen.per_row.iter().enumerate() {
                    assert_eq!((r.prefill_tokens, r.decode_tokens), (prompts[p].len(), alone[p].len() - 1), "{name}");
                    assert!(r.prefill_secs > 0.0 && r.decode_secs >= 0.0);
                }
            }
        }
        Ok(())
    });
}

#[test]
fn an_eos_frees_the_slot_for_the_next_prompt() {
    on_every_device("continuous batching eos", |ctx| {
        let g = Graph::new(ctx);
        let model = Model::load(&g, &fixture("llama")).unwrap();
        let prompts = prompts("llama");
        let free: Vec<Vec<u32>> = prompts.iter().map(|p| greedy_cached(&g, &model, p, 10).unwrap()).collect();
        // An EOS id that prompt 0 produces early.
        let eos = free[0][1];
        let want: Vec<Vec<u32>> =
            free.iter().map(|r| r.iter().position(|&t| t == eos).map_or(r.clone(), |at| r[..=at].to_vec())).collect();
        let opts = GenerateOptions { eos: vec![eos], ..GenerateOptions::greedy(10) };
        let gen = generate_continuous(&g, &model, &prompts, &opts, 2, &mut |_, _| false).unwrap();
        assert_eq!(gen.rows, want);
        assert_eq!(gen.finish[0], Finish::Eos);
        for (r, f) in want.iter().zip(&gen.finish) {
            assert_eq!(*f == Finish::Eos, r.last() == Some(&eos));
        }
        Ok(())
    });
}
