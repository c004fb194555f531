//! Bare encoders (`BertModel`, `XLMRobertaModel`: tensors without the base prefix) give
//! transformers' last hidden state, and its mean (over the attention mask) and CLS poolings and
//! the normalized mean are sentence-transformers' embeddings, on a batch with a padded row
//! (fixtures of `tools/parity/make_encoder_fixtures.py --embed`).

use std::path::PathBuf;

use vkformers_io::ModelWeights;
use vkformers_models::encoder::{self, EncoderBatch, Pooling};
use vkformers_models::model::Model;
use vkformers_tensor::Graph;
use vkformers_vk::testing::on_every_device;

fn fixture(name: &str) -> PathBuf {
    PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("../../tests/fixtures_embed").join(name)
}

fn rel(got: &[f32], want: &[f32]) -> f64 {
    assert_eq!(got.len(), want.len());
    let d: f64 = got.iter().zip(want).map(|(a, b)| (f64::from(*a) - f64::from(*b)).powi(2)).sum();
    let n: f64 = want.iter().map(|b| f64::from(*b).powi(2)).sum();
    (d / n).sqrt()
}

fn check(name: &str) {
    on_every_device(&format!("embed {name}"), |ctx| {
        let dir = fixture(name);
        let r = ModelWeights::open_file(dir.join("reference.safetensors")).unwrap();
        let ints = |n: &str| -> Option<Vec<i32>> {
            let raw = r.tensor_bytes(n).ok()?;
            Some(raw.data.chunks_exact(4).map(|c| i32::from_le_bytes([c[0], c[1], c[2], c[3]])).collect())
        };
        let (ids, mask, types) = (ints("input_ids").unwrap(), ints("attention_mask").unwrap(), ints("token_type_ids"));
        let shape = r.info("input_ids").unwrap().shape;
        let (b, t) = (shape[0], shape[1]);
        let g = Graph::new(ctx);
        let model = Model::load(&g, &dir).unwrap();
        let batch = EncoderBatch { ids: &ids, mask: &mask, token_types: types.as_deref(), batch: b, seq: t };
        let hidden = encoder::forward(&g, &model.spec, &model.weights, &batch).unwrap();
        let want = |n: &str| r.tensor_f32(n).unwrap();
        let e = rel(&g.read(&hidden).unwrap(), &want("hidden"));
        assert!(e <= 1e-5, "{name}: last hidden state off by {e:e}");
        let mean = g.read(&encoder::pool(&g, &hidden, &mask, (b, t), Pooling::Mean).unwrap()).unwrap();
        let e = rel(&mean, &want("mean"));
        assert!(e <= 1e-5, "{name}: mean pooling off by {e:e}");
        let cls = g.read(&encoder::pool(&g, &hidden, &mask, (b, t), Pooling::Cls).unwrap()).unwrap();
        let e = rel(&cls, &want("cls"));
        assert!(e <= 1e-5, "{name}: CLS pooling off by {e:e}");
        if let Some(fused) = encoder::mean_pool(&g, &hidden, &mask, (b, t)).unwrap() {
            let e = rel(&g.read(&fused).unwrap(), &want("mean"));
            assert!(e <= 1e-5, "{name}: mean pooling by attention off by {e:e}");
        }
        let mut unit = mean.clone();
        encoder::normalize_rows(&mut unit, model.spec.hidden);
        let e = rel(&unit, &want("mean_normalized"));
        assert!(e <= 1e-5, "{name}: normalized mean off by {e:e}");
        Ok(())
    });
}

#[test]
fn bare_bert_hidden_states_and_poolings_match_transformers() {
    check("bert_model");
}

#[test]
fn bare_xlm_roberta_hidden_states_and_poolings_match_transformers() {
    check("xlm-roberta_model");
}

#[test]
fn bare_esm_mpnet_albert_eurobert_and_modernbert_match_transformers() {
    // ESM: token_dropout and the zeroed padding rows; MPNet: its relative bias; ALBERT: its
    // shared layer and embedding projection; EuroBERT and ModernBERT: no pooler, their final
    // norm; all stored without the base prefix.
    for name in ["esm_model", "mpnet_model", "albert_model", "eurobert_model", "modernbert_model"] {
        check(name);
    }
}

#[test]
fn bare_deberta_v2_deberta_and_mobilebert_match_transformers() {
    // Disentangled attention (v3's shared keys and log buckets; v1's fused in_proj), no pooler;
    // MobileBERT's bottlenecks with its pooler.
    for name in ["deberta_v2_model", "deberta_model", "mobilebert_model"] {
        check(name);
    }
}

/// A bare BERT whose checkpoint has no pooler (`BertModel(add_pooling_layer=False)`) loads without
/// it and gives the same hidden states and poolings as the folder with one.
#[test]
fn bare_bert_without_its_pooler_loads_and_matches() {
    let tmp = tempfile::tempdir().unwrap();
    let src = fixture("bert_model");
    for f in ["config.json", "reference.safetensors"] {
        std::fs::copy(src.join(f), tmp.path().join(f)).unwrap();
    }
    let bytes = std::fs::read(src.join("model.safetensors")).unwrap();
    let st = safetensors::SafeTensors::deserialize(&bytes).unwrap();
    let kept: Vec<(String, safetensors::tensor::TensorView<'_>)> =
        st.tensors().into_iter().filter(|(n, _)| !n.starts_with("pooler.")).collect();
    assert!(kept.len() < st.len(), "the fixture has a pooler to leave out");
    std::fs::write(tmp.path().join("model.safetensors"), safetensors::serialize(kept, None).unwrap()).unwrap();
    on_every_device("bert without pooler", |ctx| {
        let g = Graph::new(ctx);
        let with = Model::load(&g, &src).unwrap();
        let without = Model::load(&g, tmp.path()).unwrap();
        assert!(with.weights.get("pooler.dense.weight").is_ok());
        assert!(without.weights.get("pooler.dense.weight").is_err());
        let (ids, mask) = (vec![5, 9, 3, 7, 2, 8], vec![1, 1, 1, 1, 1, 0]);
        let batch = EncoderBatch { ids: &ids, mask: &mask, token_types: None, batch: 2, seq: 3 };
        let a = g.read(&encoder::forward(&g, &with.spec, &with.weights, &batch).unwrap()).unwrap();
        let b = g.read(&encoder::forward(&g, &without.spec, &without.weights, &batch).unwrap()).unwrap();
        assert_eq!(a, b);
        Ok(())
    });
}

/// Mean pooling by zero-score attention (`encoder::mean_pool`, what `embed` runs) against the
/// f64 mean over each row's real tokens, on odd shapes (3 rows of 7 and 5 tokens with padding,
/// hidden 128 and 192), and `None` where the hidden size is not a multiple of 64.
#[test]
fn mean_pool_by_attention_equals_the_masked_mean() {
    on_every_device("mean_pool", |ctx| {
        let g = Graph::new(ctx);
        for (b, t, d) in [(3, 7, 128), (3, 5, 192)] {
            let hidden: Vec<f32> = (0..b * t * d).map(|i| ((i * 37 % 101) as f32 - 50.0) / 17.0).collect();
            let lens = [t, 2, t - 1];
            let mask: Vec<i32> = (0..b).flat_map(|r| (0..t).map(move |j| i32::from(j < lens[r]))).collect();
            let h = g.constant(&hidden, &[b * t, d]).unwrap();
            let got = g.read(&encoder::mean_pool(&g, &h, &mask, (b, t)).unwrap().unwrap()).unwrap();
            let mut worst = 0.0f64;
            for r in 0..b {
                for c in 0..d {
                    let sum: f64 = (0..lens[r]).map(|j| f64::from(hidden[(r * t + j) * d + c])).sum();
                    let want = sum / lens[r] as f64;
                    worst = worst.max((f64::from(got[r * d + c]) - want).abs() / want.abs().max(1.0));
                }
            }
            assert!(worst <= 1e-6, "{b}x{t}x{d}: mean pooling by attention off by {worst:e}");
        }
        let h = g.constant(&[0.0; 2 * 3 * 40], &[6, 40]).unwrap();
        assert!(encoder::mean_pool(&g, &h, &[1; 6], (2, 3)).unwrap().is_none(), "hidden 40 is left to `pool`");
        Ok(())
    });
}

/// `Graph::inference` (what `embed` records in) runs the encoder with its inference fusions: the
/// post-LN add + LayerNorm in one kernel writing the 16-bit copy the products read, the GELU
/// writing down's 16-bit operand, attention's 16-bit o for o_proj, one cast of a state read by
/// q, k and v. Each gives the values of the ops it replaces, so the last hidden state is bit for
/// bit the taped forward's (training's ops, none of these fusions), in f32 and with bf16 weights
/// under autocast; and it runs fewer dispatches under bf16.
#[test]
fn inference_fusions_give_the_taped_forward_bit_for_bit() {
    on_every_device("encoder inference fusions", |ctx| {
        for dtype in [vkformers_tensor::DType::F32, vkformers_tensor::DType::BF16] {
            let g = Graph::new(ctx);
            let model = Model::load_for_inference(&g, &fixture("bert_model"), dtype).unwrap();
            g.set_autocast(Some(model.weight_dtype()));
            // 2 rows of 13, one padded: 26 rows, GEMMs rather than the few-row GEMV.
            let ids: Vec<i32> = (0..26).map(|i| 1 + (i * 7) % 100).collect();
            let mask: Vec<i32> = (0..26).map(|i| i32::from(i < 22)).collect(); // row 2: 9 real tokens
            let batch = EncoderBatch { ids: &ids, mask: &mask, token_types: None, batch: 2, seq: 13 };
            let run = |fused: bool| -> (Vec<u32>, u64) {
                g.sync().unwrap();
                g.set_profiling(true);
                let hidden = |g: &Graph<'_>| encoder::hidden_states(g, &model.spec, &model.weights, &batch).unwrap();
                let h = if fused { g.inference(|| hidden(&g)) } else { hidden(&g) };
                let bits = g.read(&h).unwrap().iter().map(|v| v.to_bits()).collect();
                let dispatches = g.take_profile().unwrap().unwrap().dispatches;
                g.set_profiling(false);
                g.clear_tape();
                (bits, dispatches)
            };
            let ((fused, fewer), (taped, all)) = (run(true), run(false));
            assert_eq!(fused, taped, "{dtype:?}: inference's hidden state differs from the taped forward's");
            assert!(fewer < all, "{dtype:?}: {fewer} dispatches in inference, {all} taped");
        }
        Ok(())
    });
}
