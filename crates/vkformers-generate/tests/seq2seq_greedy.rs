//! Greedy generation of the encoder-decoder fixtures against transformers' `generate`
//! (`greedy_seq2seq.json`, written by `tools/parity/make_seq2seq_fixtures.py`: each source row
//! alone, cached, EOS ending a row): the cached loop gives transformers' sequences, the uncached
//! loop (whole decoder prefix each step) the same, and the two sources batched (right-padded)
//! give each row's sequence padded with `pad_token_id` after its EOS.

mod common;

use std::path::PathBuf;

use common::{fixtures_root as root, ids, json};

use vkformers_generate::seq2seq::{greedy, greedy_uncached, Seq2SeqOptions};
use vkformers_models::model::Model;
use vkformers_models::parity::fixtures;
use vkformers_tensor::Graph;
use vkformers_vk::testing::on_every_device;

#[test]
fn cached_and_uncached_greedy_equal_transformers_generate() {
    let dirs: Vec<PathBuf> = fixtures(&root()).into_iter().filter(|d| d.join("greedy_seq2seq.json").exists()).collect();
    assert!(dirs.len() >= 12, "encoder-decoder fixtures missing under {}", root().display());
    on_every_device("seq2seq greedy", |ctx| {
        for dir in &dirs {
            let name = dir.file_name().unwrap().to_string_lossy().into_owned();
            let g = Graph::new(ctx);
            let model = Model::load(&g, dir).unwrap();
            let want = json(&dir.join("greedy_seq2seq.json"));
            let max_new = want["max_new_tokens"].as_u64().unwrap() as usize;
            let gen = json(&dir.join("generation_config.json"));
            let opts = Seq2SeqOptions::from_configs(&gen, &model.config, max_new).unwrap();
            let rows = want["rows"].as_array().unwrap();
            let sources: Vec<Vec<u32>> = rows.iter().map(|r| ids(&r["input_ids"])).collect();
            let expected: Vec<Vec<u32>> = rows.iter().map(|r| ids(&r["sequences"])).collect();
            for (src, seq) in sources.iter().zip(&expected) {
                let cached = greedy(&g, &model, std::slice::from_ref(src), &opts).unwrap();
                assert_eq!(&cached[0], seq, "{name}: cached greedy of {src:?}");
                let uncached = greedy_uncached(&g, &model, std::slice::from_ref(src), &opts).unwrap();
                assert_eq!(&uncached[0], seq, "{name}: uncached greedy of {src:?}");
            }
            // Batched: the shorter source right-padded; each row as alone, pad after its EOS.
            let batched = greedy(&g, &model, &sources, &opts).unwrap();
            let longest = expected.iter().map(Vec::len).max().unwrap();
            for (got, seq) in batched.iter().zip(&expected) {
                let mut padded = seq.clone();
                padded.resize(longest, opts.pad);
                assert_eq!(got, &padded, "{name}: batched greedy");
            }
        }
        Ok(())
    });
}
