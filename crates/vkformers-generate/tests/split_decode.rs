//! Decode steps over caches long enough that the paged attention splits each row's keys
//! (`decode::splits` > 1), so the splits are merged inside the attention dispatch by the last
//! workgroup of each row tile, counted in per-layer counters that every call must leave at zero
//! for the next layer's and the next step's calls: the logits of each step equal those of one
//! uncached forward over the whole sequence. Two rows of different lengths share the steps.

use vkformers_kernels::attention::decode::{self, DecodeShape};
use vkformers_models::decoder::{forward, forward_cached, Batch, KvCache};
use vkformers_models::lora::parity::rel_l2;
use vkformers_models::model::Model;
use vkformers_tensor::Graph;
use vkformers_vk::testing::on_every_device;

mod common;

/// Logits `[T, V]` of one uncached forward over `ids`.
fn full(g: &Graph<'_>, model: &Model, ids: &[i32]) -> Vec<f32> {
    let mask = vec![1; ids.len()];
    let batch = Batch { ids, mask: &mask, batch: 1, seq: ids.len() };
    g.no_grad(|| g.read(&forward(g, &model.spec, &model.weights, &batch).unwrap())).unwrap()
}

/// Logits `[B·T, V]` of the columns `rows` (one list per selected row) through `cache`.
fn step(g: &Graph<'_>, model: &Model, cache: &KvCache, rows: &[Vec<i32>]) -> Vec<f32> {
    let ids: Vec<i32> = rows.concat();
    let mask = vec![1; ids.len()];
    let batch = Batch { ids: &ids, mask: &mask, batch: rows.len(), seq: rows[0].len() };
    g.no_grad(|| g.read(&forward_cached(g, &model.spec, &model.weights, &batch, cache).unwrap())).unwrap()
}

#[test]
fn split_decode_steps_give_the_logits_of_one_full_forward() {
    let dir = common::fixtures_root().join("llama");
    on_every_device("split decode in the decoder", |ctx| {
        let g = Graph::new(ctx);
        let model = Model::load(&g, &dir).unwrap();
        let a = &model.spec.layers[0].attn;
        let seqs: Vec<Vec<i32>> = [300i32, 420].iter().map(|&n| (0..n).map(|i| (i * 7 + 3) % 120).collect()).collect();
        // The calls of the last steps split: 2 rows, each row's keys cut at least 2 ways.
        let shape = DecodeShape {
            batch: 2,
            tq: 1,
            hq: a.heads as u32,
            hkv: a.kv_heads as u32,
            d: a.head_dim as u32,
            dv: a.head_dim as u32,
            v_row: a.head_dim as u32,
            block_size: 16,
            num_blocks: 64,
            max_blocks: 32,
        };
        assert!(decode::splits(&shape, 300) > 1, "the test's caches are too short to split");
        let cache = KvCache::batched(&g, &model.spec, 2, 64).unwrap();
        let steps = 3;
        // Prefill each row alone (rows of different lengths), then steps of both rows at once.
        for (r, s) in seqs.iter().enumerate() {
            cache.select(&[r]).unwrap();
            step(&g, &model, &cache, &[s[..s.len() - steps].to_vec()]);
        }
        cache.select(&[0, 1]).unwrap();
        let want: Vec<Vec<f32>> = seqs.iter().map(|s| full(&g, &model, s)).collect();
        let vocab = want[0].len() / seqs[0].len();
        for k in (1..=steps).rev() {
            let cols: Vec<Vec<i32>> = seqs.iter().map(|s| vec![s[s.len() - k]]).collect();
            let got = step(&g, &model, &cache, &cols);
            for (r, s) in seqs.iter().enumerate() {
                let at = (s.len() - k) * vocab;
                let rel = rel_l2(&got[r * vocab..(r + 1) * vocab], &want[r][at..at + vocab]);
                assert!(rel <= 1e-5, "row {r}, {k} from the end: split decode off the full forward by {rel:e}");
            }
        }
        Ok(())
    });
}
