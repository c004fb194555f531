//! Multi-head latent attention's generation cache: the cache holds `kv_lora_rank +
//! qk_rope_head_dim` values per token per layer (the latent and the rotary key, not full keys and
//! values), and greedy decoding over it (absorbed projections) gives the tokens of uncached
//! greedy decoding and of transformers (`greedy.json`).

use std::path::PathBuf;

use vkformers_models::decoder::{forward, forward_cached_last, Batch, KvCache};
use vkformers_models::model::Model;
use vkformers_tensor::Graph;
use vkformers_vk::testing::on_every_device;

mod common;

fn fixture(name: &str) -> PathBuf {
    PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("../../tests/fixtures").join(name)
}

fn argmax(v: &[f32]) -> i32 {
    (0..v.len()).fold(0, |best, i| if v[i] > v[best] { i } else { best }) as i32
}

/// Greedy tokens after `prompt`: over the cache (prefill, then one token a forward) and uncached
/// (the whole sequence each step).
fn greedy(g: &Graph<'_>, model: &Model, cache: &KvCache, prompt: &[i32], n: usize) -> (Vec<i32>, Vec<i32>) {
    let (spec, w) = (&model.spec, &model.weights);
    g.no_grad(|| {
        let (mut cached, mut feed) = (Vec::new(), prompt.to_vec());
        for _ in 0..n {
            let mask = vec![1; feed.len()];
            let batch = Batch { ids: &feed, mask: &mask, batch: 1, seq: feed.len() };
            let next = argmax(&g.read(&forward_cached_last(g, spec, w, &batch, cache).unwrap()).unwrap());
            cached.push(next);
            feed = vec![next];
        }
        let mut seq = prompt.to_vec();
        for _ in 0..n {
            let mask = vec![1; seq.len()];
            let logits =
                g.read(&forward(g, spec, w, &Batch { ids: &seq, mask: &mask, batch: 1, seq: seq.len() }).unwrap());
            let vocab = spec.vocab;
            seq.push(argmax(&logits.unwrap()[(seq.len() - 1) * vocab..]));
        }
        (cached, seq[prompt.len()..].to_vec())
    })
}

#[test]
fn latent_cache_holds_the_latent_and_decodes_as_uncached_and_transformers() {
    on_every_device("mla latent cache", |ctx| {
        // Every MLA family, and DeepSeek-V3 with a latent row (288 values) wider than the paged
        // decode kernel's 256.
        for name in common::MLA_FIXTURES.into_iter().chain(["deepseek_v3_wide"]) {
            let g = Graph::new(ctx);
            let model = Model::load(&g, &fixture(name)).unwrap();
            let cfg = &model.config;
            let latent = (cfg["kv_lora_rank"].as_u64().unwrap() + cfg["qk_rope_head_dim"].as_u64().unwrap()) as usize;
            let layers = model.spec.layers.len();
            let want: serde_json::Value =
                serde_json::from_str(&std::fs::read_to_string(fixture(name).join("greedy.json")).unwrap()).unwrap();
            for (prompt, expected) in
                want["prompts"].as_array().unwrap().iter().zip(want["new_tokens"].as_array().unwrap())
            {
                let prompt: Vec<i32> = prompt.as_array().unwrap().iter().map(|t| t.as_i64().unwrap() as i32).collect();
                let expected: Vec<i32> =
                    expected.as_array().unwrap().iter().map(|t| t.as_i64().unwrap() as i32).collect();
                let cache = KvCache::new(&g, &model.spec, 64).unwrap();
                // layers × (kv_lora_rank + qk_rope_head_dim) values a token, no full keys or values.
                assert_eq!(cache.values_per_token(), layers * latent, "{name}: values cached per token");
                let (cached, uncached) = greedy(&g, &model, &cache, &prompt, expected.len());
                assert_eq!(cache.len(), prompt.len() + expected.len() - 1, "{name}: tokens held");
                assert_eq!(uncached, expected, "{name}: uncached greedy vs transformers");
                assert_eq!(cached, expected, "{name}: latent-cached greedy vs transformers");
            }
        }
        Ok(())
    });
}

/// A.X-K2's DSA indexer keeps `index_topk` keys a query: the graph (dense attention, exact up to
/// that many keys) refuses a longer sequence instead of attending to keys the indexer would drop.
#[test]
fn sparse_attention_past_index_topk_is_refused() {
    on_every_device("axk2 index_topk", |ctx| {
        let g = Graph::new(ctx);
        let mut model = Model::load(&g, &fixture("axk2")).unwrap();
        for l in &mut model.spec.layers {
            l.attn.mla.as_mut().unwrap().index_topk = Some(4);
        }
        let (spec, w) = (&model.spec, &model.weights);
        let run = |ids: &[i32]| {
            let mask = vec![1; ids.len()];
            g.no_grad(|| forward(&g, spec, w, &Batch { ids, mask: &mask, batch: 1, seq: ids.len() }).map(|_| ()))
        };
        assert!(run(&[5, 17, 42, 9]).is_ok(), "4 keys, all kept by the indexer");
        let e = run(&[5, 17, 42, 9, 100]).unwrap_err().to_string();
        assert!(e.contains("index_topk"), "5 keys: `{e}`");
        Ok(())
    });
}

/// bf16 weights for inference (`load_for_inference`: the MLA projections, kv_b_proj included,
/// stored 16-bit): the absorbed products over the latent cache read them as the projections do.
#[test]
fn latent_cache_decodes_with_bf16_weights() {
    on_every_device("mla latent cache bf16", |ctx| {
        for name in ["deepseek_v3", "deepseek_v3_wide"] {
            let g = Graph::new(ctx);
            let model = Model::load_for_inference(&g, &fixture(name), vkformers_tensor::DType::BF16).unwrap();
            let kv_b = "model.layers.0.self_attn.kv_b_proj.weight";
            assert_eq!(model.weights.get(kv_b).unwrap().dtype(), vkformers_tensor::DType::BF16, "{name}: kv_b_proj");
            let cache = KvCache::new(&g, &model.spec, 64).unwrap();
            let (cached, uncached) = greedy(&g, &model, &cache, &[5, 17, 42, 9, 100], 8);
            // Both decode the same bf16 model: the absorbed form may round differently, so only the
            // first token (after the prefill, where both attend over the same 5 keys) must agree.
            assert_eq!(cached[0], uncached[0], "{name}: first token over the latent cache vs uncached");
            assert!(cached.iter().all(|&t| (0..model.spec.vocab as i32).contains(&t)));
        }
        Ok(())
    });
}

/// `greedy.json`'s prompts and transformers' new tokens.
fn references(name: &str) -> (Vec<Vec<i32>>, Vec<Vec<i32>>) {
    let want: serde_json::Value =
        serde_json::from_str(&std::fs::read_to_string(fixture(name).join("greedy.json")).unwrap()).unwrap();
    let ints = |v: &serde_json::Value| -> Vec<Vec<i32>> {
        v.as_array()
            .unwrap()
            .iter()
            .map(|r| r.as_array().unwrap().iter().map(|t| t.as_i64().unwrap() as i32).collect())
            .collect()
    };
    (ints(&want["prompts"]), ints(&want["new_tokens"]))
}

/// One cached forward of `rows` (left-padded to the longest) on a 2-row cache: each row's argmax
/// after its last column.
fn step(g: &Graph<'_>, model: &Model, cache: &KvCache, rows: &[Vec<i32>]) -> Vec<i32> {
    let t = rows.iter().map(Vec::len).max().unwrap();
    let mut ids = Vec::new();
    let mut mask = Vec::new();
    for r in rows {
        ids.extend(std::iter::repeat_n(0, t - r.len()).chain(r.iter().copied()));
        mask.extend(std::iter::repeat_n(0, t - r.len()).chain(std::iter::repeat_n(1, r.len())));
    }
    let batch = Batch { ids: &ids, mask: &mask, batch: rows.len(), seq: t };
    let logits = g.read(&forward_cached_last(g, &model.spec, &model.weights, &batch, cache).unwrap()).unwrap();
    logits.chunks(model.spec.vocab).map(argmax).collect()
}

/// Chat's next turn and a batch: a left-padded prefill of two rows, then a chunk of 12 and 10 new
/// tokens over the non-empty cache (more than a decode step: a wide latent's chunk attends in the
/// expanded form over the cached latents gathered back, decompressed by kv_b), then decode steps
/// and a short chunk of 3 and 2 tokens (the absorbed form with several new rows); every token is
/// transformers' greedy choice. The narrow fixture runs the absorbed form
/// throughout.
#[test]
fn a_chunk_over_a_filled_latent_cache_continues_as_transformers() {
    on_every_device("mla latent cache chunks", |ctx| {
        for name in ["deepseek_v3_wide", "deepseek_v3"] {
            let g = Graph::new(ctx);
            let model = Model::load(&g, &fixture(name)).unwrap();
            let (prompts, tokens) = references(name);
            let (p, e) = (&prompts, &tokens);
            let cache = KvCache::batched(&g, &model.spec, 2, 64).unwrap();
            g.no_grad(|| {
                step(&g, &model, &cache, &[p[0][..3].to_vec(), p[1][..4].to_vec()]);
                let chunk = [[&p[0][3..], &e[0][..10]].concat(), [&p[1][4..], &e[1][..5]].concat()];
                assert_eq!(step(&g, &model, &cache, &chunk), vec![e[0][10], e[1][5]], "{name}: after the chunk");
                for n in 0..6 {
                    let next = step(&g, &model, &cache, &[vec![e[0][10 + n]], vec![e[1][5 + n]]]);
                    assert_eq!(next, vec![e[0][11 + n], e[1][6 + n]], "{name}: decode step {n} after the chunk");
                }
                // A short chunk (3 and 2 new tokens, left-padded): the absorbed form, Tq > 1.
                let short = [e[0][16..19].to_vec(), e[1][11..13].to_vec()];
                assert_eq!(step(&g, &model, &cache, &short), vec![e[0][19], e[1][13]], "{name}: after a short chunk");
            });
            assert_eq!(cache.row_len(0), p[0].len() + 19, "{name}: row 0 tokens held");
        }
        Ok(())
    });
}

/// A latent row over the latent decode's 576 values is refused when the cache is made, naming
/// the widths, instead of failing at the first decode step.
#[test]
fn a_latent_wider_than_the_kernel_is_refused_up_front() {
    on_every_device("mla latent too wide", |ctx| {
        let g = Graph::new(ctx);
        let mut model = Model::load(&g, &fixture("deepseek_v3_wide")).unwrap();
        assert!(KvCache::new(&g, &model.spec, 64).is_ok());
        for l in &mut model.spec.layers {
            l.attn.mla.as_mut().unwrap().kv_lora_rank = 561;
        }
        let e = KvCache::new(&g, &model.spec, 64).err().expect("561 + 16 values cached").to_string();
        assert!(e.contains("561") && e.contains("576"), "{e}");
        Ok(())
    });
}
