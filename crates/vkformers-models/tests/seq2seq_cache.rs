//! The cached decoder step (`Seq2SeqCache::step`) gives the logits of the whole-prefix decoder
//! (`seq2seq::decode`) at every position of a teacher-forced decoder sequence longer than the
//! fixtures' windows, for every encoder-decoder fixture: T5's position bias, BART-family
//! positions, and T5Gemma's RoPE, grouped keys, softcaps and sliding window (3 keys) in the cache
//! (Switch Transformers' below-capacity case only: see the skip).

use std::path::PathBuf;

use vkformers_models::model::Model;
use vkformers_models::parity::fixtures;
use vkformers_models::seq2seq::{decode, encode, Encoded, Seq2SeqCache};
use vkformers_tensor::Graph;
use vkformers_vk::testing::on_every_device;

fn root() -> PathBuf {
    PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("../../tests/fixtures")
}

#[test]
fn cached_steps_equal_the_whole_prefix_decoder() {
    let dirs: Vec<PathBuf> = fixtures(&root()).into_iter().filter(|d| d.join("greedy_seq2seq.json").exists()).collect();
    assert!(dirs.iter().any(|d| d.ends_with("t5gemma")), "the t5gemma fixture is missing");
    on_every_device("seq2seq cache", |ctx| {
        for dir in &dirs {
            let name = dir.file_name().unwrap().to_string_lossy().into_owned();
            let g = Graph::new(ctx);
            let model = Model::load(&g, dir).unwrap();
            let (spec, w) = (&model.spec, &model.weights);
            // Two sources, the second right-padded; 7 decoder tokens per row (odd shapes).
            let (b, s, t) = (2, 5, 7);
            let s2s = spec.seq2seq.as_ref().unwrap();
            // Switch Transformers' capacity counts a sequence's tokens per forward: the whole
            // prefix drops tokens one-token steps never do (transformers' cached generate too,
            // which greedy_seq2seq.json pins), so the two agree only below the capacity.
            if s2s.switch.as_ref().is_some_and(|sw| sw.capacity < t) {
                continue;
            }
            let pad = s2s.pad_token_id;
            let ids: Vec<i32> = (0..b * s).map(|j| if j >= 8 { pad } else { 3 + (j as i32 * 7) % 50 }).collect();
            let mask: Vec<i32> = (0..b * s).map(|j| i32::from(j < 8)).collect();
            let dec: Vec<i32> = (0..b * t).map(|j| 3 + (j as i32 * 11) % 53).collect();
            g.no_grad(|| {
                let hidden = encode(&g, spec, w, &ids, &mask, (b, s)).unwrap();
                let enc = Encoded { hidden: &hidden, mask: &mask, len: s };
                let whole = g.read(&decode(&g, spec, w, &enc, (&dec, &vec![1; b * t]), (b, t)).unwrap()).unwrap();
                let v = whole.len() / (b * t);
                let cache = Seq2SeqCache::new(&g, spec, w, &enc, b, t).unwrap();
                for step in 0..t {
                    let col: Vec<i32> = (0..b).map(|r| dec[r * t + step]).collect();
                    let got = g.read(&cache.step(&g, spec, w, &col).unwrap()).unwrap();
                    for r in 0..b {
                        let want = &whole[(r * t + step) * v..(r * t + step + 1) * v];
                        let scale = want.iter().fold(0f32, |m, x| m.max(x.abs()));
                        let err = got[r * v..(r + 1) * v].iter().zip(want).fold(0f32, |m, (a, b)| m.max((a - b).abs()));
                        assert!(err <= 1e-5 * scale.max(1.0), "{name}: step {step} row {r}: {err:e} of {scale:e}");
                    }
                }
            });
        }
        Ok(())
    });
}
