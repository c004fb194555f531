//! Beam search of decoder-only fixtures (llama, gpt2, qwen2) against transformers' `generate`
//! (`tests/fixtures_generate/beam/`, written by `tools/parity/decoder_beam_reference.py`: each
//! prompt alone, three settings of num_beams, length_penalty, early_stopping, no_repeat_ngram_size
//! and num_return_sequences): the same sequences, and `sequences_scores` to relative 1e-5, from
//! the search on the paged KV cache (beams sharing the prompt's blocks) and from the uncached one.
//! On 3-position blocks (prompts span several, beams copy partly filled last blocks on write) the
//! cached search also gives them, holds the prompt's blocks once (as many blocks as the prompt
//! alone after every beam has it) and gives every block back at the end; on sliding-window models
//! (window 4: beams let go of shared blocks they can no longer see; gpt_oss with its sinks) and on
//! multi-head latent attention's latent cache (deepseek_v2: one pool read as keys and values;
//! deepseek_v3_wide: latent rows over 256 values, the wide latent kernel's) it equals the uncached
//! search.

mod common;

use std::path::PathBuf;

use common::{beam_options as options, ids, json};

use vkformers_generate::decoder_beam::{
    beam_search, beam_search_paged, beam_search_uncached, BeamIds, BeamOptions, EarlyStopping, Hypothesis,
};
use vkformers_models::decoder::{forward_cached_last, Batch, KvCache};
use vkformers_models::model::Model;
use vkformers_tensor::Graph;
use vkformers_vk::testing::on_every_device;

fn repo(path: &str) -> PathBuf {
    PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("../..").join(path)
}

/// Checks hypotheses against a fixture row.
fn check(got: &[Hypothesis], row: &serde_json::Value, what: &str) {
    let seqs: Vec<Vec<u32>> = row["sequences"].as_array().unwrap().iter().map(ids).collect();
    let got_seqs: Vec<Vec<u32>> = got.iter().map(|h| h.tokens.clone()).collect();
    assert_eq!(got_seqs, seqs, "{what}: sequences");
    for (h, s) in got.iter().zip(row["sequences_scores"].as_array().unwrap()) {
        let s = s.as_f64().unwrap();
        let rel = (f64::from(h.score) - s).abs() / s.abs().max(1e-30);
        assert!(rel <= 1e-5, "{what}: score {} vs {s}", h.score);
    }
}

/// Blocks of `block_size` positions one row holding `prompt` alone takes.
fn prompt_blocks(g: &Graph<'_>, model: &Model, prompt: &[u32], block_size: usize) -> usize {
    let cache = KvCache::with_block_size(g, &model.spec, 1, prompt.len(), block_size).unwrap();
    let ids: Vec<i32> = prompt.iter().map(|&t| t as i32).collect();
    let mask = vec![1; ids.len()];
    let batch = Batch { ids: &ids, mask: &mask, batch: 1, seq: ids.len() };
    g.no_grad(|| forward_cached_last(g, &model.spec, &model.weights, &batch, &cache)).unwrap();
    cache.blocks_in_use().0
}

/// The model fixture `tests/fixtures/<name>`.
fn fixture_model(g: &Graph<'_>, name: &str) -> Model {
    Model::load(g, &repo(&format!("tests/fixtures/{name}"))).unwrap()
}

fn fixture(name: &str) -> (serde_json::Value, BeamIds) {
    let want = json(&repo(&format!("tests/fixtures_generate/beam/{name}.json")));
    let bid = BeamIds {
        eos: vec![want["eos_token_id"].as_u64().unwrap() as u32],
        pad: want["pad_token_id"].as_u64().unwrap() as u32,
        forced_bos: None,
        forced_eos: None,
        max_new_tokens: want["max_new_tokens"].as_u64().unwrap() as usize,
    };
    (want, bid)
}

/// A fixture's beam searches, one per row of each run: its options, the row transformers
/// wrote, its prompt, and a label naming the fixture, the options and the prompt.
struct Search<'a> {
    options: BeamOptions,
    row: &'a serde_json::Value,
    prompt: Vec<u32>,
    what: String,
}

fn searches<'a>(name: &str, want: &'a serde_json::Value) -> Vec<Search<'a>> {
    let mut out = Vec::new();
    for run in want["runs"].as_array().unwrap() {
        for row in run["rows"].as_array().unwrap() {
            let prompt = ids(&row["input_ids"]);
            let what = format!("{name} {} after {prompt:?}", run["options"]);
            out.push(Search { options: options(&run["options"]), row, prompt, what });
        }
    }
    out
}

#[test]
fn decoder_beam_search_equals_transformers() {
    on_every_device("decoder beam search", |ctx| {
        for name in ["llama", "gpt2", "qwen2"] {
            let (want, bid) = fixture(name);
            let g = Graph::new(ctx);
            let model = fixture_model(&g, name);
            for Search { options: bo, row, prompt, what } in searches(name, &want) {
                let one = std::slice::from_ref(&prompt);
                check(&beam_search(&g, &model, one, &bid, &bo).unwrap()[0], row, &what);
                check(&beam_search_uncached(&g, &model, one, &bid, &bo).unwrap()[0], row, &format!("{what} uncached"));
            }
        }
        Ok(())
    });
}

#[test]
fn beams_share_the_prompt_blocks_and_give_every_block_back() {
    on_every_device("decoder beam search block sharing", |ctx| {
        for name in ["llama", "qwen2"] {
            let (want, bid) = fixture(name);
            let g = Graph::new(ctx);
            let model = fixture_model(&g, name);
            for Search { options: bo, row, prompt, what } in searches(name, &want) {
                let what = format!("{what}, 3-position blocks");
                let (got, used) = beam_search_paged(&g, &model, &prompt, &bid, &bo, 3).unwrap();
                check(&got, row, &what);
                assert_eq!(used.after_prompt, prompt_blocks(&g, &model, &prompt, 3), "{what}: prompt blocks");
                assert!(used.peak > used.after_prompt, "{what}: beams never took blocks of their own");
                assert_eq!(used.at_end, 0, "{what}: blocks leaked");
            }
        }
        Ok(())
    });
}

#[test]
fn window_and_latent_beams_on_shared_blocks_equal_the_uncached_search() {
    on_every_device("decoder beam search, sliding windows and latent caches", |ctx| {
        for name in ["gemma2", "mistral", "gpt_oss", "deepseek_v2", "deepseek_v3_wide"] {
            let g = Graph::new(ctx);
            let model = fixture_model(&g, name);
            let bid = BeamIds { eos: vec![], pad: 0, forced_bos: None, forced_eos: None, max_new_tokens: 9 };
            let bo = BeamOptions {
                num_beams: 3,
                length_penalty: 1.0,
                early_stopping: EarlyStopping::False,
                no_repeat_ngram_size: 2,
                num_return_sequences: 3,
            };
            let prompt: Vec<u32> = vec![5, 17, 3, 29, 11, 8, 41];
            let want = beam_search_uncached(&g, &model, std::slice::from_ref(&prompt), &bid, &bo).unwrap().remove(0);
            let (got, used) = beam_search_paged(&g, &model, &prompt, &bid, &bo, 3).unwrap();
            let tokens = |h: &[Hypothesis]| h.iter().map(|h| h.tokens.clone()).collect::<Vec<_>>();
            assert_eq!(tokens(&got), tokens(&want), "{name}: sequences");
            for (a, b) in got.iter().zip(&want) {
                let rel = (a.score - b.score).abs() / b.score.abs().max(1e-30);
                assert!(rel <= 1e-5, "{name}: score {} vs uncached {}", a.score, b.score);
            }
            assert_eq!(used.at_end, 0, "{name}: blocks leaked");
        }
        Ok(())
    });
}
