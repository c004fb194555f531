//! The paged KV cache inside the decoder: logits of a sequence fed in pieces (a prefill, a
//! 3-token paged step, then single tokens) through a cache of 3-position blocks that starts with
//! room for 4 positions (its pools grow, sliding-window layers recycle blocks) equal the logits of
//! one uncached forward over the whole sequence; two rows of different lengths in one cache read
//! only their own blocks; a released row gives every block back.

use std::path::PathBuf;

use vkformers_models::decoder::{forward, forward_cached, Batch, KvCache};
use vkformers_models::lora::parity::rel_l2;
use vkformers_models::model::Model;
use vkformers_tensor::Graph;
use vkformers_vk::testing::on_every_device;

fn fixture(name: &str) -> PathBuf {
    PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("../../tests/fixtures").join(name)
}

/// Logits `[T, V]` of one uncached forward over `ids`.
fn full(g: &Graph<'_>, model: &Model, ids: &[i32]) -> Vec<f32> {
    let mask = vec![1; ids.len()];
    let batch = Batch { ids, mask: &mask, batch: 1, seq: ids.len() };
    g.no_grad(|| g.read(&forward(g, &model.spec, &model.weights, &batch).unwrap())).unwrap()
}

/// Logits of `pieces` (columns of every selected row) fed one after another through `cache`.
fn pieces(g: &Graph<'_>, model: &Model, cache: &KvCache, rows: &[Vec<i32>]) -> Vec<f32> {
    let ids: Vec<i32> = rows.concat();
    let (b, t) = (rows.len(), rows[0].len());
    let mask = vec![1; ids.len()];
    let batch = Batch { ids: &ids, mask: &mask, batch: b, seq: t };
    g.no_grad(|| g.read(&forward_cached(g, &model.spec, &model.weights, &batch, cache).unwrap())).unwrap()
}

#[test]
fn paged_steps_give_the_logits_of_one_full_forward() {
    on_every_device("paged cache in the decoder", |ctx| {
        for name in ["qwen2", "gemma2", "mistral", "bloom"] {
            let g = Graph::new(ctx);
            let model = Model::load(&g, &fixture(name)).unwrap();
            let seq: Vec<i32> = (0..11).map(|i| (i * 7 + 3) % 50).collect();
            let want = full(&g, &model, &seq);
            let vocab = want.len() / seq.len();
            let cache = KvCache::with_block_size(&g, &model.spec, 2, 4, 3).unwrap();
            cache.select(&[1]).unwrap();
            let mut got = Vec::new();
            for (a, b) in [(0, 5), (5, 8), (8, 9), (9, 10), (10, 11)] {
                got.extend(pieces(&g, &model, &cache, &[seq[a..b].to_vec()]));
            }
            let rel = rel_l2(&got, &want);
            assert!(rel <= 1e-5, "{name}: paged logits off the full forward by {rel:e}");
            assert_eq!(cache.row_len(1), 11);
            assert_eq!(cache.row_len(0), 0);

            // Row 0 joins with a shorter sequence; one step of both rows reads each its own keys.
            let other: Vec<i32> = (0..6).map(|i| (i * 5 + 1) % 50).collect();
            cache.select(&[0]).unwrap();
            pieces(&g, &model, &cache, &[other[..5].to_vec()]);
            cache.select(&[0, 1]).unwrap();
            let both = pieces(&g, &model, &cache, &[vec![other[5]], vec![seq[3]]]);
            let mut longer = seq.clone();
            longer.push(seq[3]);
            let want0 = full(&g, &model, &other);
            let want1 = full(&g, &model, &longer);
            let rel0 = rel_l2(&both[..vocab], &want0[5 * vocab..]);
            let rel1 = rel_l2(&both[vocab..], &want1[11 * vocab..]);
            assert!(rel0.max(rel1) <= 1e-5, "{name}: two rows off their own forwards by {rel0:e}, {rel1:e}");

            let (used, _) = cache.blocks_in_use();
            assert!(used > 0);
            cache.release(0);
            cache.release(1);
            assert_eq!(cache.blocks_in_use().0, 0, "{name}: released rows keep blocks");
        }
        Ok(())
    });
}
