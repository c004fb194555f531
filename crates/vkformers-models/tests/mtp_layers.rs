//! DeepSeek-V3 checkpoints store `num_nextn_predict_layers` multi-token-prediction layers after
//! the decoder's, as `model.layers.{N}.*` (N = num_hidden_layers). `DeepseekV3ForCausalLM` builds
//! no module for them (transformers skips them as unexpected keys and does not save them): a
//! folder with them loads as the folder without, saving leaves them out, and a layer past the
//! declared count is still an unexpected tensor.

use std::path::{Path, PathBuf};

use vkformers_io::{ModelWeights, SaveTensor};
use vkformers_models::model::Model;
use vkformers_models::weights::HostTensor;
use vkformers_tensor::Graph;
use vkformers_vk::testing::on_every_device;

fn fixture(name: &str) -> PathBuf {
    PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("../../tests/fixtures").join(name)
}

/// A copy of the `deepseek_v3` fixture (2 layers) in `out` with an MTP layer at index `at`: layer
/// 1's tensors renamed, plus the MTP block's own (`enorm`, `hnorm`, `eh_proj` [H, 2H],
/// `shared_head.norm`, `shared_head.head` [V, H], its `embed_tokens`), with `edit` on the config.
fn with_mtp_layer(out: &Path, at: usize, edit: impl Fn(&mut serde_json::Value)) {
    let src = ModelWeights::open(fixture("deepseek_v3")).unwrap();
    let mut kept: Vec<(String, Vec<usize>, Vec<f32>)> =
        src.names().map(|n| (n.to_string(), src.info(n).unwrap().shape, src.tensor_f32(n).unwrap())).collect();
    let extra: Vec<_> = kept
        .iter()
        .filter_map(|(n, s, d)| {
            let rest = n.strip_prefix("model.layers.1.")?;
            Some((format!("model.layers.{at}.{rest}"), s.clone(), d.iter().map(|x| x * 0.5).collect()))
        })
        .collect();
    kept.extend(extra);
    let (h, v) = (32, 128);
    let fill = |n: usize| (0..n).map(|i| (i % 7) as f32 * 0.01).collect::<Vec<f32>>();
    for (name, shape) in [
        ("enorm.weight", vec![h]),
        ("hnorm.weight", vec![h]),
        ("eh_proj.weight", vec![h, 2 * h]),
        ("shared_head.norm.weight", vec![h]),
        ("shared_head.head.weight", vec![v, h]),
        ("embed_tokens.weight", vec![v, h]),
    ] {
        let n = shape.iter().product();
        kept.push((format!("model.layers.{at}.{name}"), shape, fill(n)));
    }
    let save: Vec<SaveTensor<'_>> =
        kept.iter().map(|(n, s, d)| SaveTensor::f32(n.clone(), vkformers_io::Dtype::F32, s, d)).collect();
    vkformers_io::save_safetensors(out, &save, u64::MAX).unwrap();
    let mut config = vkformers_io::read_json(fixture("deepseek_v3").join("config.json")).unwrap();
    edit(&mut config);
    vkformers_io::write_json_atomic(out.join("config.json"), &config).unwrap();
}

fn sorted(mut v: Vec<HostTensor>) -> Vec<HostTensor> {
    v.sort_by(|a, b| a.name.cmp(&b.name));
    v
}

#[test]
fn mtp_layers_are_skipped_on_load_and_not_saved() {
    let dir = tempfile::tempdir().unwrap();
    // The fixture's config has `num_nextn_predict_layers: 1`: layer 2 is the MTP layer.
    with_mtp_layer(dir.path(), 2, |_| {});
    let saved = tempfile::tempdir().unwrap();
    on_every_device("mtp layers skipped", |ctx| {
        let g = Graph::new(ctx);
        let plain = Model::load(&g, &fixture("deepseek_v3")).unwrap();
        let with = Model::load(&g, dir.path()).unwrap();
        assert_eq!(with.spec.layers.len(), 2);
        let (a, b) = (sorted(plain.hf_params(&g).unwrap()), sorted(with.hf_params(&g).unwrap()));
        assert_eq!(a, b, "the parameters with and without the MTP layer");
        with.save(&g, saved.path(), Some(dir.path()), u64::MAX).unwrap();
        Ok(())
    });
    let out = ModelWeights::open(saved.path()).unwrap();
    let names: Vec<&str> = out.names().collect();
    assert!(names.iter().any(|n| n.starts_with("model.layers.1.")), "{names:?}");
    assert!(!names.iter().any(|n| n.starts_with("model.layers.2.")), "MTP layer saved: {names:?}");
}

fn load_error(dir: &Path) -> String {
    let msg = std::cell::RefCell::new(String::new());
    on_every_device("mtp load error", |ctx| {
        let g = Graph::new(ctx);
        *msg.borrow_mut() = Model::load(&g, dir).err().map(|e| e.to_string()).unwrap_or_default();
        Ok(())
    });
    msg.into_inner()
}

#[test]
fn layers_past_the_mtp_count_are_still_unexpected() {
    // One MTP layer declared, stored at index 3 (past it): an error naming the tensor.
    let dir = tempfile::tempdir().unwrap();
    with_mtp_layer(dir.path(), 3, |_| {});
    let e = load_error(dir.path());
    assert!(e.contains("unexpected tensor `model.layers.3."), "{e}");
    // No MTP layers declared: layer 2 is unexpected too.
    let dir = tempfile::tempdir().unwrap();
    with_mtp_layer(dir.path(), 2, |c| c["num_nextn_predict_layers"] = 0.into());
    let e = load_error(dir.path());
    assert!(e.contains("unexpected tensor `model.layers.2."), "{e}");
}
