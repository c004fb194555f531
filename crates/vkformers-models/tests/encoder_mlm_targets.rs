//! The masked-LM loss with the head on the target rows only (`encoder::masked_lm_target_loss`,
//! what `vkformers train` uses on every masked-LM encoder) against the dense head over every
//! row and against transformers' fixture (tests/fixtures/<name>/reference.safetensors, from
//! tools/parity/make_encoder_fixtures.py): the same loss and the same gradient of every
//! parameter, on fixtures whose labels leave most rows out (-100).

use std::collections::HashMap;
use std::path::{Path, PathBuf};

use vkformers_io::ModelWeights;
use vkformers_models::encoder::{self, EncoderBatch};
use vkformers_models::model::Model;
use vkformers_models::parity::TOL_GRAD;
use vkformers_tensor::Graph;
use vkformers_vk::testing::on_every_device;

fn fixture(name: &str) -> PathBuf {
    PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("../../tests/fixtures").join(name)
}

fn ints(r: &ModelWeights, name: &str) -> Vec<i32> {
    let raw = r.tensor_bytes(name).unwrap();
    raw.data.chunks_exact(4).map(|c| i32::from_le_bytes([c[0], c[1], c[2], c[3]])).collect()
}

fn l2(v: impl Iterator<Item = f64>) -> f64 {
    v.map(|x| x * x).sum::<f64>().sqrt()
}

/// ‖got − want‖.
fn diff(got: &[f32], want: &[f32]) -> f64 {
    l2(got.iter().zip(want).map(|(a, b)| f64::from(*a) - f64::from(*b)))
}

/// Loss and gradients by stored name, through the sparse head (`sparse`) or the dense one.
fn loss_and_grads(dir: &Path, sparse: bool) -> (f32, HashMap<String, Vec<f32>>) {
    let out = std::cell::RefCell::new((0.0, HashMap::new()));
    on_every_device(&format!("masked-LM loss of {}", dir.display()), |ctx| {
        let r = ModelWeights::open_file(dir.join("reference.safetensors")).unwrap();
        let (ids, mask, labels) = (ints(&r, "input_ids"), ints(&r, "attention_mask"), ints(&r, "labels"));
        let types = r.info("token_type_ids").is_ok().then(|| ints(&r, "token_type_ids"));
        let shape = r.info("input_ids").unwrap().shape.clone();
        let g = Graph::new(ctx);
        let m = Model::load(&g, dir).unwrap();
        let b = EncoderBatch { ids: &ids, mask: &mask, token_types: types.as_deref(), batch: shape[0], seq: shape[1] };
        let loss = if sparse {
            encoder::masked_lm_target_loss(&g, &m.spec, &m.weights, &b, &labels).unwrap().1
        } else {
            let logits = encoder::forward(&g, &m.spec, &m.weights, &b).unwrap();
            encoder::masked_lm_loss(&g, &logits, &labels).unwrap()
        };
        g.backward(&loss)?;
        let grads = m.hf_grads(&g).unwrap().into_iter().map(|h| (h.name, h.data)).collect();
        *out.borrow_mut() = (g.read(&loss)?[0], grads);
        Ok(())
    });
    out.into_inner()
}

fn check(name: &str) {
    let dir = fixture(name);
    let r = ModelWeights::open_file(dir.join("reference.safetensors")).unwrap();
    let labels = ints(&r, "labels");
    let targets = labels.iter().filter(|&&l| l != -100).count();
    assert!(targets * 2 < labels.len(), "{name}: the fixture should leave most rows out ({targets} targets)");
    let (sparse_loss, sparse) = loss_and_grads(&dir, true);
    let (dense_loss, dense) = loss_and_grads(&dir, false);
    let want = r.tensor_f32("loss").unwrap()[0];
    let rel_loss = |a: f32, b: f32| (f64::from(a) - f64::from(b)).abs() / f64::from(b).abs();
    assert!(rel_loss(sparse_loss, dense_loss) <= 1e-6, "{name}: sparse loss {sparse_loss} vs dense {dense_loss}");
    assert!(rel_loss(sparse_loss, want) <= 1e-5, "{name}: sparse loss {sparse_loss} vs transformers {want}");
    assert_eq!(sparse.len(), dense.len(), "{name}: gradient sets");
    let largest = dense.values().map(|v| l2(v.iter().map(|x| f64::from(*x)))).fold(0.0, f64::max);
    let (mut worst_dense, mut worst_ref) = (0.0f64, 0.0f64);
    for (n, g) in &sparse {
        let w = r.tensor_f32(&format!("grad.{n}")).unwrap();
        // ‖got − want‖ over ‖want‖, or over the largest gradient's norm for a tensor whose
        // gradient is ~0 in theory (a bias before a norm: its relative error is noise).
        let norm = l2(w.iter().map(|x| f64::from(*x)));
        let scale = if norm <= 1e-6 * largest { largest } else { norm };
        worst_dense = worst_dense.max(diff(g, &dense[n]) / scale);
        worst_ref = worst_ref.max(diff(g, &w) / scale);
    }
    eprintln!("{name}: {targets} targets; loss {sparse_loss}; worst gradient vs dense {worst_dense:.2e}, vs transformers {worst_ref:.2e}");
    assert!(worst_dense <= 1e-5, "{name}: sparse vs dense gradients {worst_dense:e}");
    assert!(worst_ref <= TOL_GRAD, "{name}: sparse gradients vs transformers {worst_ref:e}");
}

#[test]
fn bert_target_rows_equal_dense_and_transformers() {
    check("bert");
}

#[test]
fn modernbert_target_rows_equal_dense_and_transformers() {
    check("modernbert");
}

#[test]
fn modernbert_sparse_prediction_target_rows_equal_dense_and_transformers() {
    check("modernbert_sparse");
}

#[test]
fn mobilebert_target_rows_equal_dense_and_transformers() {
    check("mobilebert");
}

#[test]
fn deberta_v2_target_rows_equal_dense_and_transformers() {
    check("deberta_v2");
}
