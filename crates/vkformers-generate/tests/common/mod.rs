//! Helpers shared by the generate crate's integration tests (each test binary uses only some).
#![allow(dead_code)]

pub mod sink;

use std::path::{Path, PathBuf};

use vkformers_generate::beam::{BeamOptions, EarlyStopping};
use vkformers_generate::generation::{
    generate_cached_stepping, left_pad, Context, GenerateOptions, Generation, Stepping,
};
use vkformers_models::decoder::KvCache;
use vkformers_models::model::Model;
use vkformers_tensor::Graph;

/// The model fixtures: `$VKFORMERS_FIXTURES`, else the repository's `tests/fixtures`.
pub fn fixtures_root() -> PathBuf {
    std::env::var_os("VKFORMERS_FIXTURES")
        .map(PathBuf::from)
        .unwrap_or_else(|| PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("../../tests/fixtures"))
}

/// A JSON reference file, parsed (a missing one panics naming it).
pub fn json(path: &Path) -> serde_json::Value {
    serde_json::from_str(&std::fs::read_to_string(path).unwrap_or_else(|e| panic!("{}: {e}", path.display()))).unwrap()
}

/// A JSON array of token ids.
pub fn ids(v: &serde_json::Value) -> Vec<u32> {
    v.as_array().unwrap().iter().map(|t| t.as_u64().unwrap() as u32).collect()
}

/// The beam options of a reference run's `options` (`early_stopping` true, false or "never").
pub fn beam_options(o: &serde_json::Value) -> BeamOptions {
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

/// Logits `[rows, V]` of a 5-column prefill of `rows` rows (ids `i * 7 % 50 + 3`, key mask
/// `prefill_mask [rows * 5]`) and of three decode steps after it, each feeding the rows' greedy
/// ids back, as the cached forward gives them, and the profile of the last step.
pub fn cached_decode_logits(
    g: &vkformers_tensor::Graph<'_>,
    model: &vkformers_models::model::Model,
    rows: usize,
    prefill_mask: Vec<i32>,
) -> (Vec<Vec<f32>>, vkformers_tensor::profile::Profile) {
    use vkformers_models::decoder::{forward_cached_last, Batch, KvCache};
    let cache = KvCache::batched(g, &model.spec, rows, 16).unwrap();
    let mut ids: Vec<i32> = (0..rows * 5).map(|i| (i * 7 % 50 + 3) as i32).collect();
    let mut mask = prefill_mask;
    let mut out = Vec::new();
    for t in [5, 1, 1, 1] {
        let batch = Batch { ids: &ids, mask: &mask, batch: rows, seq: t };
        g.set_profiling(out.len() == 3);
        let logits = g
            .no_grad(|| g.read(&forward_cached_last(g, &model.spec, &model.weights, &batch, &cache).unwrap()))
            .unwrap();
        let v = logits.len() / rows;
        ids =
            logits.chunks(v).map(|r| (0..v).fold(0, |best, j| if r[j] > r[best] { j } else { best }) as i32).collect();
        mask = vec![1; rows];
        out.push(logits);
    }
    let profile = g.take_profile().unwrap().expect("profiling was on");
    g.set_profiling(false);
    (out, profile)
}

/// The prompts of a fixture's `greedy.json`.
pub fn greedy_prompts(name: &str) -> Vec<Vec<u32>> {
    let v = json(&fixtures_root().join(name).join("greedy.json"));
    v["prompts"].as_array().unwrap().iter().map(ids).collect()
}

/// The synchronous loop's generation of `prompts` (every step recorded and read back before the
/// next: no lookahead, no replay) on a fresh cache: what the loops that run ahead must equal.
pub fn synchronous(g: &Graph<'_>, model: &Model, prompts: &[Vec<u32>], opts: &GenerateOptions) -> Generation {
    let (ids, mask, width) = left_pad(prompts, opts.pad);
    let history = ids.chunks(width).map(|r| r.iter().map(|&t| t as u32).collect()).collect();
    let masks = mask.chunks(width).map(<[i32]>::to_vec).collect();
    let mut cache = KvCache::batched(g, &model.spec, prompts.len(), width + opts.max_new_tokens).unwrap();
    let ctx = Context { history, masks };
    generate_cached_stepping(g, model, &mut cache, ctx, opts, Stepping::Synchronous, &mut |_, _| false).unwrap()
}
