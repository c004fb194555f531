//! Beam search of decoder-only fixtures (llama, gpt2, qwen2) against transformers' `generate`
//! (`tests/fixtures_generate/beam/`, written by `tools/parity/decoder_beam_reference.py`: each
//! prompt alone, three settings of num_beams, length_penalty, early_stopping, no_repeat_ngram_size
//! and num_return_sequences): the same sequences, and `sequences_scores` to relative 1e-5.

use std::path::PathBuf;

use vkformers_generate::decoder_beam::{beam_search, BeamIds, BeamOptions, EarlyStopping};
use vkformers_models::model::Model;
use vkformers_tensor::Graph;
use vkformers_vk::testing::on_every_device;

fn repo(path: &str) -> PathBuf {
    PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("../..").join(path)
}

fn ids(v: &serde_json::Value) -> Vec<u32> {
    v.as_array().unwrap().iter().map(|t| t.as_u64().unwrap() as u32).collect()
}

fn options(o: &serde_json::Value) -> BeamOptions {
    let early = match &o["early_stopping"] {
        serde_json::Value::Bool(true) => EarlyStopping::True,
        serde_json::Value::Bool(false) => EarlyStopping::False,
        _ => EarlyStopping::Never,
    };
    let u = |k: &str| o[k].as_u64().unwrap() as usize;
    BeamOptions {
        num_beams: u("num_beams"),
        length_penalty: o["length_penalty"].as_f64().unwrap(),
        early_stopping: early,
        no_repeat_ngram_size: u("no_repeat_ngram_size"),
        num_return_sequences: u("num_return_sequences"),
    }
}

#[test]
fn decoder_beam_search_equals_transformers() {
    on_every_device("decoder beam search", |ctx| {
        for name in ["llama", "gpt2", "qwen2"] {
            let want: serde_json::Value = serde_json::from_str(
                &std::fs::read_to_string(repo(&format!("tests/fixtures_generate/beam/{name}.json"))).unwrap(),
            )
            .unwrap();
            let g = Graph::new(ctx);
            let model = Model::load(&g, &repo(&format!("tests/fixtures/{name}"))).unwrap();
            let bid = BeamIds {
                eos: vec![want["eos_token_id"].as_u64().unwrap() as u32],
                pad: want["pad_token_id"].as_u64().unwrap() as u32,
                forced_bos: None,
                forced_eos: None,
                max_new_tokens: want["max_new_tokens"].as_u64().unwrap() as usize,
            };
            for run in want["runs"].as_array().unwrap() {
                let bo = options(&run["options"]);
                for row in run["rows"].as_array().unwrap() {
                    let prompt = ids(&row["input_ids"]);
                    let got = beam_search(&g, &model, std::slice::from_ref(&prompt), &bid, &bo).unwrap().remove(0);
                    let seqs: Vec<Vec<u32>> = row["sequences"].as_array().unwrap().iter().map(ids).collect();
                    let got_seqs: Vec<Vec<u32>> = got.iter().map(|h| h.tokens.clone()).collect();
                    assert_eq!(got_seqs, seqs, "{name} {}: sequences after {prompt:?}", run["options"]);
                    for (h, s) in got.iter().zip(row["sequences_scores"].as_array().unwrap()) {
                        let s = s.as_f64().unwrap();
                        let rel = (f64::from(h.score) - s).abs() / s.abs().max(1e-30);
                        assert!(rel <= 1e-5, "{name} {}: score {} vs {s}", run["options"], h.score);
                    }
                }
            }
        }
        Ok(())
    });
}
