//! Llama 4 over a left-padded batch against transformers (`tests/fixtures_generate/left_padded/`,
//! written by `tools/parity/batched_greedy_reference.py --left-padded`): three rows padded by 9, 6
//! and 0 columns, chunks of 4 positions. transformers counts each row's attention chunks from its
//! first real token (`masking_utils.chunked_overlay`), and its NoPE layers' temperature
//! `1 + β·log(1 + ⌊(c + 1)/s⌋)` from the column c, padding included (`arange(T) +
//! past_seen_tokens`), not from the position id:
//! - the uncached forward of the padded batch gives transformers' logits at every real token;
//! - cached decoding fed transformers' tokens gives its logits at every step;
//! - batched greedy decoding gives its tokens.

mod common;

use std::path::PathBuf;

use common::{fixtures_root, json};

use vkformers_generate::decode::greedy_batched;
use vkformers_io::ModelWeights;
use vkformers_models::decoder::{forward, forward_cached, Batch, KvCache};
use vkformers_models::model::Model;
use vkformers_models::parity::TOL_LOGITS;
use vkformers_tensor::Graph;
use vkformers_vk::testing::on_every_device;

fn reference_dir() -> PathBuf {
    PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("../../tests/fixtures_generate/left_padded")
}

/// Rows of integers of a JSON array of arrays.
fn rows(v: &serde_json::Value) -> Vec<Vec<i32>> {
    v.as_array().unwrap().iter().map(|r| common::ids(r).into_iter().map(|x| x as i32).collect()).collect()
}

/// max |got − want| / max |want| over the `[.., V]` rows of `want` that `keep` selects.
fn rel_error(got: &[f32], want: &[f32], vocab: usize, keep: impl Fn(usize) -> bool) -> f64 {
    let (mut diff, mut scale) = (0f64, 0f64);
    let rows = got.chunks(vocab).zip(want.chunks(vocab)).enumerate().filter(|(r, _)| keep(*r));
    for (_, (a, b)) in rows {
        for (x, y) in a.iter().zip(b) {
            diff = diff.max(f64::from((x - y).abs()));
            scale = scale.max(f64::from(y.abs()));
        }
    }
    diff / scale
}

#[test]
fn llama4_text_left_padded_batch_matches_transformers() {
    let name = "llama4_text";
    let refs = json(&reference_dir().join(format!("{name}.json")));
    let logits = ModelWeights::open_file(reference_dir().join(format!("{name}.safetensors"))).unwrap();
    let (forward_ref, steps_ref) = (logits.tensor_f32("forward").unwrap(), logits.tensor_f32("steps").unwrap());
    let (ids, mask, new) = (rows(&refs["input_ids"]), rows(&refs["attention_mask"]), rows(&refs["new_tokens"]));
    let (b, t, n) = (ids.len(), ids[0].len(), new[0].len());
    assert!(mask.iter().any(|r| r[0] == 0 && r.iter().take_while(|&&m| m == 0).count() % 4 != 0));
    let (flat_ids, flat_mask) = (ids.concat(), mask.concat());
    on_every_device("llama4 left-padded", |ctx| {
        let g = Graph::new(ctx);
        let model = Model::load(&g, &fixtures_root().join(name)).unwrap();
        let vocab = model.spec.vocab;
        // Uncached: every real token's logits.
        let batch = Batch { ids: &flat_ids, mask: &flat_mask, batch: b, seq: t };
        let got = g.read(&g.no_grad(|| forward(&g, &model.spec, &model.weights, &batch)).unwrap()).unwrap();
        let err = rel_error(&got, &forward_ref, vocab, |r| flat_mask[r] != 0);
        assert!(err <= TOL_LOGITS, "{name}: uncached left-padded forward, relative error {err:e}");
        // Cached, fed transformers' tokens: the logits of each step's last column.
        let cache = KvCache::batched(&g, &model.spec, b, t + n).unwrap();
        let mut worst = 0f64;
        g.no_grad(|| {
            let (mut ids, mut mask, mut cols) = (flat_ids.clone(), flat_mask.clone(), t);
            for step in 0..n {
                let batch = Batch { ids: &ids, mask: &mask, batch: b, seq: cols };
                let all = g.read(&forward_cached(&g, &model.spec, &model.weights, &batch, &cache).unwrap()).unwrap();
                let last: Vec<f32> =
                    (0..b).flat_map(|r| all[((r + 1) * cols - 1) * vocab..(r + 1) * cols * vocab].to_vec()).collect();
                let want = &steps_ref[step * b * vocab..(step + 1) * b * vocab];
                worst = worst.max(rel_error(&last, want, vocab, |_| true));
                (ids, mask, cols) = ((0..b).map(|r| new[r][step]).collect(), vec![1; b], 1);
            }
        });
        assert!(worst <= TOL_LOGITS, "{name}: cached left-padded steps, worst relative error {worst:e}");
        // Greedy: transformers' tokens.
        let prompts: Vec<Vec<u32>> =
            rows(&refs["prompts"]).iter().map(|p| p.iter().map(|&x| x as u32).collect()).collect();
        let tokens = greedy_batched(&g, &model, &prompts, n).unwrap();
        let want: Vec<Vec<u32>> = new.iter().map(|r| r.iter().map(|&x| x as u32).collect()).collect();
        assert_eq!(tokens, want, "{name}: left-padded batched greedy vs transformers' generate");
        eprintln!("{name}: left-padded forward rel {err:.2e}, cached steps worst rel {worst:.2e}");
        Ok(())
    });
}
