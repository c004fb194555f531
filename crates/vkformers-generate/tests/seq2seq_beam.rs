//! Beam search of the encoder-decoder fixtures against transformers' `generate`
//! (`beam_seq2seq.json`, written by `tools/parity/make_seq2seq_fixtures.py`: each source alone,
//! three settings of num_beams, length_penalty, early_stopping (true, false, "never"),
//! no_repeat_ngram_size and num_return_sequences): the same sequences, and the same
//! `sequences_scores` to f32 rounding (relative 1e-5). And the same search over three sources of
//! different lengths at once against transformers' batched `generate` (`beam_batched_seq2seq.json`,
//! written by `tools/parity/seq2seq_batched_beam_reference.py`: right-padded sources, every
//! returned row as long as the batch's longest).

mod common;

use std::path::PathBuf;

use common::{beam_options as options, fixtures_root as root, ids, json};

use vkformers_generate::seq2seq::Seq2SeqOptions;
use vkformers_generate::seq2seq_beam::beam_search;
use vkformers_models::model::Model;
use vkformers_models::parity::fixtures;
use vkformers_tensor::Graph;
use vkformers_vk::testing::on_every_device;

#[test]
fn beam_search_equals_transformers_sequences_and_scores() {
    let dirs: Vec<PathBuf> = fixtures(&root()).into_iter().filter(|d| d.join("beam_seq2seq.json").exists()).collect();
    assert!(dirs.len() >= 12, "encoder-decoder fixtures missing under {}", root().display());
    on_every_device("seq2seq beam search", |ctx| {
        for dir in &dirs {
            let name = dir.file_name().unwrap().to_string_lossy().into_owned();
            let g = Graph::new(ctx);
            let model = Model::load(&g, dir).unwrap();
            let want = json(&dir.join("beam_seq2seq.json"));
            let max_new = want["max_new_tokens"].as_u64().unwrap() as usize;
            let gen = json(&dir.join("generation_config.json"));
            let opts = Seq2SeqOptions::from_configs(&gen, &model.config, max_new).unwrap();
            for run in want["runs"].as_array().unwrap() {
                let bo = options(&run["options"]);
                for row in run["rows"].as_array().unwrap() {
                    let src = ids(&row["input_ids"]);
                    let got = beam_search(&g, &model, std::slice::from_ref(&src), &opts, &bo).unwrap().remove(0);
                    let seqs: Vec<Vec<u32>> = row["sequences"].as_array().unwrap().iter().map(ids).collect();
                    let scores: Vec<f64> =
                        row["sequences_scores"].as_array().unwrap().iter().map(|s| s.as_f64().unwrap()).collect();
                    let got_seqs: Vec<Vec<u32>> = got.iter().map(|h| h.tokens.clone()).collect();
                    assert_eq!(got_seqs, seqs, "{name} {}: sequences of {src:?}", run["options"]);
                    for (h, s) in got.iter().zip(&scores) {
                        let rel = (f64::from(h.score) - s).abs() / s.abs().max(1e-30);
                        assert!(rel <= 1e-5, "{name} {}: score {} vs {s}", run["options"], h.score);
                    }
                }
            }
        }
        Ok(())
    });
}

#[test]
fn batched_beam_search_equals_transformers_batched_generate() {
    let dirs: Vec<PathBuf> =
        fixtures(&root()).into_iter().filter(|d| d.join("beam_batched_seq2seq.json").exists()).collect();
    assert!(dirs.len() >= 12, "batched beam references missing under {}", root().display());
    on_every_device("seq2seq batched beam search", |ctx| {
        for dir in &dirs {
            let name = dir.file_name().unwrap().to_string_lossy().into_owned();
            let g = Graph::new(ctx);
            let model = Model::load(&g, dir).unwrap();
            let want = json(&dir.join("beam_batched_seq2seq.json"));
            let max_new = want["max_new_tokens"].as_u64().unwrap() as usize;
            let gen = json(&dir.join("generation_config.json"));
            let opts = Seq2SeqOptions::from_configs(&gen, &model.config, max_new).unwrap();
            let sources: Vec<Vec<u32>> = want["sources"].as_array().unwrap().iter().map(ids).collect();
            for run in want["runs"].as_array().unwrap() {
                let bo = options(&run["options"]);
                let got = beam_search(&g, &model, &sources, &opts, &bo).unwrap();
                assert_eq!(got.len(), sources.len());
                let got: Vec<_> = got.into_iter().flatten().collect();
                let seqs: Vec<Vec<u32>> = run["sequences"].as_array().unwrap().iter().map(ids).collect();
                let got_seqs: Vec<Vec<u32>> = got.iter().map(|h| h.tokens.clone()).collect();
                assert_eq!(got_seqs, seqs, "{name} {}: sequences", run["options"]);
                for (h, s) in got.iter().zip(run["sequences_scores"].as_array().unwrap()) {
                    let s = s.as_f64().unwrap();
                    let rel = (f64::from(h.score) - s).abs() / s.abs().max(1e-30);
                    assert!(rel <= 1e-5, "{name} {}: score {} vs {s}", run["options"], h.score);
                }
            }
        }
        Ok(())
    });
}
